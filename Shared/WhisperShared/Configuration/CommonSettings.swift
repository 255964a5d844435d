import Foundation
import Logging

/// Where a service listens for HTTP (and, for the gateway, WebSocket) traffic.
public struct HTTPSettings: Sendable {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }
}

/// Settings every service reads, whatever it does.
public struct CommonSettings: Sendable {
    /// Which executable this is (`gateway`, `auth`, ...): shown in every log line.
    public var service: String
    /// Distinguishes replicas of one service; defaults to `<service>-<random>`.
    public var instanceID: String
    public var http: HTTPSettings
    public var postgres: PostgresSettings
    public var redis: RedisConfiguration
    public var logLevel: Logger.Level
    /// How long SIGTERM waits for in-flight work before the process exits anyway.
    public var shutdownGracePeriod: Duration
    /// Proxies whose `X-Forwarded-For` names the client (`WHISPER_TRUSTED_PROXIES`).
    public var trustedProxies: TrustedProxies = .none

    public init(
        service: String,
        instanceID: String,
        http: HTTPSettings,
        postgres: PostgresSettings,
        redis: RedisConfiguration,
        logLevel: Logger.Level = .info,
        shutdownGracePeriod: Duration = .seconds(10)
    ) {
        self.service = service
        self.instanceID = instanceID
        self.http = http
        self.postgres = postgres
        self.redis = redis
        self.logLevel = logLevel
        self.shutdownGracePeriod = shutdownGracePeriod
    }

