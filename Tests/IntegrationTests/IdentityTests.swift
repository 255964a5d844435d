import AsyncHTTPClient
import AuthService
import Foundation
import GatewayService
import NIOCore
import PostgresNIO
import Testing
import WhisperClient
import WhisperShared

/// Identity and sessions end to end (docs/protocol.md section 4): WhisperClient over real
/// WebSockets, two gateway instances, auth, real Redis and Postgres.
@Suite struct IdentityTests {
    struct Stack: StartedForATest {
        let database: PostgresSettings
        let auth: RunningService
        let gateways: [RunningService]
        /// Whether `startStack` made the database for this stack (released when it stops).
        var ownsDatabase = false

        func url(_ index: Int) -> String { "ws://127.0.0.1:\(gateways[index].port)/ws" }

        func connect(_ index: Int) async throws -> WhisperConnection {
            let connection = WhisperConnection(url: url(index), logger: TestServers.logger)
            try await connection.connect()
            return connection
        }

        func stop() async throws {
            defer { if ownsDatabase { TestDatabases.shared.release(database) } }
            for gateway in gateways { try await gateway.stop() }
            try await auth.stop()
        }

        func query(_ sql: String) async throws -> [PostgresRow] {
            let client = PostgresClient(configuration: database.clientConfiguration, backgroundLogger: TestServers.logger)
            return try await withThrowingTaskGroup(of: [PostgresRow]?.self) { group in
                group.addTask {
                    await client.run()
                    return nil
                }
                var rows: [PostgresRow] = []
                for try await row in try await client.query(PostgresQuery(unsafeSQL: sql), logger: TestServers.logger) {
                    rows.append(row)
                }
                group.cancelAll()
                return rows
            }
        }
    }

    func startStack(redis: RedisConfiguration = TestServers.redis, _ configure: (inout AuthSettings) -> Void = { _ in }) async throws -> Stack {
        let database = try await TestDatabases.shared.make()
        var authSettings = TestServers.authSettings(database, redis: redis)
        configure(&authSettings)
        let settings = authSettings
        return try await TestServers.startAuth(settings).then { auth in
            var gateways: [RunningService] = []
            _ = try await StartedTogether.start { started in
                for _ in 0..<2 {
                    let gateway = started.add(try await RunningService.start { running in
                        buildGateway(settings: TestServers.gatewaySettings(database, authPort: auth.internalPort, redis: redis), logger: TestServers.logger, onServerRunning: running).assembly
                    })
                    _ = try await HTTP.waitFor("\(gateway.baseURL)/ready") { $0.status == 200 }
                    gateways.append(gateway)
                }
            }
            return Stack(database: database, auth: auth, gateways: gateways, ownsDatabase: true)
        }
    }

    static func newKeys() -> (mnemonic: String, keys: WhisperKeys) {
        let mnemonic = BIP39.generateMnemonic()
        return (mnemonic, try! WhisperKeys(mnemonic: mnemonic))
    }

    static func deviceId() -> String { UUID().uuidString.lowercased() }



    @Test func aSecondDeviceFromTheSameMnemonicTakesOverAcrossGateways() async throws {
        try await startStack().running { stack in
            let (mnemonic, keys) = Self.newKeys()

            let first = try await stack.connect(0)
            let created = try await first.register(keys: keys, deviceId: Self.deviceId(), platform: .ios, pushToken: "apns-token-1")
            #expect(WhisperID.isValid(created.whisperId))
            #expect(created.sessionToken.utf8.count >= 43)
            #expect(created.sessionExpiresAt - created.serverTime == Int64(Limits.SESSION_TTL_DAYS) * 86_400_000)
            #expect(abs(created.serverTime - Clock.millisecondsNow()) < 5_000)

            // "Install" on a second device: the same mnemonic, typed differently, another gateway.
            let restored = try WhisperKeys(mnemonic: mnemonic.uppercased().replacingOccurrences(of: " ", with: "  "))
            let second = try await stack.connect(1)
            let recovered = try await second.register(keys: restored, deviceId: Self.deviceId(), platform: .android)
            #expect(recovered.whisperId == created.whisperId)
            #expect(recovered.sessionToken != created.sessionToken)

            // The first socket is told why and closed by the server.
            let events = first.events
            let revoked = try await withTimeout("the first socket's close") {
                var revoked: SessionRevoked?
                for await event in events {
                    if let payload = event.payload(as: SessionRevoked.self) { revoked = payload }
                }
                return revoked
            }
            #expect(revoked == SessionRevoked(reason: .replacedByNewDevice))
            #expect(await first.closeCode == .some(4001))

            // The first token no longer works, on any socket.
            let stale = try await stack.connect(0)
            await stale.resume(whisperId: created.whisperId, sessionToken: created.sessionToken)
            await expectRefused(.notRegistered, "first device's token") { _ = try await stale.refreshSession() }
            // The second device's session works.
            _ = try await second.refreshSession()

            let devices = try await stack.query("SELECT platform, active FROM devices WHERE whisper_id = '\(created.whisperId)' ORDER BY platform")
            #expect(devices.count == 2)
            let states = try devices.map { try $0.decode((String, Bool).self) }
            #expect(states.map(\.0) == ["android", "ios"])
            #expect(states.map(\.1) == [true, false])
        }
    }

