import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import ServiceLifecycle

/// What every service has: its settings, logger, metrics, and clients for Postgres and
/// Redis. Built once per service instance; tests build several in one process.
public struct ServiceEnvironment: Sendable {
    public let settings: CommonSettings
    public let logger: Logger
    public let metrics: ServiceMetrics
    public let redis: RedisClient
    public let postgres: PostgresClient
    /// The check of the Redis server's settings, run with the clients.
    public let redisCheck: RedisServerCheck

    public init(settings: CommonSettings, logger: Logger, eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) {
        var logger = logger
        logger[metadataKey: "instance"] = .string(settings.instanceID)
        self.settings = settings
        self.logger = logger
        self.metrics = ServiceMetrics(service: settings.service, instanceID: settings.instanceID)
        self.redis = RedisClient(configuration: settings.redis, eventLoopGroup: eventLoopGroup, logger: logger)
        self.postgres = PostgresClient(configuration: settings.postgres.clientConfiguration, eventLoopGroup: eventLoopGroup, backgroundLogger: logger)
        self.redisCheck = RedisServerCheck(redis: redis, required: settings.redis.requiredPersistence, logger: logger)
    }

    /// The clients, first in the service group so that they stop last, and the check of
    /// the Redis server's settings (`RedisServerCheck`), which stops the service at start
    /// when Redis would not keep what the services promise.
    public var clientServices: [any Service] {
        [postgres, redis, redisCheck]
    }

    /// Measures one round trip to Postgres (`SELECT 1`) and to Redis (`PING`), at most
    /// `timeout` each, for `/metrics`: what this process's clients see, not what the
    /// servers report. A probe that fails or times out counts in
    /// `whisper_client_probe_failures_total` and marks the dependency down.
    public func probeClients(timeout: Duration = .seconds(1)) async {
        let postgres = self.postgres
        let redis = self.redis
        let logger = self.logger
        let probes: [(String, @Sendable () async throws -> Void)] = [
            ("postgres", { _ = try await postgres.query("SELECT 1", logger: logger).decode(Int.self).first { _ in true } }),
            ("redis", { _ = try await redis.send("PING") }),
        ]
        for (name, probe) in probes {
            let started = ContinuousClock.now
            let answered = await withTaskGroup(of: Bool.self) { group in
                group.addTask { (try? await probe()) != nil }
                group.addTask {
                    try? await Task.sleep(for: timeout)
                    return false
                }
                let first = await group.next() ?? false
                group.cancelAll()
                return first
            }
            let elapsed = ContinuousClock.now - started
            metrics.recordDependency(name, up: answered)
            if answered {
                metrics.gauge("client_roundtrip_seconds", help: "One round trip to the dependency, measured at the last scrape.", labels: [("dependency", name)])
                    .set(elapsed.milliseconds / 1_000)
            } else {
                metrics.counter("client_probe_failures", help: "Scrape-time probes of a dependency that failed or took over a second.", labels: [("dependency", name)])
                    .increment()
            }
        }
    }

    /// Postgres answers, Redis answers, and the schema is at the version this build needs.
    public var standardReadinessChecks: [ReadinessCheck] {
        let postgres = self.postgres
        let redis = self.redis
        let logger = self.logger
        return [
            ReadinessCheck(name: "postgres") {
                guard let version = try await Migrator.currentVersion(client: postgres, logger: logger) else {
                    return .failed("schema not migrated; run `admin migrate`")
                }
                if version < Migrations.latestVersion {
                    return .failed("schema at version \(version), this build needs \(Migrations.latestVersion); run `admin migrate`")
                }
                return .ok
            },
            ReadinessCheck(name: "redis") {
                let reply = try await redis.send("PING")
                return reply.string == "PONG" ? .ok : .failed("unexpected reply to PING")
            },
        ]
    }
}
