import Synchronization

/// A token bucket held in this process's memory: for limits that are cheap to keep per
/// socket or per instance and must not cost a Redis round trip (the frames they guard
/// are the ones that do no other work). Time is `ContinuousClock`'s, in nanoseconds.
/// A bucket holds only its level: its rule is the holder's, given with each call (the
/// same for all of a holder's buckets), so that thousands of buckets do not each keep
/// a copy of it.
public struct LocalBucket: Sendable {
    private var tokens: Double
    private var updated: ContinuousClock.Instant

    /// A full bucket of `rule`.
    public init(full rule: RateLimitRule, now: ContinuousClock.Instant = .now) {
        self.tokens = Double(rule.capacity)
        self.updated = now
    }

    /// Takes one token; false (nothing taken) when the bucket is empty.
    public mutating func take(_ rule: RateLimitRule, now: ContinuousClock.Instant = .now) -> Bool {
        refill(rule, now: now)
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }

    /// Whether the bucket holds a token, taking none.
    public mutating func hasToken(_ rule: RateLimitRule, now: ContinuousClock.Instant = .now) -> Bool {
        refill(rule, now: now)
        return tokens >= 1
    }

    /// Whether the bucket is back to full: an idle entry that can be forgotten.
    public mutating func isFull(_ rule: RateLimitRule, now: ContinuousClock.Instant = .now) -> Bool {
        refill(rule, now: now)
        return tokens >= Double(rule.capacity)
    }

    private mutating func refill(_ rule: RateLimitRule, now: ContinuousClock.Instant) {
        let elapsed = Double(max(0, (now - updated).nanoseconds))
        let period = Double(max(1, rule.period.nanoseconds))
        tokens = min(Double(rule.capacity), tokens + elapsed * Double(rule.capacity) / period)
        updated = now
    }
}

/// Token buckets by key (a client address) in memory, for one instance. The number of
/// keys is bounded: when it is reached, buckets that have refilled (idle keys) are
/// forgotten (at most one sweep a second), and while the table is still full the new key shares one overflow bucket, so a flood of
/// addresses costs bounded memory and still meets a limit.
public final class LocalBucketTable: Sendable {
    private struct State {
        var buckets: [String: LocalBucket] = [:]
        var overflow: LocalBucket
        var lastSweep: ContinuousClock.Instant?
    }

    public let rule: RateLimitRule
    public let maxKeys: Int
    private let state: Mutex<State>

    public init(rule: RateLimitRule, maxKeys: Int = 100_000) {
        self.rule = rule
        self.maxKeys = max(1, maxKeys)
        self.state = Mutex(State(overflow: LocalBucket(full: rule)))
    }

    /// Takes one token from `key`'s bucket; false when it is empty.
    public func take(_ key: String, now: ContinuousClock.Instant = .now) -> Bool {
        state.withLock { state in
            if state.buckets[key] == nil, state.buckets.count >= maxKeys {
                // A sweep reads every bucket: at most one a second, whatever the flood.
                if state.lastSweep.map({ now - $0 >= .seconds(1) }) ?? true {
                    state.lastSweep = now
                    state.buckets = state.buckets.filter { _, bucket in
                        var bucket = bucket
                        return !bucket.isFull(rule, now: now)
                    }
                }
                if state.buckets.count >= maxKeys {
                    return state.overflow.take(rule, now: now)
                }
            }
            var bucket = state.buckets[key] ?? LocalBucket(full: rule, now: now)
            let taken = bucket.take(rule, now: now)
            state.buckets[key] = bucket
            return taken
        }
    }

    /// Whether `key`'s bucket holds a token, taking none (a key without a bucket has a
    /// full one).
    public func hasToken(_ key: String, now: ContinuousClock.Instant = .now) -> Bool {
        state.withLock { state in
            guard var bucket = state.buckets[key] else { return true }
            let has = bucket.hasToken(rule, now: now)
            state.buckets[key] = bucket
            return has
        }
    }

    public var count: Int { state.withLock { $0.buckets.count } }
}
