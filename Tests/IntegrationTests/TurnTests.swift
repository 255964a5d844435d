import AsyncHTTPClient
import Foundation
import NIOCore
import Testing
import TurnCredService
import WhisperClient
import WhisperShared

/// TURN credentials from turn-cred, proven against a real coturn with coturn's own
/// client (`turnutils_uclient`).
@Suite struct TurnTests {
    static let secret = "turn-secret-first-0123456789"
    static let newSecret = "turn-secret-second-0123456789"

    /// A messaging stack whose gateways forward `get_turn_credentials` to a turn-cred
    /// with `secrets`.
    struct Stack: StartedForATest {
        let stack: MessagingStack
        let turnCred: RunningService
        let settings: TurnCredSettings

        func stop() async throws {
            try await turnCred.stop()
            try await stack.stop()
        }
    }

    static func start(secrets: [String], perIdentity: RateLimitRule? = nil) async throws -> Stack {
        let internalPort = try TestServers.freePort()
        return try await MessagingStack.start(routers: 1, gateway: { $0.turnCredURL = "http://127.0.0.1:\(internalPort)" }).then { stack in
            let (service, settings) = try await startTurnCred(on: stack, secrets: secrets, internalPort: internalPort, perIdentity: perIdentity)
            return Stack(stack: stack, turnCred: service, settings: settings)
        }
    }

    static func startTurnCred(
        on stack: MessagingStack, secrets: [String], internalPort: Int? = nil, perIdentity: RateLimitRule? = nil, urls: [String]? = nil
    ) async throws -> (RunningService, TurnCredSettings) {
        var settings = TestServers.turnCredSettings(
            common: TestServers.common(service: "turn-cred", postgres: stack.database, redis: stack.redis), secrets: secrets
        )
        if let internalPort { settings.internalHTTP.port = internalPort }
        if let urls { settings.urls = urls }
        if let perIdentity { settings.limits[.turnPerIdentity] = perIdentity }
        let final = settings
        return try await RunningService.start { running in
            buildTurnCred(settings: final, logger: TestServers.logger, onServerRunning: running).assembly
        }.then { service in
            _ = try await HTTP.waitFor("\(service.baseURL)/ready") { $0.status == 200 }
            return (service, final)
        }
    }

