import AsyncHTTPClient
import Foundation
import Synchronization
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import PostgresNIO
import ServiceLifecycle
import Testing
import TurnCredService
import WhisperMessaging
import WhisperShared

/// Where the real servers started by scripts/test listen.
enum TestServers {
    static let environment = ProcessInfo.processInfo.environment
    static let postgresURL = environment["WHISPER_TEST_POSTGRES_URL"] ?? "postgres://whisper@127.0.0.1:25433/whisper"
    static let redisURL = environment["WHISPER_TEST_REDIS_URL"] ?? "redis://127.0.0.1:26380"
    static let redisServerBinary = environment["WHISPER_TEST_REDIS_SERVER"] ?? "/usr/bin/redis-server"
    static let promtool = environment["WHISPER_TEST_PROMTOOL"] ?? "/usr/bin/promtool"
    static let repoRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// `WHISPER_TEST_LOG_LEVEL` (default `error`) for the services under test and the tests' logger.
    static let logLevel = environment["WHISPER_TEST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .error

    static var logger: Logger {
        var logger = Logger(label: "test")
        logger.logLevel = logLevel
        return logger
    }

    /// The internal token test gateways and services share.
    static let internalToken = "test-internal-token-" + String(repeating: "0", count: 24)
    /// The floor key test gateways sign grants with (`GATEWAY_FLOOR_KEYS`).
    static let floorKeySeed = Array((0..<32).map { UInt8($0 &* 7 &+ 3) })
    /// The key directory's VRF and signing keys in test stacks (`GC_WORKER_KT_VRF_KEY`, `GC_WORKER_KT_SIGNING_KEYS`).
    static let directoryVRFSeed = Array((0..<32).map { UInt8(truncatingIfNeeded: $0 &* 11 &+ 5) })
    static let directorySigningSeed = Array((0..<32).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 1) })
    static let directorySigner = DirectorySigner(vrfSeed: directoryVRFSeed, signingSeeds: [directorySigningSeed])
    /// The deletion journal's key in test stacks (`GC_WORKER_JOURNAL_KEYS`).
    static let journalSecret = Array((0..<32).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) })
    static let journalKeys = JournalKeys(secrets: [journalSecret])
    static let adminToken = "test-admin-token-" + String(repeating: "a", count: 32)

    static var redis: RedisConfiguration {
        RedisConfiguration(url: redisURL)!
    }

    /// Common settings for a service under test: port 0 (any free port), the test servers.
    static func common(service: String, postgres: PostgresSettings, redis: RedisConfiguration = TestServers.redis) -> CommonSettings {
        CommonSettings(
            service: service,
            instanceID: "\(service)-\(UUID().uuidString.prefix(8).lowercased())",
            http: HTTPSettings(host: "127.0.0.1", port: 0),
            postgres: postgres,
            redis: redis,
            logLevel: logLevel,
            shutdownGracePeriod: .seconds(5)
        )
    }

    /// A free TCP port on loopback.
    static func freePort() throws -> Int {
        let channel = try ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0).wait()
        let port = channel.localAddress!.port!
        try channel.close().wait()
        return port
    }
}

