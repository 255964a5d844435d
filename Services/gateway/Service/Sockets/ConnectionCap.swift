import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import Prometheus
import Synchronization
import WhisperShared

/// TCP connections open on this instance (WebSockets, upgrades in progress, health
/// checks), at most `limit`.
final class ConnectionCap: Sendable {
    let limit: Int
    private let open = Atomic<Int>(0)
    let refused: Counter

    init(limit: Int, metrics: ServiceMetrics) {
        self.limit = limit
        refused = metrics.counter("gateway_connections_refused", help: "TCP connections closed on accept because the instance was at its connection cap.")
    }

    /// Counts `channel` unless the cap is reached; a counted one is released when it closes.
    func take(_ channel: any Channel) -> Bool {
        let taken = open.wrappingAdd(1, ordering: .relaxed).newValue
        guard taken <= limit else {
            open.wrappingSubtract(1, ordering: .relaxed)
            refused.increment()
            return false
        }
        channel.closeFuture.whenComplete { _ in self.open.wrappingSubtract(1, ordering: .relaxed) }
        return true
    }

    var count: Int { open.load(ordering: .relaxed) }

    /// The cap for this process: the configured one, or what its open-file limit leaves
    /// after `reserve` descriptors for everything else (Redis, Postgres, HTTP clients,
    /// logs, /proc), whichever is lower. The soft limit is raised to the hard one first.
    static func limit(configured: Int, reserve: Int = 512) -> (limit: Int, files: Int) {
        let files = OpenFileLimit.raiseToMaximum()
        let available = max(64, files - reserve)
        return (configured > 0 ? min(configured, available) : available, files)
    }
}