    static func fetch(from service: RunningService, token: String?) async throws -> (status: Int, body: [UInt8]) {
        var request = HTTPClientRequest(url: "\(service.baseURL)/v1/turn/credentials")
        request.method = .POST
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 1 << 20)
        return (Int(response.status.code), Array(body.readableBytesView))
    }

    @Test func credentialsFromTurnCredAllocateARelayAndForgedOrExpiredOnesDoNot() async throws {
        try await Self.start(secrets: [Self.secret]).running { started in
            let (stack, turnCred, settings) = (started.stack, started.turnCred, started.settings)
            let coturn = try CoturnProcess(secrets: [Self.secret])
            let alice = try await stack.user(on: 0)

            // Over the WebSocket, through the gateway.
            let before = Clock.millisecondsNow() / 1000
            let credentials = try await alice.connection.turnCredentials()
            let parts = credentials.username.split(separator: ":", maxSplits: 1)
            #expect(parts.count == 2 && String(parts[1]) == alice.whisperId)
            let expiry = try #require(parts.first.flatMap { Int64($0) })
            #expect(expiry >= before + 3_600 && expiry <= Clock.millisecondsNow() / 1000 + 3_600)
            #expect(credentials.expiresAt == expiry * 1000)
            #expect(credentials.ttlSeconds == 3_600)
            #expect(credentials.urls == settings.urls)
            #expect(try coturn.allocates(username: credentials.username, credential: credentials.credential))

            // Tampered: another password, or the password moved to another identity's name.
            var forged = Array(credentials.credential)
            forged[0] = forged[0] == "A" ? "B" : "A"
            #expect(try !coturn.allocates(username: credentials.username, credential: String(forged)))
            #expect(try !coturn.allocates(username: "\(expiry):WSP-ZZZZ-ZZZZ-ZZZZ", credential: credentials.credential))
            // A later expiry with the old password (stretching a credential's life).
            #expect(try !coturn.allocates(username: "\(expiry + 86_400):\(alice.whisperId)", credential: credentials.credential))

            // Expired: signed with the right secret, but its time has passed.
            let expired = TurnCredentialMint(secret: Self.secret, urls: settings.urls, ttl: .seconds(60))
                .credentials(for: alice.whisperId, now: Clock.millisecondsNow() - 120_000)
            #expect(try !coturn.allocates(username: expired.username, credential: expired.credential))

            // Over HTTP with the session token; refused without one.
            let reply = try await Self.fetch(from: turnCred, token: alice.token)
            #expect(reply.status == 200)
            let fromHTTP = try ProtocolJSON.decoder.decode(TurnCredentials.self, from: Data(reply.body))
            #expect(fromHTTP.username.hasSuffix(":\(alice.whisperId)"))
            #expect(try coturn.allocates(username: fromHTTP.username, credential: fromHTTP.credential))
            let anonymous = try await Self.fetch(from: turnCred, token: nil)
            #expect(anonymous.status == 401)
            #expect(String(decoding: anonymous.body, as: UTF8.self).contains("NOT_REGISTERED"))
            let bogus = try await Self.fetch(from: turnCred, token: "not-a-session-token")
            #expect(bogus.status == 401)
        }
    }

    /// A rotation: coturn lists the new secret and the old one, turn-cred signs with the
    /// new one first. Credentials of both work while the old secret is listed; once it
    /// is dropped, only the new ones do.
    @Test func rotatedSecretsKeepEarlierCredentialsWorkingWhileListed() async throws {
        try await Self.start(secrets: [Self.secret]).running { started in
            let (stack, before) = (started.stack, started.turnCred)
            try await Self.startTurnCred(on: stack, secrets: [Self.newSecret, Self.secret]).0.running { after in
                let alice = try await stack.user(on: 0)

                let old = try ProtocolJSON.decoder.decode(TurnCredentials.self, from: Data(try await Self.fetch(from: before, token: alice.token).body))
                let new = try ProtocolJSON.decoder.decode(TurnCredentials.self, from: Data(try await Self.fetch(from: after, token: alice.token).body))
                #expect(old.credential == TurnCredentialMint.password(for: old.username, secret: Self.secret))
                #expect(new.credential == TurnCredentialMint.password(for: new.username, secret: Self.newSecret))

                let during = try CoturnProcess(secrets: [Self.newSecret, Self.secret])
                #expect(try during.allocates(username: old.username, credential: old.credential))
                #expect(try during.allocates(username: new.username, credential: new.credential))

                let finished = try CoturnProcess(secrets: [Self.newSecret])
                #expect(try finished.allocates(username: new.username, credential: new.credential))
                #expect(try !finished.allocates(username: old.username, credential: old.credential))
            }
        }
    }

    @Test func credentialsAreRateLimitedPerIdentityOverBothPaths() async throws {
        try await Self.start(secrets: [Self.secret], perIdentity: RateLimitRule(capacity: 2, period: .seconds(3_600))).running { started in
            let (stack, turnCred) = (started.stack, started.turnCred)
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            _ = try await alice.connection.turnCredentials()
            #expect(try await Self.fetch(from: turnCred, token: alice.token).status == 200)
            // The third, either way, is refused; another identity is not affected.
            do {
                _ = try await alice.connection.turnCredentials()
                Issue.record("a third credential within the hour was issued")
            } catch WhisperClientError.refused(let code, _) {
                #expect(code == .rateLimited)
        }
        let limited = try await Self.fetch(from: turnCred, token: alice.token)
        #expect(limited.status == 429)
        #expect(String(decoding: limited.body, as: UTF8.self).contains("RATE_LIMITED"))
        _ = try await bob.connection.turnCredentials()
        }
    }

    @Test func mintFollowsTheRestSchemeExactly() {
        // username `<expiry>:<whisperId>`, password base64(HMAC-SHA1(secret, username)).
        let mint = TurnCredentialMint(secret: "secret-for-a-fixed-vector", urls: ["turn:127.0.0.1:3478"], ttl: .seconds(86_400))
        let made = mint.credentials(for: "WSP-AB3D-EF4G-HJKE", now: 1_767_268_800_000)
        #expect(made.username == "1767355200:WSP-AB3D-EF4G-HJKE")
        #expect(made.expiresAt == 1_767_355_200_000)
        #expect(made.ttlSeconds == 86_400)
        // Computed apart from this code (Python's hmac module).
        #expect(made.credential == "Iis8bE1xiR1SI8uW2eDUpNlzb5g=")
    }

    /// Item 9 of issue 34: coturn as the deployments run it (deploy/coturn/turnserver.conf)
    /// relays to no private, link-local or metadata address and holds a bounded number of
    /// allocations per credential; turn-cred's credentials last an hour unless set.
    @Test func relaysReachNoPrivateOrMetadataAddressAndACredentialHoldsFewAllocations() throws {
        let coturn = try CoturnProcess(secrets: [Self.secret])
        let mint = TurnCredentialMint(secret: Self.secret, urls: ["turn:127.0.0.1:3478"], ttl: .seconds(600))
        // (The relay here is IPv4, so the IPv6 ranges of the file are not reached this way.)
        for (index, peer) in ["169.254.169.254", "10.1.2.3", "100.64.0.1", "172.17.0.1", "192.168.1.1", "127.0.0.2"].enumerated() {
            // An identity per peer, so that no quota is what refuses it.
            let credentials = mint.credentials(for: "WSP-PEER-\(index)", now: Clock.millisecondsNow())
            let (status, output) = try coturn.relay(to: peer, username: credentials.username, credential: credentials.credential)
            #expect(status != 0, "a relay to \(peer) was allowed")
            #expect(output.contains("403") || output.contains("Forbidden"), "\(peer): \(output.suffix(300))")
        }
        // One credential, twelve clients at once: coturn's per-credential quota (10)
        // refuses the allocations past it with 486; another identity still allocates.
        let held = mint.credentials(for: "WSP-MN6P-QR7S-TVTG", now: Clock.millisecondsNow())
        let crowd = try coturn.relay(to: "127.0.0.1", username: held.username, credential: held.credential, clients: 12)
        #expect(crowd.output.contains("486"), "12 allocations on one credential: \(crowd.output.suffix(300))")
        let other = mint.credentials(for: "WSP-WX2Y-Z34A-B5C6", now: Clock.millisecondsNow())
        #expect(try coturn.allocates(username: other.username, credential: other.credential))
        #expect(TurnCredSettings.defaultTTLSeconds <= 3_600)
    }
}
