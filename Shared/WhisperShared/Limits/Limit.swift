/// One rate limit: a token bucket outsiders' frames or requests are charged to, declared
/// once in `Limit.registry` with its settings key, default rule, scope, bucket name and
/// refusal words. Every mechanism that charges a bucket takes its rule from `LimitRules`.
public struct Limit: Sendable, Hashable, CustomStringConvertible {
    /// What one bucket of the limit is counted per.
    public enum Scope: String, Sendable, CaseIterable {
        /// One WebSocket (in the gateway's memory).
        case socket
        /// One client address (this instance's count, in memory, or all instances' in Redis).
        case address
        /// One identity, all instances together (Redis).
        case identity
        /// One live-text listener device, all instances together (Redis).
        case device
        /// One sender and one recipient (or caller and callee) together.
        case pair
        /// One live-text conversation.
        case conversation
        /// The whole server: every client together.
        case server
    }

    /// The settings key (`gateway.rate.limit.send.per.sender`, read from
    /// `GATEWAY_RATE_LIMIT_SEND_PER_SENDER`): the limit's identity.
    public let key: String
    /// The rule when nothing is configured; its period is the limit's window.
    public let standard: RateLimitRule
    public let scope: Scope
    /// The bucket's name: the action part of its Redis key (`RedisKeys.rateLimit`), or of
    /// the key a script builds. Limits that share a name never share a key (their
    /// scopes' keys differ).
    public let bucket: String
    /// What the refusal says there were too many of ("messages": "too many messages;
    /// retry in 250 ms").
    public let counts: String

    /// The default as the registry writes it (`600/60s`), as configuration.md shows it.
    public let standardText: String

    /// `standard` is written as an operator would set it; one that does not parse
    /// becomes a rule of one a second, which `LimitRegistryTests` refuses.
    init(_ key: String, _ standard: String, per scope: Scope, bucket: String, counts: String) {
        self.key = key
        self.standardText = standard
        self.standard = RateLimitRule(standard) ?? RateLimitRule(capacity: 1, period: .seconds(1))
        self.scope = scope
        self.bucket = bucket
        self.counts = counts
    }

    /// The action of a pair-scoped limit's bucket for one other party (`from:<sender>` in
    /// the recipient's slot, `call_to:<callee>` in the caller's): its Redis key is
    /// `RedisKeys.rateLimit(party, pairAction(other))`.
    public func pairAction(_ other: String) -> String { bucket + ":" + other }

    /// The environment variable that sets it.
    public var variable: String { SettingsReader.variableName(key) }

    public var description: String { key }

    /// The refusal's words: with the wait until the bucket has a token, or, for buckets
    /// kept in memory that do not compute one, a plain request to slow down.
    public func refusal(retryAfterMs: Int?) -> String {
        guard let retryAfterMs else { return "too many \(counts); slow down" }
        return "too many \(counts); retry in \(retryAfterMs) ms"
    }

    /// The refusal as the error a frame is answered with (`RATE_LIMITED`).
    public func refused(retryAfterMs: Int?) -> WhisperError {
        WhisperError(.rateLimited, refusal(retryAfterMs: retryAfterMs))
    }

    /// The limits of one service (their keys begin with its name: `turn.cred.` for
    /// turn-cred), without the shared ones (`whisper.`).
    public static func of(service: String) -> [Limit] {
        let prefix = service.replacingOccurrences(of: "-", with: ".") + "."
        return registry.filter { $0.key.hasPrefix(prefix) }
    }

    public static func == (lhs: Limit, rhs: Limit) -> Bool { lhs.key == rhs.key }
    public func hash(into hasher: inout Hasher) { hasher.combine(key) }
}

/// The rules a service runs with: the configured ones, read from its settings, and the
/// registry's defaults for the rest.
public struct LimitRules: Sendable, Equatable {
    private var configured: [String: RateLimitRule] = [:]

    /// Every limit at its default.
    public init() {}

    /// Reads every limit of `service` (its keys begin with the service's name:
    /// `turn.cred.` for turn-cred) and the shared ones (`whisper.`) named in `shared`;
    /// a shared limit is also read under the service's own older name
    /// (`router.rate.limit.send.per.pair` for `whisper.rate.limit.send.per.pair`).
    public init(from settings: SettingsReader, service: String, shared: [Limit] = []) {
        for limit in Limit.of(service: service) {
            configured[limit.key] = settings.rateLimit(limit.key, default: limit.standard)
        }
        for limit in shared {
            let older = service.replacingOccurrences(of: "-", with: ".") + "." + limit.key.dropFirst("whisper.".count)
            configured[limit.key] = settings.rateLimit(settings.key(limit.key, olderNames: [older]), default: limit.standard)
        }
    }

    public subscript(limit: Limit) -> RateLimitRule {
        get { configured[limit.key] ?? limit.standard }
        set { configured[limit.key] = newValue }
    }
}

extension RateLimiter {
    /// Takes one token of `limit`'s bucket for `key` (an identity, `ip:<address>`, ...).
    public func take(_ limit: Limit, key: String, rules: LimitRules) async throws -> Decision {
        try await take(limit.bucket, key: key, rule: rules[limit])
    }

    /// Whether `limit`'s bucket for `key` holds a token, taking none.
    public func peek(_ limit: Limit, key: String, rules: LimitRules) async throws -> Decision {
        try await peek(limit.bucket, key: key, rule: rules[limit])
    }

    /// Takes one token of `limit`'s bucket for `key`, or throws its refusal.
    public func charge(_ limit: Limit, key: String, rules: LimitRules) async throws {
        if case .limited(let retry) = try await take(limit, key: key, rules: rules) {
            throw limit.refused(retryAfterMs: retry)
        }
    }
}
