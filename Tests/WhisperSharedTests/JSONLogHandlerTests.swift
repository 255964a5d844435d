import Foundation
import Logging
import Testing
@testable import WhisperShared

@Suite struct JSONLogHandlerTests {
    @Test func oneJSONObjectPerLineWithTheStandardFields() throws {
        let sink = JSONLogSink.capturing()
        var logger = Logger(label: "gateway") { JSONLogHandler(label: $0, service: "gateway", level: .debug, sink: sink) }
        logger[metadataKey: "connId"] = "c-1"
        logger.info("frame_rejected", metadata: ["code": "INVALID_PAYLOAD", "sizeBytes": .stringConvertible(120), "note": "line\nbreak \"quoted\""])
        let lines = sink.captured
        #expect(lines.count == 1)
        #expect(lines[0].hasSuffix("\n"))
        let object = try #require(try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any])
        #expect(object["service"] as? String == "gateway")
        #expect(object["level"] as? String == "info")
        #expect(object["event"] as? String == "frame_rejected")
        #expect(object["connId"] as? String == "c-1")
        #expect(object["code"] as? String == "INVALID_PAYLOAD")
        #expect(object["sizeBytes"] as? Int == 120)
        #expect(object["note"] as? String == "line\nbreak \"quoted\"")
        #expect((object["ts"] as? String)?.hasSuffix("Z") == true)
    }

    @Test func secretsAndPayloadsAreRedactedWhateverTheCaller() throws {
        let sink = JSONLogSink.capturing()
        let logger = Logger(label: "auth") { JSONLogHandler(label: $0, service: "auth", level: .info, sink: sink) }
        logger.info("oops", metadata: [
            "sessionToken": "tok-123", "ciphertext": "AAAA", "sig": "BBBB", "signPublicKey": "CCCC",
            "nested": ["pushToken": "DDDD", "ok": "fine"], "messageId": "m-1",
        ])
        let line = try #require(sink.captured.first)
        for secret in ["tok-123", "AAAA", "BBBB", "CCCC", "DDDD"] {
            #expect(!line.contains(secret), "\(secret) leaked into \(line)")
        }
        #expect(line.contains("\"messageId\":\"m-1\""))
        #expect(line.contains("\"ok\":\"fine\""))
    }

    @Test func levelsBelowTheThresholdAreDropped() {
        let sink = JSONLogSink.capturing()
        let logger = Logger(label: "x") { JSONLogHandler(label: $0, service: "x", level: .warning, sink: sink) }
        logger.info("quiet")
        logger.error("loud")
        #expect(sink.captured.count == 1)
        #expect(sink.captured[0].contains("\"source\":"))
    }
}
