import Prometheus
import Synchronization
import WhisperShared

/// push-sender's metrics (docs/operations.md): wake-ups by provider and outcome,
/// retries, dead letters, skipped and coalesced jobs, provider latency, and how long a
/// job waited in the stream.
struct PushMetrics: Sendable {
    let metrics: ServiceMetrics
    let coalesced: Counter
    let pickup: DurationHistogram
    private let latency: [String: DurationHistogram]

    init(metrics: ServiceMetrics) {
        self.metrics = metrics
        coalesced = metrics.counter("push_coalesced", help: "Message wake-ups not sent because one in the coalescing window is unanswered.")
        pickup = metrics.histogram("push_pickup_latency", help: "From a wake-up job entering the push stream to a push-sender starting on it (first attempts).")
        latency = Dictionary(uniqueKeysWithValues: ["apns", "fcm"].map { provider in
            (provider, metrics.histogram("push_provider_latency", help: "Time a provider took to answer one push request.", labels: [("provider", provider)]))
        })
    }

    func sent(_ provider: String, _ outcome: String) {
        metrics.counter("push_sent", help: "Push requests by provider and outcome (delivered, retry, dead_token, failed).",
                        labels: [("provider", provider), ("outcome", outcome)]).increment()
    }

    func retried(_ provider: String) {
        metrics.counter("push_retries", help: "Wake-ups scheduled for another attempt.", labels: [("provider", provider)]).increment()
    }

    func deadLettered(_ reason: String) {
        // The label is the kind of reason, not the provider's text (bounded label values).
        let kind = switch reason {
        case "malformed", "provider_not_configured": reason
        case _ where reason.hasPrefix("infrastructure"): "infrastructure"
        default: "provider"
        }
        metrics.counter("push_dead_letters", help: "Wake-ups moved to the dead-letter stream, by kind of reason.", labels: [("reason", kind)]).increment()
    }

    func skipped(_ why: String) {
        metrics.counter("push_skipped", help: "Wake-up jobs that needed no push (online, no_device, no_token).", labels: [("reason", why)]).increment()
    }

    func providerLatency(_ provider: String, _ duration: Duration) {
        latency[provider]?.recordNanoseconds(duration.nanoseconds)
    }

    func pickedUp(afterMs milliseconds: Int64, firstAttempt: Bool) {
        guard firstAttempt else { return }
        pickup.recordNanoseconds(Clock.nanoseconds(ofMilliseconds: max(0, milliseconds)))
    }
}
