import NIOCore
import Prometheus
import Synchronization
import WhisperShared

/// The gateway's limits on frames: the configured rules, and the tables of per-address
/// buckets of the address-scoped ones (this instance's counts; the per-socket buckets
/// live on each socket).
struct FrameLimits: Sendable {
    let rules: LimitRules
    private let addressTables: [Limit: LocalBucketTable]
    let limiter: RateLimiter
    let routerBacklogMax: Int
    /// The most tokens one lease takes from an identity's bucket (`TokenLease`).
    let leaseMax: Int
    /// How long a lease asked ahead of need may wait to share a write to Redis: as long
    /// as a store delivered early (`GATEWAY_STORE_GROUP_WAIT_MS`), whose group it joins
    /// instead of sending it on its way.
    let aheadMayWait: Duration
    let busyRetryMs: Int
    /// What a busy refusal says.
    var busyRefusal: String { "the server is busy; retry in \(busyRetryMs) ms" }
    let busyRefusals: Counter
    let busy = BusyHold()

    init(settings: GatewaySettings, redis: RedisClient, metrics: ServiceMetrics) {
        rules = settings.limits
        addressTables = Dictionary(uniqueKeysWithValues: Limit.of(service: GatewaySettings.serviceName).filter { $0.scope == .address }.map {
            ($0, LocalBucketTable(rule: settings.limits[$0]))
        })
        limiter = RateLimiter(redis: redis)
        routerBacklogMax = settings.routerBacklogMax
        leaseMax = settings.leaseMax
        aheadMayWait = settings.storeGroupWait
        busyRetryMs = settings.busyRetryMs
        busyRefusals = metrics.counter("gateway_busy_refusals", help: "Frames refused with RATE_LIMITED \"busy\": the router stream's backlog was at its limit, or a message waited past GATEWAY_SEND_WAIT_MAX_MS.")
    }

    /// Takes a token of `address`'s bucket of `limit`, one of the gateway's
    /// address-scoped limits; any other limit has no table here and refuses.
    func take(_ limit: Limit, address: String) -> Bool {
        addressTables[limit]?.take(address) ?? false
    }

    /// Takes a token of the socket's identity for `kind`: one leased earlier, or a new
    /// lease from the bucket in Redis (`TokenLease`). A busy socket's next lease is asked
    /// for ahead of need, beside the frame, not before it; a frame that finds no token
    /// while that lease is out waits for it before asking the bucket itself.
    func charge(
        _ kind: TokenLease.Kind, bucket: String, limit: Limit, on connection: ClientConnection
    ) async throws -> RateLimiter.Decision {
        var waited = false
        while true {
            let leased = connection.spendLeased(kind, now: NIODeadline.now().uptimeNanoseconds, max: leaseMax)
            if leased.spent {
                if let ahead = leased.ahead {
                    let limiter = limiter, rule = rules[limit], mayWait = aheadMayWait
                    Task {
                        let answer = try? await limiter.lease(bucket: bucket, rule: rule, wanted: ahead.size, mayWait: mayWait)
                        var granted: Int?
                        if case .granted(let count)? = answer { granted = count }
                        connection.leasedAhead(kind, granted: granted, generation: ahead.generation, now: NIODeadline.now().uptimeNanoseconds)
                        ahead.answered.succeed()
                    }
                }
                return .allowed
            }
            guard !waited, let inFlight = connection.leaseAheadInFlight(kind) else { break }
            waited = true
            try? await inFlight.get()
        }
        let now = NIODeadline.now().uptimeNanoseconds
        let wanted = connection.leaseSize(kind, now: now, max: leaseMax)
        switch try await limiter.lease(bucket: bucket, rule: rules[limit], wanted: wanted) {
        case .granted(let granted):
            connection.leased(kind, granted: granted, now: NIODeadline.now().uptimeNanoseconds)
            return .allowed
        case .limited(let retry):
            return .limited(retryAfterMs: retry)
        }
    }

    /// Runs an attempt that names something the sender may only guess at (a join code):
    /// refused while the identity's or the address's bucket of misses is empty; charged
    /// to both only when `attempt` fails `NOT_FOUND`, so wrong guesses are bounded and
    /// right ones are not. `identityLimit` is identity-scoped, `addressLimit` one of the
    /// gateway's address-scoped limits.
    func guessing<T>(
        _ identityLimit: Limit, _ addressLimit: Limit, identity: String, address: String, _ attempt: () async throws -> T
    ) async throws -> T {
        if case .limited(let retry) = try await limiter.peek(identityLimit, key: identity, rules: rules) {
            throw identityLimit.refused(retryAfterMs: retry)
        }
        guard addressTables[addressLimit]?.hasToken(address) ?? false else { throw addressLimit.refused(retryAfterMs: nil) }
        do {
            return try await attempt()
        } catch let error as WhisperError where error.code == .notFound {
            _ = addressTables[addressLimit]?.take(address)
            _ = try await limiter.take(identityLimit, key: identity, rules: rules)
            throw error
        }
    }
}

/// Remembers for a moment that the router stream was full, so that the messages that
/// follow are refused in memory instead of each costing a script round trip. The
/// moment (25 ms) is short against the retry hint: the routers take a few hundred
/// entries off the backlog meanwhile.
final class BusyHold: Sendable {
    static let span: Int64 = 25
    private let until = Atomic<Int64>(0)

    func hold() {
        until.store(Clock.millisecondsNow() &+ Self.span, ordering: .relaxed)
    }

    func holds() -> Bool {
        Clock.millisecondsNow() < until.load(ordering: .relaxed)
    }
}
