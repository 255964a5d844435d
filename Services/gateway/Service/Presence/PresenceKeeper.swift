import Logging
import Prometheus
import ServiceLifecycle
import Synchronization
import Tracing
import WhisperMessaging
import WhisperShared

/// Keeps the presence entries of this instance's sockets alive while they are open.
struct PresenceKeeper: Service {
    let presence: PresenceStore
    let connections: ConnectionRegistry
    let instanceID: String
    let interval: Duration
    let logger: Logger
    /// Sockets refreshed per Redis pipeline.
    static let batch = 1_000

    func run() async throws {
        try await cancelWhenGracefulShutdown {
            // This instance's socket counts for `GET /admin/stats`, from the start (once
            // Redis answers; the loop below keeps them current).
            for _ in 0..<50 where !Task.isCancelled {
                do {
                    try await GatewayCensus.record(
                        instance: instanceID, open: connections.count, signedIn: connections.bound().count, at: Clock.millisecondsNow(),
                        on: presence.redis
                    )
                    break
                } catch {
                    try? await Task.sleep(for: .milliseconds(100))
                }
            }
        }
        // Refreshed every interval while the gateway runs.
        try await Periodic(every: interval, waitingFirst: true, failure: "presence_refresh_failed", logger: logger) {
            let bound = connections.bound()
            try await presence.prepare()
            // A pipeline of at most `batch` sockets at a time: what a refresh holds at
            // once (commands, records, replies) stays the same however many sockets the
            // instance has, instead of a burst of memory per socket every interval.
            for start in stride(from: 0, to: bound.count, by: Self.batch) {
                let sockets = bound[start..<min(start + Self.batch, bound.count)]
                try await presence.refresh(sockets.map { ($0.whisperId, PresenceRecord(gateway: instanceID, connId: $0.connection.id)) })
            }
            try await GatewayCensus.record(
                instance: instanceID, open: connections.count, signedIn: bound.count, at: Clock.millisecondsNow(), on: presence.redis
            )
            return nil
        }.run()
        try? await GatewayCensus.remove(instance: instanceID, on: presence.redis)
    }
}
