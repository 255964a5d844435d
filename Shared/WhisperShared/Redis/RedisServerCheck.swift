import Logging
import ServiceLifecycle
import Synchronization

/// How durable the Redis a service is given must be (`WHISPER_REDIS_REQUIRED_PERSISTENCE`),
/// checked at start by `RedisServerCheck` (docs/operations.md, "Redis settings checked at
/// start").
public enum RedisPersistence: String, Sendable, CaseIterable {
    /// The append-only file, fsynced before every reply: what a sender was told is stored
    /// survives a crash of Redis or its machine (the default).
    case always
    /// The append-only file, fsynced once a second (or more often): a crash may lose
    /// about the last two seconds, acknowledged messages included.
    case everysec
    /// Not checked (throwaway load tests).
    case none

    /// What is wrong with a server running with `appendonly` and `appendfsync` as given,
    /// for this requirement; nil when it meets it.
    func problem(appendonly: String, appendfsync: String) -> String? {
        switch self {
        case .none:
            return nil
        case .always, .everysec:
            guard appendonly == "yes" else {
                return "Redis runs without its append-only file (appendonly \(appendonly)): a restart loses every pending message; "
                    + "set appendonly yes and appendfsync \(rawValue), or WHISPER_REDIS_REQUIRED_PERSISTENCE=none for a throwaway setup"
            }
            let enough = self == .always ? ["always"] : ["always", "everysec"]
            guard enough.contains(appendfsync) else {
                return "Redis fsyncs its append-only file with appendfsync \(appendfsync), weaker than the required \(rawValue): "
                    + "acknowledged messages could be lost in a crash; set appendfsync \(rawValue), or lower WHISPER_REDIS_REQUIRED_PERSISTENCE knowingly"
            }
            return nil
        }
    }
}

/// Checks once, when Redis first answers, `maxmemory-policy noeviction` and the
/// append-only file's durability (`RedisConfiguration.requiredPersistence`); a server that
/// fails them stops the service at start with what to change, one that refuses `CONFIG
/// GET` is logged as unchecked and used.
public final class RedisServerCheck: Service, Sendable {
    let redis: RedisClient
    let required: RedisPersistence
    let logger: Logger

    /// What the check found, once it has.
    public enum Verdict: Sendable, Equatable {
        case passed
        /// Redis refused `CONFIG GET`: used unchecked.
        case unchecked
        /// The service stops with these problems.
        case refused([String])
    }

    private let found = Mutex<Verdict?>(nil)

    /// Nil until the check has been made.
    public var verdict: Verdict? { found.withLock { $0 } }

    public init(redis: RedisClient, required: RedisPersistence, logger: Logger) {
        self.redis = redis
        self.required = required
        self.logger = logger
    }

    /// What is wrong with the server `redis` is connected to (empty: nothing), or nil
    /// when it would not say (`CONFIG GET` refused). On a cluster, every master is asked,
    /// and each problem names its node.
    public static func problems(on redis: RedisClient, required: RedisPersistence) async throws -> [String]? {
        let questions = ["maxmemory-policy", "appendonly", "appendfsync"].map { RedisCommand("CONFIG", "GET", $0) }
        guard let cluster = redis.cluster else {
            return problems(in: try await redis.pipeline(questions), required: required)
        }
        if cluster.masters.isEmpty { try await cluster.refresh() }
        var all: [String] = []
        for master in cluster.masters {
            guard let found = problems(in: try await cluster.connection(to: master).pipeline(questions), required: required) else { return nil }
            all += found.map { "\(master): \($0)" }
        }
        return all
    }

    /// The problems the replies to the three `CONFIG GET`s show, or nil when refused.
    private static func problems(in replies: [RESPValue], required: RedisPersistence) -> [String]? {
        var values: [String] = []
        for reply in replies {
            // `CONFIG GET name` answers [name, value] (RESP2), or nothing for an unknown name.
            guard case .array(let pair) = reply, pair.count == 2, let value = pair[1].string else { return nil }
            values.append(value)
        }
        var problems: [String] = []
        if values[0] != "noeviction" {
            problems.append(
                "Redis evicts keys under memory pressure (maxmemory-policy \(values[0])): pending messages would be dropped silently; "
                    + "set maxmemory-policy noeviction (the services answer a full Redis with errors instead)"
            )
        }
        if let persistence = required.problem(appendonly: values[1], appendfsync: values[2]) {
            problems.append(persistence)
        }
        return problems
    }

    public func run() async throws {
        let redis = self.redis
        let required = self.required
        let outcome: [String]?? = await cancelWhenGracefulShutdown { () -> [String]?? in
            while !Task.isCancelled {
                do {
                    return .some(try await Self.problems(on: redis, required: required))
                } catch {
                    // Not connected yet, or the connection dropped: the client reconnects
                    // with its backoff, and the check is made once it has.
                    try? await Task.sleep(for: .milliseconds(100))
                }
            }
            return nil
        }
        switch outcome {
        case .some(.some(let problems)) where !problems.isEmpty:
            found.withLock { $0 = .refused(problems) }
            throw SettingsError(problems: problems)
        case .some(.some):
            found.withLock { $0 = .passed }
            logger.debug("redis_settings_checked", metadata: ["requiredPersistence": "\(required.rawValue)"])
        case .some(.none):
            found.withLock { $0 = .unchecked }
            logger.error("redis_settings_unchecked", metadata: [
                "reason": "Redis refused CONFIG GET; check by hand that maxmemory-policy is noeviction and appendfsync is \(required.rawValue)",
            ])
        case .none:
            return
        }
        try? await gracefulShutdown()
    }
}
