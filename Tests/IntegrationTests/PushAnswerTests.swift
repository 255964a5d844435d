import AsyncHTTPClient
import NIOCore
import NIOHTTP1
import PushFakes
@testable import PushSenderService
import PostgresNIO
import Testing
import WhisperShared

/// How each provider answer is read: delivered, retried (with its Retry-After), a dead
/// token, or a failure for the dead-letter stream. The wire formats are APNs's
/// `{"reason": ...}` and Google's API error with FCM's error code in its details.
@Suite struct PushAnswerTests {
    static func providers() throws -> (APNsProvider, FCMProvider, HTTPClient) {
        let keys = try ProviderKeys()
        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        let apns = try APNsProvider(
            settings: .init(keyPEM: keys.apnsKey.pemRepresentation, keyID: keys.apnsKeyID, teamID: keys.teamID, topic: "t", baseURL: "https://127.0.0.1:1"),
            client: client, timeout: .seconds(1)
        )
        let fcm = try FCMProvider(
            settings: .init(serviceAccount: keys.serviceAccount(tokenURI: "https://127.0.0.1:1/token"), baseURL: "https://127.0.0.1:1"),
            client: client, timeout: .seconds(1)
        )
        return (apns, fcm, client)
    }

    static func fcmError(_ status: Int, _ code: String?, message: String = "", errorCode: String? = nil) -> ByteBuffer {
        let details = errorCode.map { #","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"\#($0)"}]"# } ?? ""
        return ByteBuffer(string: #"{"error":{"code":\#(status),"message":"\#(message)","status":"\#(code ?? "")"\#(details)}}"#)
    }

    @Test func apnsAnswers() async throws {
        let (apns, _, client) = try Self.providers()
        func read(_ status: UInt, _ reason: String?, retryAfter: String? = nil) -> ProviderAnswer {
            var headers = HTTPHeaders()
            if let retryAfter { headers.add(name: "retry-after", value: retryAfter) }
            return apns.answer(status: status, headers: headers, body: ByteBuffer(string: reason.map { #"{"reason":"\#($0)"}"# } ?? ""))
        }
        #expect(read(200, nil) == .delivered)
        #expect(read(410, "Unregistered") == .deadToken(reason: "Unregistered"))
        #expect(read(400, "BadDeviceToken") == .deadToken(reason: "BadDeviceToken"))
        #expect(read(400, "DeviceTokenNotForTopic") == .deadToken(reason: "DeviceTokenNotForTopic"))
        #expect(read(400, "BadTopic") == .failed(reason: "400 BadTopic"))
        #expect(read(403, "ExpiredProviderToken") == .retry(after: nil, reason: "ExpiredProviderToken"))
        #expect(read(429, "TooManyRequests", retryAfter: "7") == .retry(after: .seconds(7), reason: "TooManyRequests"))
        #expect(read(503, "ServiceUnavailable") == .retry(after: nil, reason: "ServiceUnavailable"))
        #expect(read(500, nil) == .retry(after: nil, reason: "status 500"))
        // A token that is not hexadecimal never goes into a URL.
        let answer = await apns.send(Wakeup(job: .init(to: "WSP-AAAA-AAAA-AAAA", kind: .message, id: "x", at: 0), token: "../../x", tokenKind: .push), ttl: .seconds(1))
        #expect(answer == .deadToken(reason: "BadDeviceToken (not hexadecimal)"))
        try await client.shutdown()
    }

    @Test func fcmAnswers() async throws {
        let (_, fcm, client) = try Self.providers()
        func read(_ status: UInt, _ body: ByteBuffer, retryAfter: String? = nil) -> ProviderAnswer {
            var headers = HTTPHeaders()
            if let retryAfter { headers.add(name: "retry-after", value: retryAfter) }
            return fcm.answer(status: status, headers: headers, body: body)
        }
        #expect(read(200, ByteBuffer(string: #"{"name":"projects/p/messages/1"}"#)) == .delivered)
        #expect(read(404, Self.fcmError(404, "NOT_FOUND", errorCode: "UNREGISTERED")) == .deadToken(reason: "UNREGISTERED"))
        #expect(read(403, Self.fcmError(403, "PERMISSION_DENIED", errorCode: "SENDER_ID_MISMATCH")) == .deadToken(reason: "SENDER_ID_MISMATCH"))
        #expect(read(400, Self.fcmError(400, "INVALID_ARGUMENT", message: "The registration token is not a valid FCM registration token", errorCode: "INVALID_ARGUMENT"))
            == .deadToken(reason: "INVALID_ARGUMENT: The registration token is not a valid FCM registration token"))
        if case .failed = read(400, Self.fcmError(400, "INVALID_ARGUMENT", message: "Invalid value at 'message.android.ttl'", errorCode: "INVALID_ARGUMENT")) {} else {
            Issue.record("a bad payload is not the token's fault")
        }
        #expect(read(401, Self.fcmError(401, "UNAUTHENTICATED")) == .retry(after: nil, reason: "UNAUTHENTICATED"))
        #expect(read(429, Self.fcmError(429, "RESOURCE_EXHAUSTED", errorCode: "QUOTA_EXCEEDED"), retryAfter: "30") == .retry(after: .seconds(30), reason: "QUOTA_EXCEEDED"))
        #expect(read(503, Self.fcmError(503, "UNAVAILABLE", errorCode: "UNAVAILABLE")) == .retry(after: nil, reason: "UNAVAILABLE"))
        #expect(read(502, ByteBuffer(string: "<html>bad gateway</html>")) == .retry(after: nil, reason: "status 502"))
        try await client.shutdown()
    }

    @Test func backoffDoublesWithJitterUpToItsMaximum() {
        for attempt in 1...12 {
            let delay = PushWorker.backoff(attempt: attempt, initial: .seconds(1), maximum: .seconds(60))
            let base = min(Double(1 << (attempt - 1)), 60.0)
            #expect(delay >= .milliseconds(Int64(base * 500)) && delay <= .milliseconds(Int64(base * 1000)), "attempt \(attempt): \(delay)")
        }
    }

    /// A dead token is removed only while it is still the device's: a token the app
    /// replaced meanwhile (`update_tokens`) stays.
    @Test func aDeadTokenIsRemovedOnlyWhileItIsStillTheDevices() async throws {
        try await MessagingStack.start().running { stack in
            let bob = try await stack.user(on: 0, platform: .ios, pushToken: "aa11")
            try await bob.connection.updateTokens(pushToken: .set("bb22"))
            let client = PostgresClient(configuration: stack.database.clientConfiguration, backgroundLogger: TestServers.logger)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                let devices = DeviceDirectory(postgres: client, logger: TestServers.logger)
                let staleRemoved = try await devices.removeToken("aa11", kind: .push, of: bob.whisperId)
                #expect(!staleRemoved, "the old token is gone already")
                let kept = try await devices.activeDevice(of: bob.whisperId)?.pushToken
                #expect(kept == "bb22")
                let wrongKind = try await devices.removeToken("bb22", kind: .voip, of: bob.whisperId)
                #expect(!wrongKind, "not the VoIP token")
                let removed = try await devices.removeToken("bb22", kind: .push, of: bob.whisperId)
                #expect(removed)
                let after = try await devices.activeDevice(of: bob.whisperId)
                #expect(after != nil && after?.pushToken == nil)
                group.cancelAll()
            }
        }
    }
}