/// Fresh databases for tests, each a copy of a migrated template (or empty), on the
/// local test server only. A test hands its database back with `release` when it is
/// done; released databases are dropped before the next one is made, so a run keeps a
/// few on disk, not one per test (about 9 MB each, with as much again in WAL).
actor TestDatabases {
    static let shared = TestDatabases()
    private var template: Task<String, any Error>?
    private let released = Mutex<[String]>([])

    /// Hands back a database `make` returned; nothing may use it afterwards.
    nonisolated func release(_ database: PostgresSettings) {
        released.withLock { $0.append(database.database) }
    }

    private func adminSettings() throws -> PostgresSettings {
        let settings = try #require(PostgresSettings(url: TestServers.postgresURL))
        guard ["127.0.0.1", "localhost", "::1"].contains(settings.host) else {
            throw TestSetupError("refusing to create test databases on non-local host \(settings.host)")
        }
        return settings
    }

    private func execute(_ sql: String) async throws {
        let client = PostgresClient(configuration: try adminSettings().clientConfiguration, backgroundLogger: TestServers.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            try await client.query(PostgresQuery(unsafeSQL: sql), logger: TestServers.logger)
            group.cancelAll()
        }
    }

    /// A new database; migrated to the latest schema unless `migrated` is false.
    func make(migrated: Bool = true) async throws -> PostgresSettings {
        await dropReleased()
        let name = "whisper_t_\(UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased())"
        // A copy's source may still have a connection closing (the migrated template's
        // last one, or a drop's on template1); Postgres refuses to copy a database someone
        // is connected to, so the copy is tried again.
        let source = migrated ? try await migratedTemplate() : "template1"
        var attempt = 0
        while true {
            do {
                try await execute("CREATE DATABASE \(name) TEMPLATE \(source)")
                break
            } catch {
                attempt += 1
                if attempt > 50 { throw TestSetupError("could not copy \(source): \(String(reflecting: error))") }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        return try adminSettings().with(database: name)
    }

    /// Drops the released databases. A drop is housekeeping, never the next test's
    /// failure: one that fails (a connection still closing) is tried again next time.
    private func dropReleased() async {
        let names = released.withLock { names in defer { names = [] }; return names }
        var kept: [String] = []
        for name in names {
            do {
                try await execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
            } catch {
                kept.append(name)
            }
        }
        released.withLock { $0.append(contentsOf: kept) }
    }

    private func migratedTemplate() async throws -> String {
        if let template { return try await template.value }
        let task = Task { try await self.createTemplate() }
        template = task
        return try await task.value
    }

    private func createTemplate() async throws -> String {
        let name = "whisper_template_\(ProcessInfo.processInfo.processIdentifier)"
        try await execute("DROP DATABASE IF EXISTS \(name)")
        try await execute("CREATE DATABASE \(name)")
        let settings = try adminSettings().with(database: name)
        let client = PostgresClient(configuration: settings.clientConfiguration, backgroundLogger: TestServers.logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            try await Migrator().migrate(client: client, logger: TestServers.logger)
            group.cancelAll()
        }
        return name
    }
}

/// A service assembly running in this process, stopped gracefully by `stop()`.
struct RunningService: Sendable {
    let port: Int
    let group: ServiceGroup
    let task: Task<Void, any Error>
    /// auth's internal port (frame endpoints), once `TestServers.startAuth` saw it listen.
    var internalPort = 0

    var baseURL: String { "http://127.0.0.1:\(port)" }

    /// Builds with an `onServerRunning` hook, runs, and waits for the listening port.
    static func start(_ build: (@escaping @Sendable (Int) async -> Void) -> ServiceAssembly) async throws -> RunningService {
        let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
        let assembly = build { port in continuation.yield(port) }
        let group = assembly.makeGroup(handleSignals: false)
        let task = Task { try await group.run() }
        let port: Int?
        do {
            port = try await withTimeout("the service's listening port", timeout: .seconds(20)) { await ports.first { _ in true } }
        } catch {
            task.cancel()
            throw error
        }
        guard let port else {
            task.cancel()
            throw TestSetupError("service stopped before it listened")
        }
        return RunningService(port: port, group: group, task: task)
    }

    /// A server of the test's own on a free loopback port, answering what `router`
    /// routes: a stand-in that misbehaves as the test wants, or a collector.
    static func serving(_ router: Router<BasicRequestContext>) async throws -> RunningService {
        try await start { listening in
            let app = Application(
                router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                onServerRunning: { await listening($0.localAddress?.port ?? 0) }, logger: TestServers.logger
            )
            return ServiceAssembly(services: [app], logger: TestServers.logger, gracePeriod: .seconds(5))
        }
    }

    func stop() async throws {
        await group.triggerGracefulShutdown()
        try await task.value
    }
}

extension RunningService: StartedForATest {}

/// Small HTTP helpers over AsyncHTTPClient.
enum HTTP {
    struct Reply {
        var status: Int
        var body: String
        var json: [String: Any]? {
            (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any]
        }
    }

    /// A JSON request (`body` as a JSON object, `token` as a bearer token) and its
    /// status and JSON answer (empty when the answer is not a JSON object).
    static func json(
        _ method: HTTPMethod, _ url: String, token: String?, body: [String: Any]? = nil
    ) async throws -> (status: Int, json: [String: Any]) {
        var request = HTTPClientRequest(url: url)
        request.method = method
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: try JSONSerialization.data(withJSONObject: body)))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        let bytes = try await response.body.collect(upTo: 1 << 20)
        return (Int(response.status.code), (try? JSONSerialization.jsonObject(with: Data(buffer: bytes))) as? [String: Any] ?? [:])
    }

    static func get(_ url: String) async throws -> Reply {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: url), timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 4 << 20)
        return Reply(status: Int(response.status.code), body: String(buffer: body))
    }

    /// Polls until `condition` holds for the reply at `url`, or fails after `timeout`.
    static func waitFor(_ url: String, timeout: Duration = .seconds(20), _ condition: (Reply) -> Bool) async throws -> Reply {
        let deadline = ContinuousClock.now + timeout
        var last: Reply?
        while ContinuousClock.now < deadline {
            if let reply = try? await get(url) {
                last = reply
                if condition(reply) { return reply }
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw TestSetupError("condition on \(url) not met within \(timeout); last reply: \(last.map { "\($0.status) \($0.body)" } ?? "none")")
    }
}

import AuthService
import GatewayService
import GCWorkerService

/// The directory publisher a `MessagingStack` runs (`TestServers.startDirectoryPublisher`).
struct DirectoryPublisherTask: StartedForATest {
    let loop: Task<Void, Never>
    let client: Task<Void, Never>

    func stop() async throws {
        loop.cancel()
        await loop.value
        client.cancel()
        await client.value
    }
}

extension TestServers {
    /// Auth with limits no test reaches by accident: every test connects from 127.0.0.1
    /// to the same Redis, so per-address buckets are shared. Tests of the limits
    /// themselves tighten them and use a Redis of their own.
    static func authSettings(_ database: PostgresSettings, redis: RedisConfiguration = TestServers.redis) -> AuthSettings {
        var settings = AuthSettings(
            common: common(service: "auth", postgres: database, redis: redis), internalToken: internalToken,
            internalHTTP: HTTPSettings(host: "127.0.0.1", port: (try? freePort()) ?? 0)
        )
        for limit in [Limit.registerPerAddress, .registerPerIdentity, .updateTokensPerIdentity, .updateTokensPerAddress, .keyLookupPerIdentity] {
            settings.limits[limit] = RateLimitRule("100000/60s")!
        }
        return settings
    }

    /// Starts auth and waits until both its ports listen (the internal one answers 404 at `/`).
    static func startAuth(_ settings: AuthSettings) async throws -> RunningService {
        var auth = try await RunningService.start { running in
            buildAuth(settings: settings, logger: TestServers.logger, onServerRunning: running).assembly
        }
        _ = try await HTTP.waitFor("http://127.0.0.1:\(settings.internalHTTP.port)/") { $0.status == 404 }
        auth.internalPort = settings.internalHTTP.port
        return auth
    }

    /// The object store at a local moto server on `port`, path-style, bucket `whisper-test`.
    /// The key directory's publisher as gc-worker runs it, alone (a whole gc-worker would
    /// also take the stack's GC runs): an epoch every 200 ms while identities wait.
    static func startDirectoryPublisher(_ database: PostgresSettings) async throws -> DirectoryPublisherTask {
        let postgres = PostgresClient(configuration: database.clientConfiguration, backgroundLogger: logger)
        let publisher = DirectoryPublisher(postgres: postgres, signer: directorySigner, batchSize: 5_000, headMaxAge: .seconds(3_600), logger: logger)
        let client = Task { await postgres.run() }
        // The loop stops first and its last statement finishes on a running client; only
        // then does the client stop (`DirectoryPublisherTask.stop`).
        let loop = Task {
            while !Task.isCancelled {
                do {
                    try await publisher.recordKeys()
                    break
                } catch {
                    try? await Task.sleep(for: .milliseconds(100))
                }
            }
            while !Task.isCancelled {
                _ = try? await publisher.publish()
                try? await Task.sleep(for: .milliseconds(200))
            }
        }
        return DirectoryPublisherTask(loop: loop, client: client)
    }

    static func s3Settings(port: Int, bucket: String = "whisper-test") -> S3Settings {
        S3Settings(
            location: S3Location(endpoint: "http://127.0.0.1:\(port)", region: "us-east-1", bucket: bucket, pathStyle: true),
            accessKeyId: "testing", secretAccessKey: "testing"
        )
    }

    static func turnCredSettings(common: CommonSettings, secrets: [String] = ["test-turn-secret-0123456789"], ttl: Duration = .seconds(3_600)) -> TurnCredSettings {
        TurnCredSettings(
            common: common, internalToken: internalToken, secrets: secrets,
            urls: ["turn:127.0.0.1:3478?transport=udp", "stun:127.0.0.1:3478"],
            internalHTTP: HTTPSettings(host: "127.0.0.1", port: (try? freePort()) ?? 0), ttl: ttl
        )
    }

    /// `authPort`: auth's internal port (`AuthSettings.internalHTTP`), where the frame endpoints are.
    static func gatewaySettings(_ database: PostgresSettings, authPort: Int, redis: RedisConfiguration = TestServers.redis) -> GatewaySettings {
        var settings = GatewaySettings(
            common: common(service: "gateway", postgres: database, redis: redis),
            authURL: "http://127.0.0.1:\(authPort)", internalToken: internalToken, floorKeys: FloorKeys(seeds: [floorKeySeed])
        )
        // Tests leave sockets open at the end; do not wait long for them.
        settings.drainTimeout = .milliseconds(300)
        settings.limits[.sendPerSender] = RateLimitRule("100000/60s")!
        // Every test client comes from 127.0.0.1: per-address limits would join them all.
        settings.limits[.routedPerAddress] = RateLimitRule("1000000/60s")!
        settings.limits[.deletionsPerAddress] = RateLimitRule("100000/60s")!
        settings.maxSocketsPerAddress = 100_000
        // A busy test machine can hold a frame past the production wait (100 ms) and turn a
        // burst of sends into busy refusals; the test of that wait sets it itself.
        settings.sendWaitMax = .zero
        return settings
    }
}
