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

    public init(settings: CommonSettings, logger: Logger, eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) {
        var logger = logger
        logger[metadataKey: "instance"] = .string(settings.instanceID)
        self.settings = settings
        self.logger = logger
        self.metrics = ServiceMetrics(service: settings.service, instanceID: settings.instanceID)
        self.redis = RedisClient(configuration: settings.redis, eventLoopGroup: eventLoopGroup, logger: logger)
        self.postgres = PostgresClient(configuration: settings.postgres.clientConfiguration, eventLoopGroup: eventLoopGroup, backgroundLogger: logger)
    }

    /// The clients, first in the service group so that they stop last.
    public var clientServices: [any Service] {
        [postgres, redis]
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
