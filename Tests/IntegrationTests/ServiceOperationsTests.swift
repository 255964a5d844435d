import AdminService
import AttachmentSignerService
import AuthService
import Foundation
import GatewayService
import GCWorkerService
import PostgresNIO
import PushSenderService
import RouterService
import Testing
import TurnCredService
import WhisperShared

/// The operations endpoints every service has, on real Redis and Postgres.
@Suite struct ServiceOperationsTests {
    typealias Builder = @Sendable (CommonSettings, @escaping @Sendable (Int) async -> Void) -> ServiceAssembly

    static let builders: [(String, Builder)] = [
        ("gateway", { buildGateway(settings: GatewaySettings(common: $0, authURL: "http://127.0.0.1:1", internalToken: TestServers.internalToken, floorKeys: FloorKeys(seeds: [TestServers.floorKeySeed])), logger: TestServers.logger, onServerRunning: $1).assembly }),
        ("auth", { buildAuth(settings: AuthSettings(common: $0, internalToken: TestServers.internalToken, internalHTTP: HTTPSettings(host: "127.0.0.1", port: 0)), logger: TestServers.logger, onServerRunning: $1).assembly }),
        ("router", { buildRouter(settings: RouterSettings(common: $0), logger: TestServers.logger, onServerRunning: $1).assembly }),
        ("push-sender", { buildPushSender(settings: PushSenderSettings(common: $0), logger: TestServers.logger, onServerRunning: $1).assembly }),
        ("attachment-signer", { buildAttachmentSigner(settings: AttachmentSignerSettings(common: $0, s3: TestServers.s3Settings(port: 9)), logger: TestServers.logger, onServerRunning: $1).assembly }),
        ("turn-cred", { buildTurnCred(settings: TestServers.turnCredSettings(common: $0), logger: TestServers.logger, onServerRunning: $1).assembly }),
        ("admin", { buildAdmin(settings: AdminSettings(common: $0, tokens: [("ops", TestServers.adminToken)]), logger: TestServers.logger, onServerRunning: $1).assembly }),
        ("gc-worker", { buildGCWorker(settings: GCWorkerSettings(common: $0, s3: TestServers.s3Settings(port: 9), directorySigner: TestServers.directorySigner, journalKeys: TestServers.journalKeys), logger: TestServers.logger, onServerRunning: $1).assembly }),
    ]

    @Test func allEightServicesAnswerHealthReadyAndPromtoolCleanMetrics() async throws {
        let database = try await TestDatabases.shared.make()
        defer { TestDatabases.shared.release(database) }
        var running: [(String, RunningService)] = []
        try await StartedTogether.start { started in
            for (name, build) in Self.builders {
                let common = TestServers.common(service: name, postgres: database)
                running.append((name, started.add(try await RunningService.start { build(common, $0) })))
            }
        }.running { _ in
            for (name, service) in running {
                let health = try await HTTP.get("\(service.baseURL)/health")
                #expect(health.status == 200)
                #expect(health.json?["service"] as? String == name)

                let ready = try await HTTP.waitFor("\(service.baseURL)/ready") { $0.status == 200 }
                #expect(ready.json?["status"] as? String == "ready")
                let checks = ready.json?["checks"] as? [String: String] ?? [:]
                #expect(checks["postgres"] == "ok" && checks["redis"] == "ok" && checks.values.allSatisfy { $0 == "ok" }, "\(name): \(checks)")

                let metrics = try await HTTP.get("\(service.baseURL)/metrics")
                #expect(metrics.status == 200)
                #expect(metrics.body.contains("whisper_service_info{service=\"\(name)\""))
                let (status, output) = try runPromtool(metrics.body)
                #expect(status == 0, "promtool rejects \(name)'s metrics: \(output)")
            }
        }
    }

    @Test func readinessWaitsForTheSchema() async throws {
        let database = try await TestDatabases.shared.make(migrated: false)
        defer { TestDatabases.shared.release(database) }
        try await RunningService.start { running in
            buildAuth(settings: TestServers.authSettings(database), logger: TestServers.logger, onServerRunning: running).assembly
        }.running { service in
            // Not ready for the schema alone: Redis is up (once its client has connected).
            let before = try await HTTP.waitFor("\(service.baseURL)/ready") {
                $0.status == 503 && ($0.json?["checks"] as? [String: String])?["redis"] == "ok"
            }
            #expect(before.json?["status"] as? String == "not_ready")
            let checks = before.json?["checks"] as? [String: String]
            #expect(checks?["postgres"]?.contains("admin migrate") == true)
            #expect(checks?["redis"] == "ok")

            let client = PostgresClient(configuration: database.clientConfiguration, backgroundLogger: TestServers.logger)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                try await Migrator().migrate(client: client, logger: TestServers.logger)
                group.cancelAll()
            }
            _ = try await HTTP.waitFor("\(service.baseURL)/ready") { $0.status == 200 }
        }
    }

    @Test func aRedisRestartMidRunIsSurvivedWithoutRestartingTheService() async throws {
        let redis = try RedisProcess()
        try redis.start()
        let database = try await TestDatabases.shared.make()
        defer { TestDatabases.shared.release(database) }
        let common = TestServers.common(service: "gateway", postgres: database, redis: RedisConfiguration(url: redis.url)!)
        let handle = LockedBox<GatewayHandle?>(nil)
        try await RunningService.start { running in
            let gateway = buildGateway(settings: GatewaySettings(common: common, authURL: "http://127.0.0.1:1", internalToken: TestServers.internalToken, floorKeys: FloorKeys(seeds: [TestServers.floorKeySeed])), logger: TestServers.logger, onServerRunning: running)
            handle.value = gateway
            return gateway.assembly
        }.running { service in
            let environment = try #require(handle.value).environment
            _ = try await HTTP.waitFor("\(service.baseURL)/ready") { $0.status == 200 }
            try await environment.redis.send("SET", "survivor", "1")

            redis.kill()
            let down = try await HTTP.waitFor("\(service.baseURL)/ready") { $0.status == 503 }
            #expect((down.json?["checks"] as? [String: String])?["redis"] != "ok")

            try redis.start()
            let up = try await HTTP.waitFor("\(service.baseURL)/ready") { $0.status == 200 }
            #expect((up.json?["checks"] as? [String: String])?["redis"] == "ok")
            // The same client object, never restarted, works again.
            try await environment.redis.send("SET", "survivor", "2")
            #expect(try await environment.redis.send("GET", "survivor").string == "2")
            let metrics = try await HTTP.get("\(service.baseURL)/metrics").body
            #expect(metrics.contains(#"whisper_dependency_up{dependency="redis"} 1.0"#))
        }
    }

    func runPromtool(_ text: String) throws -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: TestServers.promtool)
        process.arguments = ["check", "metrics"]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = output
        try process.run()
        input.fileHandleForWriting.write(Data(text.utf8))
        try input.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}

/// A value shared with a `@Sendable` closure in tests.
final class LockedBox<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value

    init(_ value: Value) { stored = value }

    var value: Value {
        get { lock.withLock { stored } }
        set { lock.withLock { stored = newValue } }
    }
}
