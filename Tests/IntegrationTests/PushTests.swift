import Foundation
import PostgresNIO
import PushFakes
import PushSenderService
import Synchronization
import Testing
import WhisperClient
import WhisperMessaging
import WhisperShared

/// push-sender end to end: messages through gateway and router to offline users, the
/// push stream, and local APNs and FCM stand-ins over HTTP/2 and TLS that check the
/// provider tokens and script their answers.
@Suite(.serialized)
struct PushTests {
    /// The two fakes, their keys, and the answers they give (changed by each test).
    final class Providers: Sendable, StartedForATest {
        let keys: ProviderKeys
        let certificates: TestCertificates
        let apns: FakeHTTP2Server
        let fcm: FakeHTTP2Server
        let script: Script

        /// What the fakes answer, and how many provider tokens they refused.
        final class Script: Sendable {
            let apns = Mutex<ProviderReply>(.ok)
            let fcm = Mutex<ProviderReply>(.ok)
            let invalid = Atomic<Int>(0)
            let tokenAudience = Mutex<String>("")
        }

        init() async throws {
            let keys = try ProviderKeys()
            let certificates = try TestCertificates.make()
            let script = Script()
            self.keys = keys
            self.certificates = certificates
            self.script = script
            apns = try await FakeHTTP2Server(certificates: certificates) { request in
                guard await keys.verifyAPNs(request.header("authorization")) != nil else {
                    script.invalid.add(1, ordering: .relaxed)
                    return ProviderReply(status: 403, body: #"{"reason":"InvalidProviderToken"}"#)
                }
                return script.apns.withLock { $0 }
            }
            fcm = try await FakeHTTP2Server(certificates: certificates) { request in
                if request.path == "/token" {
                    let form = String(decoding: request.body, as: UTF8.self)
                    let assertion = form.split(separator: "&").first { $0.hasPrefix("assertion=") }.map { String($0.dropFirst("assertion=".count)) } ?? ""
                    let audience = script.tokenAudience.withLock { $0 }
                    guard form.contains("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer"),
                          await keys.verifyFCMAssertion(assertion, email: "push@whisper-test.iam.gserviceaccount.com", audience: audience) else {
                        script.invalid.add(1, ordering: .relaxed)
                        return ProviderReply(status: 400, body: #"{"error":"invalid_grant"}"#)
                    }
                    return ProviderReply(status: 200, body: #"{"access_token":"ya29.test-access","expires_in":3599,"token_type":"Bearer"}"#)
                }
                guard request.header("authorization") == "Bearer ya29.test-access" else {
                    script.invalid.add(1, ordering: .relaxed)
                    return ProviderReply(status: 401, body: #"{"error":{"code":401,"status":"UNAUTHENTICATED"}}"#)
                }
                return script.fcm.withLock { $0 }
            }
            let audience = "\(fcm.baseURL)/token"
            script.tokenAudience.withLock { $0 = audience }
        }

        func answerAPNs(_ reply: ProviderReply) { script.apns.withLock { $0 = reply } }
        func answerFCM(_ reply: ProviderReply) { script.fcm.withLock { $0 = reply } }
        var rejectedTokens: Int { script.invalid.load(ordering: .relaxed) }

        /// Requests to APNs's device path, and FCM's send path (not its token endpoint).
        var apnsPushes: [ProviderRequest] { apns.requests.filter { $0.path.hasPrefix("/3/device/") } }
        var fcmPushes: [ProviderRequest] { fcm.requests.filter { $0.path.hasSuffix("/messages:send") } }

        func settings(_ database: PostgresSettings, redis: RedisConfiguration, adjust: (inout PushSenderSettings) -> Void = { _ in }) throws -> PushSenderSettings {
            var settings = PushSenderSettings(
                common: TestServers.common(service: "push-sender", postgres: database, redis: redis),
                apns: .init(keyPEM: keys.apnsKey.pemRepresentation, keyID: keys.apnsKeyID, teamID: keys.teamID, topic: "app.whisper.test", baseURL: apns.baseURL),
                fcm: .init(serviceAccount: keys.serviceAccount(tokenURI: "\(fcm.baseURL)/token"), baseURL: fcm.baseURL),
                extraTrustRootsPath: certificates.caPath,
                coalesceWindow: .seconds(60), maxAttempts: 4, retryInitial: .milliseconds(100), retryMaximum: .milliseconds(400),
                claimAfter: .seconds(2)
            )
            adjust(&settings)
            return settings
        }

        func stop() async {
            await apns.stop()
            await fcm.stop()
            certificates.removeFiles()
        }
    }

    static func startPushSender(_ settings: PushSenderSettings) async throws -> RunningService {
        try await RunningService.start { running in
            buildPushSender(settings: settings, logger: TestServers.logger, onServerRunning: running).assembly
        }
    }

    static let apnsToken = String(repeating: "ab12", count: 16)
    static let fcmToken = "fcm-token:APA91b" + String(repeating: "x", count: 40)

    @Test func offlineUsersAreWokenOnceThroughTheirProviderWithoutContent() async throws {
        try await Providers().running { providers in
            try await MessagingStack.start().running { stack in
                try await stack.startPushSender(providers.settings(stack.database, redis: stack.redis)).running { sender in
                    let alice = try await stack.user(on: 0)
                    let iosUser = try await stack.offlineUser(on: 1, platform: .ios, pushToken: Self.apnsToken)
                    let androidUser = try await stack.offlineUser(on: 1, platform: .android, pushToken: Self.fcmToken)

                    // Ten messages within the window: one wake-up each.
                    for index in 0..<10 {
                        try await alice.connection.send(alice.message("secret words \(index)", to: iosUser))
                        try await alice.connection.send(alice.message("secret words \(index)", to: androidUser))
                    }
                    try await waitUntil { providers.apnsPushes.count >= 1 && providers.fcmPushes.count >= 1 }
                    try await waitUntil {
                        let idle = try await stack.pushJobs().isEmpty
                        let metrics = try await stack.metricsText(of: [sender])
                        return idle && metrics.contains("whisper_push_coalesced_total 18")
                    }
                    #expect(providers.apnsPushes.count == 1)
                    #expect(providers.fcmPushes.count == 1)
                    #expect(providers.rejectedTokens == 0, "every provider token the fakes saw verified")

                    let apns = try #require(providers.apnsPushes.first)
                    #expect(apns.path == "/3/device/\(Self.apnsToken)")
                    #expect(apns.method == "POST")
                    #expect(apns.header("apns-topic") == "app.whisper.test")
                    #expect(apns.header("apns-push-type") == "alert")
                    #expect(apns.header("apns-priority") == "10")
                    #expect(apns.header("apns-collapse-id") == "whisper-pending")
                    #expect(Int64(apns.header("apns-expiration") ?? "") ?? 0 > Clock.millisecondsNow() / 1000)
                    let fcm = try #require(providers.fcmPushes.first)
                    #expect(fcm.path == "/v1/projects/whisper-test/messages:send")
                    let message = try #require(fcm.json?["message"] as? [String: Any])
                    #expect(message["token"] as? String == Self.fcmToken)
                    #expect(message["notification"] == nil, "data only")
                    #expect((message["android"] as? [String: Any])?["priority"] as? String == "HIGH")
                    #expect((message["data"] as? [String: String])?["kind"] == "message")
                    // No content, no sender, no message ID in either.
                    for request in [apns, fcm] {
                        let body = String(decoding: request.body, as: UTF8.self)
                        #expect(!body.contains("secret") && !body.contains(alice.whisperId) && !body.contains("WSP-"), "\(body)")
                    }

                    // Signing in ends the window: the next message to an offline device wakes it again.
                    let back = try await stack.reconnect(iosUser, on: 1)
                    _ = try await back.connection.fetchPending()
                    await back.connection.close()
                    try await stack.waitUntilOffline(iosUser)
                    try await alice.connection.send(alice.message("after the window", to: iosUser))
                    try await waitUntil { providers.apnsPushes.count == 2 }

                }
            }
        }
    }

    @Test func aDeadTokenIsRemovedAndNotUsedAgain() async throws {
        try await Providers().running { providers in
            providers.answerAPNs(ProviderReply(status: 410, body: #"{"reason":"Unregistered","timestamp":1767268801500}"#))
            try await MessagingStack.start().running { stack in
                try await stack.startPushSender(providers.settings(stack.database, redis: stack.redis) { $0.coalesceWindow = .zero }).running { sender in
                    let alice = try await stack.user(on: 0)
                    let bob = try await stack.offlineUser(on: 1, platform: .ios, pushToken: Self.apnsToken)
                    try await alice.connection.send(alice.message("one", to: bob))
                    try await waitUntil { try await stack.pushToken(of: bob.whisperId) == nil }
                    #expect(providers.apnsPushes.count == 1)
                    try await alice.connection.send(alice.message("two", to: bob))
                    try await waitUntil {
                        let idle = try await stack.pushJobs().isEmpty
                        let metrics = try await stack.metricsText(of: [sender])
                        return idle && metrics.contains(#"whisper_push_skipped_total{reason="no_token"} 1"#)
                    }
                    #expect(providers.apnsPushes.count == 1, "the removed token is not used again")
                }
            }
        }
    }

    @Test func rateLimitedPushesWaitForRetryAfter() async throws {
        try await Providers().running { providers in
            providers.answerFCM(ProviderReply(status: 429, headers: [("retry-after", "2")], body: #"{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"QUOTA_EXCEEDED"}]}}"#))
            try await MessagingStack.start().running { stack in
                try await stack.startPushSender(providers.settings(stack.database, redis: stack.redis)).running { sender in
                    let alice = try await stack.user(on: 0)
                    let bob = try await stack.offlineUser(on: 1, platform: .android, pushToken: Self.fcmToken)
                    try await alice.connection.send(alice.message("one", to: bob))
                    try await waitUntil { providers.fcmPushes.count == 1 }
                    let first = ContinuousClock.now
                    providers.answerFCM(.ok)
                    try await waitUntil(timeout: .seconds(20)) { providers.fcmPushes.count == 2 }
                    #expect(ContinuousClock.now - first >= .seconds(2) - .milliseconds(50), "not before Retry-After")
                    #expect(providers.fcm.requests.filter { $0.path == "/token" }.count == 1, "the access token is kept between requests")
                    try await waitUntil { (try await stack.metricsText(of: [sender])).contains(#"whisper_push_sent_total{provider="fcm",outcome="delivered"} 1"#) }
                }
            }
        }
    }

    /// Dead letters are kept a week at most (each names the identity it was to wake):
    /// adding one drops those older than `PushStream.deadMaxAge`, to the millisecond.
    @Test func deadLettersOlderThanAWeekGoAsTheNextIsAdded() async throws {
        try await RedisClientTests().withClient { redis in
            let shard = "stream:push-test-\(UUID().uuidString)"
            let key = PushStream.deadKey(of: shard)
            let now = Clock.millisecondsNow(), week = Int64(PushStream.deadMaxAge.milliseconds)
            _ = try await redis.send("XADD", key, "\(now - week - 1_000)-0", "to", "WSP-AAAA-BBBB-CCCC", "reason", "old")
            _ = try await redis.send("XADD", key, "\(now - week + 60_000)-0", "to", "WSP-AAAA-BBBB-DDDD", "reason", "recent")
            _ = try await redis.pipeline(PushStream.deadLetter(["to", "WSP-AAAA-BBBB-EEEE"], reason: "provider", attempts: 3, of: shard, now: now))
            let left = try await redis.send("XRANGE", key, "-", "+").array ?? []
            let reasons = left.compactMap { entry -> String? in
                guard let fields = entry.array?.last?.array?.compactMap(\.string), let at = fields.firstIndex(of: "reason") else { return nil }
                return fields[at + 1]
            }
            #expect(reasons == ["recent", "provider"], "the week-old letter went, the others stay")
            _ = try await redis.send("DEL", key)
        }
    }

    @Test func anOutageEndsInTheDeadLetterStreamAndReplaySendsThem() async throws {
        try await Providers().running { providers in
            providers.answerAPNs(ProviderReply(status: 503, body: #"{"reason":"ServiceUnavailable"}"#))
            try await MessagingStack.start().running { stack in
                let settings = try providers.settings(stack.database, redis: stack.redis) { $0.maxAttempts = 3 }
                try await stack.startPushSender(settings).running { sender in
                    let alice = try await stack.user(on: 0)
                    let bob = try await stack.offlineUser(on: 1, platform: .ios, pushToken: Self.apnsToken)
                    try await alice.connection.send(alice.message("one", to: bob))
                    try await waitUntil(timeout: .seconds(20)) { try await stack.deadPushes() == 1 }
                    #expect(providers.apnsPushes.count == 3, "the bounded attempts, then the dead letter")

                    providers.answerAPNs(.ok)
                    let moved = try await ReplayDeadCommand.run(settings: settings, limit: 100, logger: TestServers.logger)
                    #expect(moved == 1)
                    try await waitUntil { providers.apnsPushes.count == 4 }
                    #expect(try await stack.deadPushes() == 0)
                    try await waitUntil { (try await stack.metricsText(of: [sender])).contains(#"whisper_push_sent_total{provider="apns",outcome="delivered"} 1"#) }
                }
            }
        }
    }

    /// APNs ends connections with GOAWAY now and then: the next wake-up goes out on a
    /// new connection.
    @Test func aConnectionEndedWithGoAwayIsReplaced() async throws {
        try await Providers().running { providers in
            providers.answerAPNs(ProviderReply(status: 200, goAway: true))
            try await MessagingStack.start().running { stack in
                try await stack.startPushSender(providers.settings(stack.database, redis: stack.redis) { $0.coalesceWindow = .zero }).running { sender in
                    let alice = try await stack.user(on: 0)
                    let bob = try await stack.offlineUser(on: 1, platform: .ios, pushToken: Self.apnsToken)
                    for index in 0..<3 {
                        try await alice.connection.send(alice.message("m\(index)", to: bob))
                        try await waitUntil { providers.apnsPushes.count == index + 1 }
                    }
                    try await waitUntil {
                        let metrics = try await stack.metricsText(of: [sender])
                        return metrics.contains(#"whisper_push_sent_total{provider="apns",outcome="delivered"} 3"#)
                    }
                    #expect(providers.apns.connectionCount == 3, "each GOAWAY ended its connection; a new one carried the next push")
                    #expect(Set(providers.apnsPushes.compactMap { $0.header("authorization") }).count == 1, "one provider token, reused")
                }
            }
        }
    }

    /// Calls to an offline callee (real `call_initiate`s) wake it through the VoIP token
    /// and topic at once, each one: never coalesced.
    @Test func callsGoToTheVoIPTokenAndAreNeverCoalesced() async throws {
        try await Providers().running { providers in
            try await MessagingStack.start().running { stack in
                try await stack.startPushSender(providers.settings(stack.database, redis: stack.redis)).running { sender in
                    let voipToken = String(repeating: "cd34", count: 16)
                    let bob = try await stack.user(on: 1, platform: .ios, pushToken: Self.apnsToken, voipToken: voipToken)
                    await bob.connection.close()
                    try await stack.waitUntilOffline(bob)
                    let alice = try await stack.user(on: 0)
                    let carol = try await stack.user(on: 0)
                    let calls = [RandomID.uuid(), RandomID.uuid()]
                    // One after the other: the first is cancelled before the second rings (a callee
                    // has one line; a second call while the first rings would be busy).
                    for (caller, call) in zip([alice, carol], calls) {
                        let start = try await caller.connection.startCall(CallTests.signal(CallInitiate.self, "offer", callId: call, from: caller, to: bob))
                        guard case .ringing(let ringing) = start else { Issue.record("not ringing: \(start)"); continue }
                        #expect(ringing.via == .push)
                        try await caller.connection.signal(CallTests.signal(CallEnd.self, "", callId: call, from: caller, to: bob, reason: .hangup))
                        try await stack.withRedis { redis in
                            try await waitUntil { try await redis.send("EXISTS", RedisKeys.line(bob.whisperId)).int == 0 }
                        }
                    }
                    try await waitUntil { providers.apnsPushes.count == 2 }
                    // Handled at once, so in either order.
                    let called = Set(providers.apnsPushes.compactMap { ($0.json?["whisper"] as? [String: Any])?["callId"] as? String })
                    #expect(called == Set(calls))
                    for request in providers.apnsPushes {
                        #expect(request.path == "/3/device/\(voipToken)")
                        #expect(request.header("apns-push-type") == "voip")
                        #expect(request.header("apns-topic") == "app.whisper.test.voip")
                        #expect(request.header("apns-collapse-id") == nil)
                        let whisper = request.json?["whisper"] as? [String: Any]
                        #expect(whisper?["kind"] as? String == "call")
                    }
                }
            }
        }
    }

    /// A push-sender process killed with SIGKILL while its requests are in flight loses
    /// no job: another push-sender claims them and sends every wake-up.
    @Test func aKilledPushSenderLosesNoJob() async throws {
        try await Providers().running { providers in
            providers.answerAPNs(ProviderReply(status: 200, stall: true))
            try await MessagingStack.start().running { stack in
                let keyPath = try providers.keys.writeAPNsKey()
                defer { try? FileManager.default.removeItem(atPath: keyPath) }
                var environment = Executables.environment(stack.database)
                environment["WHISPER_REDIS_URL"] = "redis://\(stack.redis.host):\(stack.redis.port)"
                environment["WHISPER_INSTANCE_ID"] = "push-sender-doomed"
                environment["PUSH_SENDER_HTTP_PORT"] = "0"
                environment["PUSH_APNS_KEY_PATH"] = keyPath
                environment["PUSH_APNS_KEY_ID"] = providers.keys.apnsKeyID
                environment["PUSH_APNS_TEAM_ID"] = providers.keys.teamID
                environment["PUSH_APNS_TOPIC"] = "app.whisper.test"
                environment["PUSH_APNS_URL"] = providers.apns.baseURL
                environment["PUSH_TLS_EXTRA_ROOTS"] = providers.certificates.caPath
                environment["PUSH_COALESCE_WINDOW_SECONDS"] = "0"
                environment["PUSH_REQUEST_TIMEOUT_SECONDS"] = "300"
                let (doomed, output) = try Executables.launch("push-sender", environment: environment)
                defer { if doomed.isRunning { kill(doomed.processIdentifier, SIGKILL) } }

                let alice = try await stack.user(on: 0)
                let bob = try await stack.offlineUser(on: 1, platform: .ios, pushToken: Self.apnsToken)
                for index in 0..<5 { try await alice.connection.send(alice.message("m\(index)", to: bob)) }
                // All five read and on their way (the stand-in holds them unanswered).
                let reached = (try? await waitUntil(timeout: .seconds(30)) { providers.apnsPushes.count == 5 }) != nil
                kill(doomed.processIdentifier, SIGKILL)
                doomed.waitUntilExit()
                let events = Executables.logLines(output).compactMap { line in (line["event"] as? String).map { "\($0) \(line["error"] ?? "")" } }
                let waiting = try await stack.pushJobs().count
                let group = try await stack.withRedis { try await $0.send("XINFO", "GROUPS", PushStream.key) }
                try #require(reached, "the first push-sender did not reach APNs (\(providers.apns.requests.count) requests, \(waiting) jobs, \(group), redis \(environment["WHISPER_REDIS_URL"] ?? "")): \(events)")
                #expect(try await stack.pushJobs().count == 5, "nothing was acknowledged")

                providers.answerAPNs(.ok)
                try await stack.startPushSender(providers.settings(stack.database, redis: stack.redis) {
                    $0.coalesceWindow = .zero
                    $0.claimAfter = .seconds(1)
                }).running { rescuer in
                    try await waitUntil(timeout: .seconds(20)) {
                        let metrics = try await stack.metricsText(of: [rescuer])
                        return metrics.contains(#"whisper_push_sent_total{provider="apns",outcome="delivered"} 5"#)
                    }
                    try await waitUntil { try await stack.pushJobs().isEmpty }
                    #expect(providers.apnsPushes.count == 10)
                }
            }
        }
    }
}

extension MessagingStack {
    func startPushSender(_ settings: PushSenderSettings) async throws -> RunningService {
        try await PushTests.startPushSender(settings)
    }

    func deadPushes() async throws -> Int {
        try await withRedis { redis in
            try await redis.pipeline(redis.configuration.streamShards.keys(PushStream.key).map { RedisCommand("XLEN", PushStream.deadKey(of: $0)) })
                .reduce(0) { $0 + Int($1.int ?? 0) }
        }
    }

    /// The push token of the identity's active device.
    func pushToken(of whisperId: String) async throws -> String? {
        let client = PostgresClient(configuration: database.clientConfiguration, backgroundLogger: TestServers.logger)
        return try await withThrowingTaskGroup(of: String??.self) { group in
            group.addTask {
                await client.run()
                return nil
            }
            var token: String?
            let rows = try await client.query("SELECT push_token FROM devices WHERE whisper_id = \(whisperId) AND active", logger: TestServers.logger)
            for try await value in rows.decode(String?.self) { token = value }
            group.cancelAll()
            return token
        }
    }
}
