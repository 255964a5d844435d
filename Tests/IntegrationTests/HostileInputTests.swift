import Foundation
import Testing
import WhisperShared

/// Frames a hostile client may send, against a real gateway process: each gets its
/// answer, the socket stays usable, and the process stays up.
@Suite struct HostileInputTests {
    /// Numbers no field can hold: past Int64 both ways, past Double, and 30 digits.
    static let hostileNumbers = [
        "9223372036854775808", "-9223372036854775809", "1e400", "-1e400", "123456789012345678901234567890",
        "18446744073709551616", "1.0e19",
    ]

    /// Gateway and auth executables on a migrated database, with the gateway's refusal
    /// limits out of the way unless `extra` sets them.
    static func withGateway(_ extra: [String: String] = [:], _ body: (Int, Process) async throws -> Void) async throws {
        let database = try await TestDatabases.shared.make(migrated: false)
        defer { TestDatabases.shared.release(database) }
        var environment = Executables.environment(database)
        try Executables.migrate(environment)
        let authPort = try TestServers.freePort()
        let authInternalPort = try TestServers.freePort()
        var authEnvironment = environment
        authEnvironment["AUTH_HTTP_PORT"] = "\(authPort)"
        authEnvironment["AUTH_INTERNAL_HTTP_PORT"] = "\(authInternalPort)"
        let (auth, _) = try Executables.launch("auth", environment: authEnvironment, keepOutput: false)
        defer {
            if auth.isRunning { auth.terminate() }
            auth.waitUntilExit()
        }
        _ = try await HTTP.waitFor("http://127.0.0.1:\(authPort)/ready") { $0.status == 200 }
        let port = try TestServers.freePort()
        environment["GATEWAY_HTTP_PORT"] = "\(port)"
        environment["GATEWAY_AUTH_URL"] = "http://127.0.0.1:\(authInternalPort)"
        environment["GATEWAY_RATE_LIMIT_REFUSALS_PER_SOCKET"] = "1000000/60s"
        environment["GATEWAY_RATE_LIMIT_REFUSALS_PER_ADDRESS"] = "1000000/60s"
        environment["GATEWAY_RATE_LIMIT_CONTROL_PER_SOCKET"] = "1000000/60s"
        environment["GATEWAY_RATE_LIMIT_CONTROL_PER_ADDRESS"] = "1000000/60s"
        environment.merge(extra) { _, new in new }
        let (process, _) = try Executables.launch("gateway", environment: environment, keepOutput: false)
        defer {
            if process.isRunning { process.terminate() }
            process.waitUntilExit()
        }
        _ = try await HTTP.waitFor("http://127.0.0.1:\(port)/ready") { $0.status == 200 }
        try await body(port, process)
    }

    /// Every client frame example of docs/protocol.md with one payload field (nested
    /// fields too) replaced by `number`, as text.
    static func framesWithEveryField(setTo number: String) throws -> [String] {
        var frames: [String] = []
        for example in try ProtocolExamples.all() {
            guard ClientFrameType(rawValue: example.type) != nil,
                  let object = try JSONSerialization.jsonObject(with: Data(example.json.utf8)) as? [String: Any],
                  let payload = object["payload"] as? [String: Any] else { continue }
            for path in fieldPaths(payload) {
                var changed = object
                changed["payload"] = replacing(path, in: payload, with: "@@HOSTILE@@")
                let text = String(decoding: try JSONSerialization.data(withJSONObject: changed), as: UTF8.self)
                frames.append(text.replacingOccurrences(of: "\"@@HOSTILE@@\"", with: number))
            }
        }
        return frames
    }

    static func fieldPaths(_ object: [String: Any]) -> [[String]] {
        object.keys.sorted().flatMap { key -> [[String]] in
            if let nested = object[key] as? [String: Any], !nested.isEmpty {
                return [[key]] + fieldPaths(nested).map { [key] + $0 }
            }
            return [[key]]
        }
    }

    static func replacing(_ path: [String], in object: [String: Any], with value: Any) -> [String: Any] {
        var object = object
        guard let key = path.first else { return object }
        if path.count == 1 {
            object[key] = value
        } else if let nested = object[key] as? [String: Any] {
            object[key] = replacing(Array(path.dropFirst()), in: nested, with: value)
        }
        return object
    }

