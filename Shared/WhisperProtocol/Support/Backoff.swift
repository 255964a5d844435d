/// Exponential backoff with full jitter: each delay is random in [0, min(maximum, initial * 2^attempt)].
public struct Backoff: Sendable {
    public struct Policy: Sendable, Equatable {
        public var initial: Duration
        public var maximum: Duration

        public init(initial: Duration, maximum: Duration) {
            self.initial = initial
            self.maximum = maximum
        }
    }

    public let policy: Policy
    public private(set) var attempt = 0

    public init(policy: Policy) {
        self.policy = policy
    }

    /// The delay before the next attempt; grows with every call until `reset()`.
    public mutating func next() -> Duration {
        let ceiling = Self.ceiling(policy: policy, attempt: attempt)
        attempt += 1
        let nanoseconds = ceiling.nanoseconds
        guard nanoseconds > 0 else { return .zero }
        // Never below a tenth of the initial delay, so reconnect loops cannot spin.
        let floor = max(1, policy.initial.nanoseconds / 10)
        return .nanoseconds(Int64.random(in: min(floor, nanoseconds)...nanoseconds))
    }

    public mutating func reset() {
        attempt = 0
    }

    /// The upper bound of the delay for a given attempt number (0-based).
    public static func ceiling(policy: Policy, attempt: Int) -> Duration {
        let initial = policy.initial.nanoseconds
        let maximum = policy.maximum.nanoseconds
        let shift = min(attempt, 40)
        let (scaled, overflow) = initial.multipliedReportingOverflow(by: Int64(1) << shift)
        return .nanoseconds(overflow ? maximum : min(maximum, scaled))
    }
}

extension Duration {
    /// Whole nanoseconds, saturating at Int64's bounds.
    public var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !overflow else { return seconds < 0 ? .min : .max }
        let (total, carried) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
        return carried ? (seconds < 0 ? .min : .max) : total
    }

    public var milliseconds: Double {
        Double(nanoseconds) / 1_000_000
    }
}
