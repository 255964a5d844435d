/// A token bucket: `capacity` requests at once, refilled at `capacity` per `period`.
public struct RateLimitRule: Sendable, Equatable, CustomStringConvertible {
    public var capacity: Int
    public var period: Duration

    public init(capacity: Int, period: Duration) {
        self.capacity = capacity
        self.period = period
    }

    /// Parses `<count>/<number><s|m|h>`, e.g. `20/60s`, `10/1m`, `1000/1h`. Counts up to
    /// a billion and periods up to a year; anything larger is refused, not wrapped.
    public init?(_ text: String) {
        let parts = text.split(separator: "/")
        guard parts.count == 2, let count = Int(parts[0]), (1...Self.maxCapacity).contains(count), let unit = parts[1].last,
              let amount = Int(parts[1].dropLast()), amount > 0 else { return nil }
        let unitSeconds: Int
        switch unit {
        case "s": unitSeconds = 1
        case "m": unitSeconds = 60
        case "h": unitSeconds = 3600
        default: return nil
        }
        let (seconds, overflow) = amount.multipliedReportingOverflow(by: unitSeconds)
        guard !overflow, seconds <= Self.maxPeriodSeconds else { return nil }
        self.init(capacity: count, period: .seconds(seconds))
    }

    static let maxCapacity = 1_000_000_000
    static let maxPeriodSeconds = 366 * 24 * 3600

    public var description: String { "\(capacity)/\(Int(period.milliseconds / 1000))s" }
}

/// Token buckets in Redis (`ratelimit:{key}:{action}`), refilled continuously,
/// evaluated atomically by one Lua script on the server's clock.
public struct RateLimiter: Sendable {
    let redis: RedisClient

    public init(redis: RedisClient) {
        self.redis = redis
    }

    public enum Decision: Sendable, Equatable {
        case allowed
        case limited(retryAfterMs: Int)
    }

    /// Takes one token from the bucket of `key` for `action`.
    public func take(_ action: String, key: String, rule: RateLimitRule) async throws -> Decision {
        let reply = try await redis.evaluate(Self.takeScript, keys: [RedisKeys.rateLimit(key, action)], arguments: Self.arguments(rule))
        return try Self.decision(reply, "rate limit script")
    }

    /// Whether the bucket of `key` for `action` holds a token, taking none.
    public func peek(_ action: String, key: String, rule: RateLimitRule) async throws -> Decision {
        let reply = try await redis.evaluate(Self.peekScript, keys: [RedisKeys.rateLimit(key, action)], arguments: Self.arguments(rule))
        return try Self.decision(reply, "rate limit peek script")
    }

    /// What a lease got: `granted` tokens (at least one), or nothing until `retryAfterMs`.
    public enum Lease: Sendable, Equatable {
        case granted(Int)
        case limited(retryAfterMs: Int)
    }

    /// Takes up to `wanted` tokens at once from the bucket stored at `bucket`: as many
    /// as it holds, at least one, or none when it is empty. A caller that serves the
    /// same identity's frames one after another (a gateway, for the one socket an
    /// identity holds) spends them without a round trip each; tokens it never spends
    /// are lost, never given back, so the bucket's rule is never exceeded. `mayWait`: how
    /// long the write may wait to share Redis's pass with others (a lease asked ahead of
    /// need: `RedisConnection.pipeline(_:written:mayWait:)`).
    public func lease(bucket: String, rule: RateLimitRule, wanted: Int, mayWait: Duration = .zero) async throws -> Lease {
        let (reply, _) = try await redis.evaluate(
            Self.leaseScript, keys: [bucket], arguments: Self.arguments(rule) + [max(1, wanted)], alongside: [], mayWait: mayWait
        )
        guard let values = reply.array, values.count == 2, let granted = values[0].int else {
            throw RedisError.unexpectedReply("rate limit lease script")
        }
        if granted >= 1 { return .granted(Int(granted)) }
        return .limited(retryAfterMs: Int(values[1].int ?? 0))
    }

    /// The key of a client address's buckets kept in Redis (every instance together):
    /// `address` as `TrustedProxies` gives it, marked apart from identities' keys.
    public static func addressKey(_ address: String) -> String { "ip:" + address }

    /// A rule as the bucket code's two arguments: capacity, and tokens added per millisecond.
    public static func arguments(_ rule: RateLimitRule) -> [any RedisArgument] {
        [rule.capacity, String(Double(rule.capacity) / rule.period.milliseconds)]
    }

    /// `{1, x}` (allowed) or `{0, retryAfterMs}`, as the scripts here answer.
    static func decision(_ reply: RESPValue, _ what: String) throws -> Decision {
        guard let values = reply.array, values.count == 2, let allowed = values[0].int else {
            throw RedisError.unexpectedReply(what)
        }
        if allowed == 1 { return .allowed }
        return .limited(retryAfterMs: Int(values[1].int ?? 0))
    }

    /// `rate-limit-buckets.lua` (its header says what it takes and answers).
    public static let bucketLua = LuaSource.rateLimitBuckets

    /// `rate-limit-lease.lua` (its header says what it takes and answers).
    static let leaseScript = RedisScript(bucketLua + LuaSource.rateLimitLease)

    /// `rate-limit-take.lua` (its header says what it takes and answers).
    static let takeScript = RedisScript(bucketLua + LuaSource.rateLimitTake)

    /// `rate-limit-peek.lua` (its header says what it takes and answers).
    static let peekScript = RedisScript(bucketLua + LuaSource.rateLimitPeek)
}