    @Test func numbersNoFieldCanHoldAreRefusedAndTheGatewayStaysUp() async throws {
        try await Self.withGateway { port, process in
            let url = "ws://127.0.0.1:\(port)/ws"
            // The frame that used to stop the gateway, from an anonymous socket, first.
            var frames = Self.hostileNumbers.map { #"{"type":"ping","payload":{"protocolVersion":\#($0),"cryptoVersion":1}}"# }
            for number in Self.hostileNumbers {
                frames += try Self.framesWithEveryField(setTo: number)
            }
            #expect(frames.count > 500, "\(frames.count) frames")
            let answered = frames
            try await WebSocketTest.connect(url) { socket in
                for frame in answered {
                    try await socket.send(frame)
                    let answer = try await socket.receive()
                    #expect(answer.type == .error, "\(frame)")
                    #expect(answer.payload(as: ErrorPayload.self)?.code == .invalidPayload, "\(frame)")
                }
                // The same socket still works.
                try await socket.send(#"{"type":"ping","requestId":"after","payload":{}}"#)
                #expect(try await socket.receive().type == .pong)
            }
            #expect(process.isRunning)
            // And another socket is served.
            try await WebSocketTest.connect(url) { socket in
                try await socket.send(#"{"type":"ping","payload":{"protocolVersion":1,"cryptoVersion":1}}"#)
                #expect(try await socket.receive().type == .pong)
            }
        }
    }

    @Test func everyFuzzCorpusFrameIsAnsweredAndTheGatewayStaysUp() async throws {
        let folder = TestServers.repoRoot.appendingPathComponent("Tests/Fuzz/corpus/frames")
        let files = try FileManager.default.contentsOfDirectory(at: folder, includingPropertiesForKeys: nil).sorted { $0.path < $1.path }
        // Text frames must be UTF-8 (the WebSocket layer closes on anything else): those go as text.
        let frames = try files.map { try Data(contentsOf: $0) }.compactMap { String(data: $0, encoding: .utf8) }
            .filter { !$0.isEmpty && $0.utf8.count <= Limits.MAX_WS_FRAME_BYTES }
        #expect(frames.count > 1_000)
        try await Self.withGateway { port, process in
            try await WebSocketTest.connect("ws://127.0.0.1:\(port)/ws") { socket in
                for frame in frames {
                    try await socket.send(frame)
                    // One answer per frame: an error with a code the contract gives for
                    // what was sent, or the answer to a valid frame.
                    let answer: ServerFrame
                    do {
                        answer = try await socket.receive()
                    } catch {
                        Issue.record("no answer to \(frame.prefix(300))")
                        throw error
                    }
                    if answer.type == .error {
                        let code = answer.payload(as: ErrorPayload.self)?.code
                        let registration = frame.contains(#""type":"register_"#)
                        let expected: Set<ErrorCode?> = registration
                            ? [.invalidPayload, .authFailed, .rateLimited, .notFound] : [.invalidPayload, .notRegistered]
                        #expect(expected.contains(code), "\(code?.rawValue ?? "?") for \(frame.prefix(300))")
                    } else {
                        #expect([.pong, .registerChallenge].contains(answer.type), "\(answer.type.rawValue) for \(frame.prefix(300))")
                    }
                }
            }
            #expect(process.isRunning)
        }
    }

    @Test func aTokenThatIsNotALiveSessionIsNotRegisteredWhateverItsShape() async throws {
        let tokens = ["short", "", String(repeating: "x", count: 43), "not base64url !", String(repeating: "A", count: 5_000), "WSP-AAAA-BBBB-CCCC"]
        try await Self.withGateway { port, _ in
            try await WebSocketTest.connect("ws://127.0.0.1:\(port)/ws") { socket in
                for token in tokens {
                    for frame in [
                        #"{"type":"logout","requestId":"r","payload":{"protocolVersion":1,"cryptoVersion":1,"sessionToken":"\#(token)"}}"#,
                        #"{"type":"fetch_pending","requestId":"r","payload":{"protocolVersion":1,"cryptoVersion":1,"sessionToken":"\#(token)","limit":5}}"#,
                        #"{"type":"session_refresh","requestId":"r","payload":{"protocolVersion":1,"cryptoVersion":1,"sessionToken":"\#(token)"}}"#,
                    ] {
                        try await socket.send(frame)
                        let answer = try await socket.receive()
                        #expect(answer.payload(as: ErrorPayload.self)?.code == .notRegistered, "token of \(token.count) characters")
                        #expect(answer.requestId == "r")
                    }
                }
                // A token that is not a string is a schema violation, not a session question.
                try await socket.send(#"{"type":"logout","payload":{"protocolVersion":1,"cryptoVersion":1,"sessionToken":12}}"#)
                #expect(try await socket.receive().payload(as: ErrorPayload.self)?.code == .invalidPayload)
            }
        }
    }
}

/// The per-socket and per-address limits on frames no other limit sees.
@Suite struct SocketLimitTests {
    @Test func aSocketThatKeepsSendingGarbageIsClosedWith4003() async throws {
        try await HostileInputTests.withGateway(["GATEWAY_RATE_LIMIT_REFUSALS_PER_SOCKET": "5/60s"]) { port, process in
            let close = try await WebSocketTest.connect("ws://127.0.0.1:\(port)/ws") { socket in
                for _ in 0..<5 {
                    try await socket.send("not json")
                    #expect(try await socket.receive().payload(as: ErrorPayload.self)?.code == .invalidPayload)
                }
                try await socket.send("not json")
                // No answer: the socket is closed.
                #expect(try await socket.next(timeout: .seconds(10)) == nil)
            }
            #expect(close?.closeCode == .unknown(4003))
            #expect(process.isRunning)
        }
    }

    @Test func refusedFramesWithoutASessionCountToo() async throws {
        try await HostileInputTests.withGateway(["GATEWAY_RATE_LIMIT_REFUSALS_PER_SOCKET": "3/60s"]) { port, _ in
            let frame = #"{"type":"fetch_pending","payload":{"protocolVersion":1,"cryptoVersion":1,"sessionToken":"\#(String(repeating: "q", count: 43))"}}"#
            let close = try await WebSocketTest.connect("ws://127.0.0.1:\(port)/ws") { socket in
                for _ in 0..<3 {
                    try await socket.send(frame)
                    #expect(try await socket.receive().payload(as: ErrorPayload.self)?.code == .notRegistered)
                }
                try await socket.send(frame)
                #expect(try await socket.next(timeout: .seconds(10)) == nil)
            }
            #expect(close?.closeCode == .unknown(4003))
        }
    }

    @Test func pingsPastTheSocketLimitAreRateLimited() async throws {
        try await HostileInputTests.withGateway(["GATEWAY_RATE_LIMIT_CONTROL_PER_SOCKET": "3/60s"]) { port, _ in
            try await WebSocketTest.connect("ws://127.0.0.1:\(port)/ws") { socket in
                for _ in 0..<3 {
                    try await socket.send(#"{"type":"ping","payload":{}}"#)
                    #expect(try await socket.receive().type == .pong)
                }
                try await socket.send(#"{"type":"ping","requestId":"p4","payload":{}}"#)
                let answer = try await socket.receive()
                #expect(answer.payload(as: ErrorPayload.self)?.code == .rateLimited)
                #expect(answer.requestId == "p4")
            }
            // Another socket has a bucket of its own.
            try await WebSocketTest.connect("ws://127.0.0.1:\(port)/ws") { socket in
                try await socket.send(#"{"type":"ping","payload":{}}"#)
                #expect(try await socket.receive().type == .pong)
            }
        }
    }

    @Test func socketsFromOneAddressShareItsRefusalLimit() async throws {
        try await HostileInputTests.withGateway(["GATEWAY_RATE_LIMIT_REFUSALS_PER_ADDRESS": "4/60s"]) { port, _ in
            let url = "ws://127.0.0.1:\(port)/ws"
            try await WebSocketTest.connect(url) { first in
                for _ in 0..<2 {
                    try await first.send("[]")
                    #expect(try await first.receive().payload(as: ErrorPayload.self)?.code == .invalidPayload)
                }
            }
            let close = try await WebSocketTest.connect(url) { second in
                for _ in 0..<2 {
                    try await second.send("[]")
                    #expect(try await second.receive().payload(as: ErrorPayload.self)?.code == .invalidPayload)
                }
                try await second.send("[]")
                #expect(try await second.next(timeout: .seconds(10)) == nil)
            }
            #expect(close?.closeCode == .unknown(4003))
        }
    }
}

/// The JSON examples of docs/protocol.md, each with its frame type.
enum ProtocolExamples {
    struct Example {
        var json: String
        var type: String
    }

    static func all() throws -> [Example] {
        let text = try String(contentsOf: TestServers.repoRoot.appendingPathComponent("docs/protocol.md"), encoding: .utf8)
        var examples: [Example] = []
        var current: [String]?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line == "```json" {
                current = []
            } else if let lines = current, line == "```" {
                let json = lines.joined(separator: "\n")
                let object = try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any]
                examples.append(Example(json: json, type: object?["type"] as? String ?? ""))
                current = nil
            } else if current != nil {
                current?.append(String(line))
            }
        }
        return examples
    }
}

/// Item 10 of issue 34: times read back from Redis are untrusted input too.
@Suite struct RedisValuesTests {
    @Test func aGatewayCensusTimeThatCannotBeSubtractedIsStaleNotATrap() async throws {
        let server = try RedisProcess()
        try server.start()
        let configuration = try #require(RedisConfiguration(url: server.url))
        try await TestServers.withRedis(configuration) { redis in
            let now = Clock.millisecondsNow()
            try await redis.send("HSET", GatewayCensus.key, "hostile", "1 1 -9223372036854775808", "fine", "2 1 \(now)")
            let live = try await GatewayCensus.read(now: now, maxAge: .seconds(60), on: redis)
            #expect(live.map(\.instance) == ["fine"])
            #expect(try await redis.send("HEXISTS", GatewayCensus.key, "hostile").int == 0)
        }
    }
}