    /// Reads the shared settings: `WHISPER_POSTGRES_URL`, `WHISPER_REDIS_URL`,
    /// `WHISPER_REDIS_CLUSTER`, `WHISPER_REDIS_CA_FILE`, `WHISPER_REDIS_REQUIRED_PERSISTENCE`, `WHISPER_STREAM_SHARDS`,
    /// `WHISPER_REDIS_WAIT_REPLICAS`, `WHISPER_REDIS_WAIT_TIMEOUT_MS`, `WHISPER_REDIS_WAIT_SHORTFALL`,
    /// `WHISPER_LOG_LEVEL`, `WHISPER_INSTANCE_ID`, `WHISPER_SHUTDOWN_GRACE_SECONDS`, and this
    /// service's `<SERVICE>_HTTP_HOST` / `<SERVICE>_HTTP_PORT`.
    public init(service: String, defaultPort: Int, from settings: SettingsReader) {
        self.service = service
        let prefix = service.replacingOccurrences(of: "-", with: ".")
        self.instanceID = settings.string(
            "whisper.instance.id",
            default: "\(service)-\(String(UInt32.random(in: .min ... .max), radix: 36))"
        )
        self.http = HTTPSettings(
            host: settings.string("\(prefix).http.host", default: "127.0.0.1"),
            port: settings.int("\(prefix).http.port", default: defaultPort, range: 0...65535)
        )
        let postgresURL = settings.requiredString("whisper.postgres.url", secret: true)
        if postgresURL.isEmpty {
            self.postgres = PostgresSettings(host: "", port: 5432, username: "", password: nil, database: "")
        } else if let parsed = PostgresSettings(url: postgresURL) {
            self.postgres = parsed
        } else {
            settings.reject(
                "whisper.postgres.url",
                because: "must look like postgres://user[:password]@host[:port]/database[?sslmode=disable|prefer|require|verify-ca|verify-full]"
            )
            self.postgres = PostgresSettings(host: "", port: 5432, username: "", password: nil, database: "")
        }
        self.postgres.maximumConnections = settings.int("whisper.postgres.max.connections", default: 10, range: 1...500)
        let postgresCA = settings.string("whisper.postgres.ca.file", default: "")
        if !postgresCA.isEmpty {
            self.postgres.caFile = postgresCA
        }
        if let file = postgres.caFile {
            if postgres.tlsMode == "disable" {
                settings.reject("whisper.postgres.ca.file", because: "is for TLS: add sslmode=verify-full to WHISPER_POSTGRES_URL")
            } else if !FileManager.default.isReadableFile(atPath: file) {
                settings.reject("whisper.postgres.ca.file", because: "names no readable file")
            }
        }
        let redisURL = settings.requiredString("whisper.redis.url", secret: true)
        if let parsed = RedisConfiguration(url: redisURL) {
            self.redis = parsed
        } else {
            if !redisURL.isEmpty {
                settings.reject("whisper.redis.url", because: "must look like redis://[[user]:password@]host[:port][/db] (rediss:// for TLS)")
            }
            self.redis = RedisConfiguration()
        }
        self.redis.clientName = "whisper-\(service)"
        let seeds = settings.string("whisper.redis.cluster", default: "")
        if !seeds.isEmpty {
            let endpoints = seeds.split(separator: ",").map { RedisCluster.Endpoint($0.trimmingCharacters(in: .whitespaces)) }
            if endpoints.contains(where: { $0 == nil }) {
                settings.reject("whisper.redis.cluster", because: "must list cluster nodes as host:port, comma-separated")
            } else {
                self.redis.clusterSeeds = endpoints.compactMap { $0 }
                if redis.database != 0 { settings.reject("whisper.redis.url", because: "names a database; a cluster has only database 0") }
            }
        }
        self.redis.streamShards = StreamShards(
            settings.int("whisper.stream.shards", default: StreamShards.standard(cluster: !redis.clusterSeeds.isEmpty).count, range: 1...StreamShards.maximum)
        )
        let acks = ReplicaAcknowledgement.standard(cluster: !redis.clusterSeeds.isEmpty)
        self.redis.replicaAcks = ReplicaAcknowledgement(
            replicas: settings.int("whisper.redis.wait.replicas", default: acks.replicas, range: 0...16),
            timeout: .milliseconds(settings.int("whisper.redis.wait.timeout.ms", default: Int(acks.timeout.milliseconds), range: 1...60_000))
        )
        let shortfall = settings.string("whisper.redis.wait.shortfall", default: acks.shortfall.rawValue)
        if let parsed = ReplicaAcknowledgement.Shortfall(rawValue: shortfall) {
            self.redis.replicaAcks.shortfall = parsed
        } else {
            settings.reject("whisper.redis.wait.shortfall", because: "must be one of accept, refuse")
        }
        let redisCA = settings.string("whisper.redis.ca.file", default: "")
        if !redisCA.isEmpty {
            if !redis.tls {
                settings.reject("whisper.redis.ca.file", because: "is for TLS: use a rediss:// URL")
            } else if !FileManager.default.isReadableFile(atPath: redisCA) {
                settings.reject("whisper.redis.ca.file", because: "names no readable file")
            }
            self.redis.caFile = redisCA
        }
        let persistence = settings.string("whisper.redis.required.persistence", default: RedisPersistence.always.rawValue)
        if let parsed = RedisPersistence(rawValue: persistence) {
            self.redis.requiredPersistence = parsed
        } else {
            settings.reject("whisper.redis.required.persistence", because: "must be one of always, everysec, none")
        }
        let level = settings.string("whisper.log.level", default: "info")
        if let parsed = Logger.Level(rawValue: level.lowercased()) {
            self.logLevel = parsed
        } else {
            settings.reject("whisper.log.level", because: "must be one of trace, debug, info, notice, warning, error, critical")
            self.logLevel = .info
        }
        self.shutdownGracePeriod = .seconds(settings.int("whisper.shutdown.grace.seconds", default: 10, range: 0...600))
        if let proxies = TrustedProxies(settings.string("whisper.trusted.proxies", default: "")) {
            self.trustedProxies = proxies
        } else {
            settings.reject("whisper.trusted.proxies", because: "must list IP addresses or CIDR ranges, comma-separated (10.0.0.0/8, fd00::/8)")
        }
        self.trustedProxies.ipv6Prefix = settings.int("whisper.client.ipv6.prefix", default: TrustedProxies.standardIPv6Prefix, range: 32...128)
    }
}