    @Test func recoveryWithAWhisperIDNeedsThatIdentitysKeys() async throws {
        try await startStack().running { stack in
            let (_, alice) = Self.newKeys()
            let (_, mallory) = Self.newKeys()
            let connection = try await stack.connect(0)
            let ack = try await connection.register(keys: alice, deviceId: Self.deviceId(), platform: .ios)

            let again = try await stack.connect(1)
            let recovered = try await again.register(keys: alice, deviceId: Self.deviceId(), platform: .ios, whisperId: ack.whisperId)
            #expect(recovered.whisperId == ack.whisperId)

            let intruder = try await stack.connect(1)
            await expectRefused(.authFailed, "keys of another identity") {
                try await intruder.register(keys: mallory, deviceId: Self.deviceId(), platform: .ios, whisperId: ack.whisperId)
            }
            await expectRefused(.authFailed, "unknown Whisper ID") {
                try await intruder.register(keys: mallory, deviceId: Self.deviceId(), platform: .ios, whisperId: WhisperID.generate())
            }
        }
    }

    @Test func badProofsAreRefused() async throws {
        try await startStack().running { stack in
            let connection = try await stack.connect(0)
            let (_, keys) = Self.newKeys()
            let (_, other) = Self.newKeys()
            let device = Self.deviceId()
            let redis = RedisClient(configuration: TestServers.redis, logger: TestServers.logger)
            let redisTask = Task { try await redis.run() }
            defer { redisTask.cancel() }
            try await waitUntil { redis.isConnected }

            func challenge() async throws -> RegisterChallenge {
                try await connection.request(RegisterBegin(.init(deviceId: device, platform: .ios))).payload(as: RegisterChallenge.self)!
            }
            func proof(_ challenge: RegisterChallenge, signedBy signer: WhisperKeys, over bytes: [UInt8]? = nil) -> RegisterProof {
                let challengeBytes = bytes ?? [UInt8](Data(base64Encoded: challenge.challenge)!)
                return RegisterProof(
                    .init(challengeId: challenge.challengeId, deviceId: device, platform: .ios,
                    encPublicKey: Data(keys.encPublicKey).base64EncodedString(),
                    signPublicKey: Data(keys.signPublicKey).base64EncodedString(),
                    signature: Data(signer.proveChallenge(challengeBytes, cryptoVersion: 1)).base64EncodedString())
                )
            }

            let issued = try await challenge()
            #expect(Format.isBase64(issued.challenge, decodedLength: 32))
            #expect(issued.expiresAt - Clock.millisecondsNow() <= 60_000 && issued.expiresAt - Clock.millisecondsNow() > 55_000)
            // The challenge lives in Redis for 60 s.
            let ttl = try await redis.send("PTTL", RedisKeys.challenge(issued.challengeId)).int ?? 0
            #expect(ttl > 55_000 && ttl <= 60_000)

            // Expired: let Redis expire it as it would after 60 s.
            try await redis.send("PEXPIRE", RedisKeys.challenge(issued.challengeId), 1)
            try await waitUntil { try await redis.send("EXISTS", RedisKeys.challenge(issued.challengeId)).int == 0 }
            await expectRefused(.authFailed, "expired challenge") { _ = try await connection.request(proof(issued, signedBy: keys)) }

            // Signed by another key.
            let second = try await challenge()
            await expectRefused(.authFailed, "signature by another key") { _ = try await connection.request(proof(second, signedBy: other)) }
            // Single use: deleted on the first attempt, even a failed one.
            await expectRefused(.authFailed, "challenge used by a failed attempt") { _ = try await connection.request(proof(second, signedBy: keys)) }

            // Tampered challenge bytes.
            let third = try await challenge()
            var tampered = [UInt8](Data(base64Encoded: third.challenge)!)
            tampered[0] ^= 0xff
            await expectRefused(.authFailed, "tampered challenge") { _ = try await connection.request(proof(third, signedBy: keys, over: tampered)) }

            // A good proof works once; the same challenge again does not.
            let fourth = try await challenge()
            let good = proof(fourth, signedBy: keys)
            _ = try await connection.request(good)
            await expectRefused(.authFailed, "reused challenge") { _ = try await connection.request(good) }
        }
    }

