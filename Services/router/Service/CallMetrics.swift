import Foundation
import Logging
import Prometheus
import WhisperMessaging
import WhisperShared

/// Call metrics: setups by outcome, time to ring, time to answer.
struct CallMetrics: Sendable {
    enum Outcome: String, CaseIterable {
        case answered, rejected, cancelled, busy, timeout, unavailable, failed
    }

    let outcomes: [Outcome: Counter]
    let ringing: DurationHistogram
    let answering: DurationHistogram

    init(metrics: ServiceMetrics) {
        outcomes = Dictionary(uniqueKeysWithValues: Outcome.allCases.map { outcome in
            (outcome, metrics.counter("call_setups", help: "Calls by how their setup ended.", labels: [("outcome", outcome.rawValue)]))
        })
        ringing = metrics.histogram("call_time_to_ring", help: "From a call_initiate reaching its gateway to call_ringing going to the caller.")
        answering = metrics.histogram(
            "call_time_to_answer", help: "From a call starting to ring to its answer.",
            buckets: [1, 2, 3, 5, 8, 13, 20, 30, 45, 60].map { .seconds($0) }
        )
    }

    func setup(_ outcome: Outcome) {
        outcomes[outcome]?.increment()
    }

    func rang(afterMs milliseconds: Int64) {
        ringing.recordNanoseconds(Clock.nanoseconds(ofMilliseconds: max(0, milliseconds)))
    }

    func answered(afterMs milliseconds: Int64) {
        answering.recordNanoseconds(Clock.nanoseconds(ofMilliseconds: max(0, milliseconds)))
    }

    /// How a call that ended before it was answered counts.
    static func outcome(endedBy ender: CallDesk.Ender, reason: String) -> Outcome {
        switch (ender, reason) {
        case (.server, "timeout"): .timeout
        case (.server, "unavailable"): .unavailable
        case (_, "busy"): .busy
        case (_, "failed"): .failed
        case (.callee, _): .rejected
        default: .cancelled
        }
    }
}
