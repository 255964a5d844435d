import Foundation
import Logging
import NIOCore
import NIOWebSocket
import Prometheus
import Synchronization
import WhisperShared

/// The sockets open on this instance, by connection id. A lock, not an actor: every
/// delivered frame looks its socket up here.
public final class ConnectionRegistry: Sendable {
    private let connections = Mutex<[String: ClientConnection]>([:])
    private let active: Gauge

    init(metrics: ServiceMetrics) {
        self.active = metrics.gauge("ws_connections_active", help: "WebSocket connections open on this gateway instance.")
    }

    func add(_ connection: ClientConnection) {
        let count = connections.withLock {
            $0[connection.id] = connection
            return $0.count
        }
        active.set(Double(count))
    }

    func remove(_ id: String) {
        let count = connections.withLock {
            $0[id] = nil
            return $0.count
        }
        active.set(Double(count))
    }

    public var count: Int { connections.withLock { $0.count } }

    /// The IDs of the sockets open now (`connId` in logs and presence records).
    public func connectionIDs() -> [String] { connections.withLock { Array($0.keys) } }

    func all() -> [ClientConnection] { connections.withLock { Array($0.values) } }

    func connection(_ id: String) -> ClientConnection? { connections.withLock { $0[id] } }

    /// Every bound socket with the identity it acts for (presence refresh).
    func bound() -> [(whisperId: String, connection: ClientConnection)] {
        connections.withLock { $0.values.compactMap { connection in connection.whisperId.map { ($0, connection) } } }
    }
}