    @Test func refreshedAwayAndLoggedOutTokensAreRefused() async throws {
        try await startStack().running { stack in
            let connection = try await stack.connect(0)
            let (_, keys) = Self.newKeys()
            let ack = try await connection.register(keys: keys, deviceId: Self.deviceId(), platform: .android)

            let refreshed = try await connection.refreshSession()
            #expect(refreshed.sessionToken != ack.sessionToken)
            await expectRefused(.notRegistered, "refreshed-away token") {
                _ = try await connection.request(SessionRefresh(sessionToken: ack.sessionToken))
            }
            _ = try await connection.ping()

            try await connection.logout()
            await expectRefused(.notRegistered, "logged-out token") {
                _ = try await connection.request(UpdateTokens(sessionToken: refreshed.sessionToken, .init(pushToken: .set("x"))))
            }
            let elsewhere = try await stack.connect(1)
            await expectRefused(.notRegistered, "logged-out token on another socket") {
                _ = try await elsewhere.request(Logout(sessionToken: refreshed.sessionToken))
            }
        }
    }

    @Test func aSocketOnlyActsForItsOwnIdentity() async throws {
        try await startStack().running { stack in
            let alice = try await stack.connect(0)
            let bob = try await stack.connect(0)
            _ = try await alice.register(keys: Self.newKeys().keys, deviceId: Self.deviceId(), platform: .ios)
            let bobAck = try await bob.register(keys: Self.newKeys().keys, deviceId: Self.deviceId(), platform: .ios)
            // Alice's socket presents Bob's token.
            await expectRefused(.notRegistered, "another identity's token") {
                _ = try await alice.request(UpdateTokens(sessionToken: bobAck.sessionToken, .init(pushToken: .set("stolen"))))
            }
            // A fresh socket may resume a session it was given (a reconnect).
            let reconnect = try await stack.connect(1)
            await reconnect.resume(whisperId: bobAck.whisperId, sessionToken: bobAck.sessionToken)
            try await reconnect.updateTokens(pushToken: .set("fcm-token-2"))
        }
    }

    @Test func pushTokensUpdateWithoutRegisteringAgain() async throws {
        try await startStack().running { stack in
            let connection = try await stack.connect(0)
            let device = Self.deviceId()
            let ack = try await connection.register(keys: Self.newKeys().keys, deviceId: device, platform: .ios, pushToken: "p1", voipToken: "v1")
            try await connection.updateTokens(pushToken: .set("p2"))
            var rows = try await stack.query("SELECT push_token, voip_token FROM devices WHERE device_id = '\(device)'")
            var tokens = try rows[0].decode((String?, String?).self)
            #expect(tokens.0 == "p2" && tokens.1 == "v1")
            try await connection.updateTokens(pushToken: .unchanged, voipToken: .clear)
            rows = try await stack.query("SELECT push_token, voip_token FROM devices WHERE whisper_id = '\(ack.whisperId)'")
            tokens = try rows[0].decode((String?, String?).self)
            #expect(tokens.0 == "p2" && tokens.1 == nil)
        }
    }

    @Test func bannedIdentitiesCannotSignIn() async throws {
        try await startStack().running { stack in
            let (_, keys) = Self.newKeys()
            let first = try await stack.connect(0)
            let ack = try await first.register(keys: keys, deviceId: Self.deviceId(), platform: .ios)
            _ = try await stack.query("UPDATE users SET status = 'banned' WHERE whisper_id = '\(ack.whisperId)'")
            let again = try await stack.connect(1)
            await expectRefused(.userBanned, "banned identity") {
                try await again.register(keys: keys, deviceId: Self.deviceId(), platform: .ios)
            }
        }
    }

