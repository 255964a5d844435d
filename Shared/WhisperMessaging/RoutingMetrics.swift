import Prometheus
import WhisperShared

/// What routing a frame produced, for metrics and tests.
public enum RoutingOutcome: String, Sendable, CaseIterable {
    case delivered, queued, duplicate, ignored, page, refused
    /// A group created or changed (`group_create`, `group_update`).
    case group
    /// A call signaling frame passed on (or a call ended).
    case call
}

/// Metrics of routing (docs/operations.md, "Metrics"), kept by whichever service stores messages (routers,
/// and gateways for the `send_message`s they serve themselves): messages routed by
/// outcome, refusals by code, and the depth of recipients' pending queues as messages
/// arrive.
public struct RoutingMetrics: Sendable {
    let metrics: ServiceMetrics
    let depth: ValueHistogram
    // Looked up in the registry once, not per entry (the lookup builds and hashes names).
    /// The stream's figures: a router's only (nil in a gateway).
    let pickup: DurationHistogram?
    let handling: DurationHistogram?
    let outcomes: [RoutingOutcome: Counter]
    let full: Counter

    /// `stream`: the service reads the router stream (a router), and keeps its figures too.
    public init(metrics: ServiceMetrics, stream: Bool = true) {
        self.metrics = metrics
        pickup = stream ? metrics.histogram("router_pickup_latency", help: "From a frame entering the router stream to a router starting on it.") : nil
        handling = stream ? metrics.histogram("router_handle_duration", help: "Time a router spends on one stream entry.") : nil
        outcomes = Dictionary(uniqueKeysWithValues: RoutingOutcome.allCases.map { outcome in
            (outcome, metrics.counter("messages_routed", help: "Frames routed (by routers, and by gateways for the messages they store), by outcome.", labels: [("outcome", outcome.rawValue)]))
        })
        full = metrics.counter("pending_queue_full", help: "Messages refused because the recipient's pending queue was at its cap.")
        self.depth = metrics.registry.makeValueHistogram(
            descriptor: .init(namespace: "whisper", metricName: "pending_queue", unitName: "depth",
                              helpText: "Messages waiting in a recipient's pending queue, observed as each message is stored."),
            labels: [],
            buckets: [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 5000]
        )
    }

    /// Time from the gateway taking the frame to a router starting on it (stream lag).
    public func pickedUp(afterMs milliseconds: Int64) {
        pickup?.recordNanoseconds(Clock.nanoseconds(ofMilliseconds: max(0, milliseconds)))
    }

    public func handled(in duration: Duration) {
        handling?.recordNanoseconds(duration.nanoseconds)
    }

    public func routed(_ outcome: RoutingOutcome) {
        outcomes[outcome]?.increment()
    }

    public func refused(_ code: ErrorCode) {
        metrics.recordError(code)
        routed(.refused)
    }

    public func queueFull() {
        full.increment()
    }

    public func queueDepth(_ depth: Int) {
        self.depth.record(Double(depth))
    }
}
