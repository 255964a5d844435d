/// Where and how to reach Redis, parsed from a `redis://[[user]:password@]host[:port][/db]`
/// URL, or `rediss://` for TLS.
public struct RedisConfiguration: Sendable, Equatable {
    public var host: String
    public var port: Int
    public var password: String?
    /// An ACL user (Redis 6 and later); nil: the default user.
    public var username: String?
    /// TLS to the server (`rediss://`), its certificate verified against `caFile` (or
    /// the system's roots) and the host name or address.
    public var tls = false
    /// PEM file of the CA that signed the server's certificate (`WHISPER_REDIS_CA_FILE`).
    public var caFile: String?
    public var database: Int
    /// Name shown in `CLIENT LIST`, e.g. the service name.
    public var clientName: String?
    public var connectTimeout: Duration
    public var reconnectBackoff: Backoff.Policy
    /// Nodes of a Redis Cluster to learn the cluster from (`WHISPER_REDIS_CLUSTER`); empty:
    /// one Redis at `host`:`port`. The URL's user, password and TLS apply to every node.
    public var clusterSeeds: [RedisCluster.Endpoint] = []
    /// How durable the server must be, checked at start (`RedisServerCheck`).
    public var requiredPersistence: RedisPersistence = .always
    /// How many shards the work streams are split into (`WHISPER_STREAM_SHARDS`); every
    /// service of a deployment must use the same count.
    public var streamShards: StreamShards = .one
    /// Replicas that must hold a message before its sender is told it is stored
    /// (`RedisClient.waitForReplicas`).
    public var replicaAcks: ReplicaAcknowledgement = .standard(cluster: false)

    public init(
        host: String = "127.0.0.1",
        port: Int = 6379,
        username: String? = nil,
        password: String? = nil,
        database: Int = 0,
        clientName: String? = nil,
        connectTimeout: Duration = .seconds(2),
        reconnectBackoff: Backoff.Policy = .init(initial: .milliseconds(50), maximum: .seconds(2))
    ) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.database = database
        self.clientName = clientName
        self.connectTimeout = connectTimeout
        self.reconnectBackoff = reconnectBackoff
    }

    /// Parses `redis://[[user]:password@]host[:port][/db]` (`rediss://` for TLS); returns
    /// nil for anything else.
    public init?(url: String) {
        let tls = url.hasPrefix("rediss://")
        guard tls || url.hasPrefix("redis://") else { return nil }
        var rest = Substring(url.dropFirst(tls ? "rediss://".count : "redis://".count))
        var username: String?
        var password: String?
        if let at = rest.lastIndex(of: "@") {
            let credentials = rest[..<at]
            rest = rest[rest.index(after: at)...]
            if let colon = credentials.firstIndex(of: ":") {
                let user = credentials[..<colon]
                username = user.isEmpty ? nil : String(user)
                password = String(credentials[credentials.index(after: colon)...]).removingPercentEncodingIfPossible
            } else {
                password = String(credentials).removingPercentEncodingIfPossible
            }
        }
        var database = 0
        if let slash = rest.firstIndex(of: "/") {
            let db = rest[rest.index(after: slash)...]
            rest = rest[..<slash]
            if !db.isEmpty {
                guard let number = Int(db), number >= 0 else { return nil }
                database = number
            }
        }
        var host = String(rest)
        var port = 6379
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return nil }
            host = String(rest[rest.index(after: rest.startIndex)..<close])
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") {
                guard let number = Int(after.dropFirst()) else { return nil }
                port = number
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = String(rest[..<colon])
            guard let number = Int(rest[rest.index(after: colon)...]) else { return nil }
            port = number
        }
        guard !host.isEmpty, (1...65535).contains(port) else { return nil }
        self.init(host: host, port: port, username: username, password: password, database: database)
        self.tls = tls
    }
}

extension RedisConfiguration {
    /// This configuration (user, password, TLS, timeouts) for one node of a cluster.
    func node(_ endpoint: RedisCluster.Endpoint) -> RedisConfiguration {
        var configuration = self
        (configuration.host, configuration.port, configuration.database) = (endpoint.host, endpoint.port, 0)
        return configuration
    }
}

extension String {
    var removingPercentEncodingIfPossible: String {
        guard contains("%") else { return self }
        var bytes: [UInt8] = []
        var iterator = utf8.makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%"), let high = iterator.next(), let low = iterator.next(),
               let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16) {
                bytes.append(value)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// Printed without the password: service descriptions reach debug logs (swift-service-lifecycle).
extension RedisConfiguration: CustomStringConvertible, CustomDebugStringConvertible {
    public var description: String {
        "RedisConfiguration(\(tls ? "rediss" : "redis")://\(host):\(port)/\(database), user \(username ?? "default"), password \(password == nil ? "none" : "redacted"))"
    }

    public var debugDescription: String { description }
}
