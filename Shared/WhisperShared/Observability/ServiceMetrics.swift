import Prometheus
import Synchronization

/// The Prometheus registry of one service instance and the metrics every service has.
/// Each instance gets its own registry, so tests can run several services in one
/// process and read each one's `/metrics` on its own.
public final class ServiceMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    public let service: String

    public init(service: String, instanceID: String, registry: PrometheusCollectorRegistry = .init()) {
        self.registry = registry
        self.service = service
        registry.makeGauge(
            descriptor: .init(namespace: "whisper", metricName: "service", unitName: "info", helpText: "Which Whisper service this process is; always 1."),
            labels: [("service", service), ("instance", instanceID)]
        ).set(Double(1))
    }

    /// Where an error was answered: an `error` frame on a WebSocket, or an HTTP response.
    public enum Transport: String, Sendable {
        case ws
        case http
    }

    /// Counts an error answered to a client, by frozen error code and transport.
    public func recordError(_ code: ErrorCode, transport: Transport = .ws) {
        registry.makeCounter(
            descriptor: .init(namespace: "whisper", metricName: "errors", unitName: "total", helpText: "Errors answered to clients, by frozen error code and transport (ws frames, http endpoints)."),
            labels: [("code", code.rawValue), ("transport", transport.rawValue)]
        ).increment()
    }

    /// Counts an HTTP request and observes how long it took.
    public func recordHTTPRequest(method: String, status: Int, duration: Duration) {
        registry.makeCounter(
            descriptor: .init(namespace: "whisper", metricName: "http_requests", unitName: "total", helpText: "HTTP requests served, by method and status class."),
            labels: [("method", method), ("status", "\(status / 100)xx")]
        ).increment()
        registry.makeDurationHistogram(
            descriptor: .init(namespace: "whisper", metricName: "http_request_duration", unitName: "seconds", helpText: "Time to answer an HTTP request."),
            labels: [("method", method)],
            buckets: Self.latencyBuckets
        ).recordNanoseconds(duration.nanoseconds)
    }

    /// Whether a dependency answered at the last readiness check or scrape (1) or not (0).
    public func recordDependency(_ name: String, up: Bool) {
        registry.makeGauge(
            descriptor: .init(namespace: "whisper", metricName: "dependency_up", unitName: "", helpText: "1 when the dependency answered at the last check, else 0."),
            labels: [("dependency", name)]
        ).set(up ? Double(1) : Double(0))
    }

    public func gauge(_ name: String, help: String, labels: [(String, String)] = []) -> Gauge {
        registry.makeGauge(descriptor: .init(namespace: "whisper", metricName: name, unitName: "", helpText: help), labels: labels)
    }

    public func counter(_ name: String, help: String, labels: [(String, String)] = []) -> Counter {
        registry.makeCounter(descriptor: .init(namespace: "whisper", metricName: name, unitName: "total", helpText: help), labels: labels)
    }

    public func histogram(_ name: String, help: String, labels: [(String, String)] = [], buckets: [Duration] = ServiceMetrics.latencyBuckets) -> DurationHistogram {
        registry.makeDurationHistogram(
            descriptor: .init(namespace: "whisper", metricName: name, unitName: "seconds", helpText: help),
            labels: labels,
            buckets: buckets
        )
    }

    /// Buckets from half a millisecond to ten seconds.
    public static let latencyBuckets: [Duration] = [
        .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10),
        .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
        .seconds(1), .seconds(2.5), .seconds(5), .seconds(10),
    ]

    private let reported = Mutex<[String: Int]>([:])

    /// Brings a counter up to `total`, a count kept elsewhere (a client's atomics):
    /// increments it by what was added since the last call.
    public func syncCounter(_ name: String, help: String, labels: [(String, String)] = [], to total: Int) {
        let id = name + labels.map { "|\($0.0)=\($0.1)" }.joined()
        let delta = reported.withLock { reported -> Int in
            let delta = total - (reported[id] ?? 0)
            if delta > 0 { reported[id] = total }
            return delta
        }
        counter(name, help: help, labels: labels).increment(by: Int64(max(0, delta)))
    }

    /// The Redis client's figures (`whisper_redis_*_total`).
    public func record(redis statistics: RedisClientStatistics, client: String = "main") {
        let labels = [("client", client)]
        syncCounter("redis_connects", help: "Connections to Redis opened.", labels: labels, to: statistics.connects.load(ordering: .relaxed))
        syncCounter("redis_connect_failures", help: "Attempts to connect to Redis that failed.", labels: labels, to: statistics.failedConnects.load(ordering: .relaxed))
        syncCounter("redis_connection_losses", help: "Open Redis connections that dropped.", labels: labels, to: statistics.losses.load(ordering: .relaxed))
        syncCounter("redis_commands_refused", help: "Commands failed at once because Redis was not connected.", labels: labels, to: statistics.refused.load(ordering: .relaxed))
        syncCounter("redis_replica_waits", help: "Writes that waited for replicas before their client was answered (WHISPER_REDIS_WAIT_REPLICAS).", labels: labels, to: statistics.replicaWaits.load(ordering: .relaxed))
        syncCounter("redis_replica_shortfalls", help: "Writes fewer replicas than required acknowledged in time (WHISPER_REDIS_WAIT_TIMEOUT_MS).", labels: labels, to: statistics.replicaShortfalls.load(ordering: .relaxed))
        syncCounter("redis_unreplicated_writes", help: "Writes told they are stored while their master had no replica in step (WHISPER_REDIS_WAIT_SHORTFALL=accept).", labels: labels, to: statistics.unreplicatedWrites.load(ordering: .relaxed))
        for (node, unreplicated) in statistics.masters.snapshot {
            gauge("redis_master_unreplicated", help: "1 while the last WAIT on this Redis master found fewer replicas in step than required.", labels: labels + [("node", node)])
                .set(unreplicated ? Double(1) : Double(0))
        }
    }

    /// The exposition text served at `/metrics`.
    public func render() -> [UInt8] {
        registry.emitToBuffer()
    }
}