    @Test func registrationIsRateLimitedPerAddress() async throws {
        let redis = try RedisProcess()
        try redis.start()
        try await startStack(redis: RedisConfiguration(url: redis.url)!) { $0.limits[.registerPerAddress] = RateLimitRule("3/60s")! }.running { stack in
            let connection = try await stack.connect(0)
            for _ in 0..<3 {
                _ = try await connection.request(RegisterBegin(.init(deviceId: Self.deviceId(), platform: .ios)))
            }
            await expectRefused(.rateLimited, "fourth registration from one address") {
                _ = try await connection.request(RegisterBegin(.init(deviceId: Self.deviceId(), platform: .ios)))
            }
        }
    }

    @Test func keyLookupOverHTTP() async throws {
        try await startStack().running { stack in
            let (_, aliceKeys) = Self.newKeys()
            let alice = try await stack.connect(0)
            let bob = try await stack.connect(1)
            let aliceAck = try await alice.register(keys: aliceKeys, deviceId: Self.deviceId(), platform: .ios)
            let bobAck = try await bob.register(keys: Self.newKeys().keys, deviceId: Self.deviceId(), platform: .android)
            let base = stack.auth.baseURL

            func get(_ path: String, token: String?) async throws -> HTTP.Reply {
                var request = HTTPClientRequest(url: base + path)
                if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
                let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
                let body = try await response.body.collect(upTo: 1 << 20)
                return HTTP.Reply(status: Int(response.status.code), body: String(buffer: body))
            }

            let found = try await get("/users/\(aliceAck.whisperId)/keys", token: bobAck.sessionToken)
            #expect(found.status == 200)
            #expect(found.json?["whisperId"] as? String == aliceAck.whisperId)
            #expect(found.json?["encPublicKey"] as? String == Data(aliceKeys.encPublicKey).base64EncodedString())
            #expect(found.json?["signPublicKey"] as? String == Data(aliceKeys.signPublicKey).base64EncodedString())
            #expect(found.json?["status"] as? String == "active")

            let unknown = try await get("/users/\(WhisperID.generate())/keys", token: bobAck.sessionToken)
            #expect(unknown.status == 404)
            #expect((unknown.json?["error"] as? [String: String])?["code"] == "NOT_FOUND")
            #expect(try await get("/users/\(aliceAck.whisperId)/keys", token: nil).status == 401)
            #expect(try await get("/users/\(aliceAck.whisperId)/keys", token: String(repeating: "z", count: 43)).status == 401)
            #expect(try await get("/users/not-an-id/keys", token: bobAck.sessionToken).status == 400)

            _ = try await stack.query("UPDATE users SET status = 'banned' WHERE whisper_id = '\(aliceAck.whisperId)'")
            #expect(try await get("/users/\(aliceAck.whisperId)/keys", token: bobAck.sessionToken).json?["status"] as? String == "banned")
        }
    }

    /// Item 6 of issue 34: sign-ins from new installs cannot grow an identity's device
    /// rows or keep tokens for devices that are no longer active.
    @Test func deviceRowsPerIdentityAreBoundedAndOnlyTheActiveOneKeepsTokens() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let keys = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
            var whisperId = ""
            var last = ""
            for index in 0..<(AuthSettings.defaultDevicesKept + 3) {
                let connection = WhisperConnection(url: "ws://127.0.0.1:\(stack.gateways[0].port)/ws", logger: TestServers.logger)
                try await connection.connect()
                last = UUID().uuidString.lowercased()
                let ack = try await connection.register(
                    keys: keys, deviceId: last, platform: .ios, pushToken: "push-\(index)", voipToken: "voip-\(index)"
                )
                whisperId = ack.whisperId
                await connection.close()
            }
            let identity = whisperId
            let rows = try await stack.withPostgres { postgres in
                var rows: [(String, Bool, String?, String?)] = []
                let query = try await postgres.query(
                    "SELECT device_id::text, active, push_token, voip_token FROM devices WHERE whisper_id = \(identity)"
                )
                for try await row in query.decode((String, Bool, String?, String?).self) { rows.append(row) }
                return rows
            }
            #expect(rows.count == AuthSettings.defaultDevicesKept)
            #expect(rows.filter(\.1).map(\.0) == [last])
            #expect(rows.filter { !$0.1 }.allSatisfy { $0.2 == nil && $0.3 == nil })
            let active = rows.first { $0.1 }
            #expect(active?.2 == "push-\(AuthSettings.defaultDevicesKept + 2)")
        }
    }
}
