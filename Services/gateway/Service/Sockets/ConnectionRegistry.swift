import Foundation
import Logging
import NIOCore
import NIOWebSocket
import Prometheus
import Synchronization
import WhisperShared

/// The sockets open on this instance, by connection id. A lock, not an actor: every
/// delivered frame looks its socket up here.
///
/// It also knows which socket here holds each identity's presence (`presenceHolder`), so that a
/// message to a socket on this instance can be written while it is stored
/// (`SendDesk.deliverEarly`). That is a memory of shared state (`presence:{id}` in Redis
/// is the source): set once this instance's claim of the presence succeeded, cleared
/// when the socket releases it or closes. It is stale for as long as another gateway's
/// claim takes to close this socket (`supersede`); a message written meanwhile reaches
/// the identity's older socket, and the store's reply, which reads the record itself,
/// still has it delivered to the new one. It never refuses anything.
public final class ConnectionRegistry: Sendable {
    private let connections = Mutex<[String: ClientConnection]>([:])
    private let presenceHolders = Mutex<[String: ClientConnection]>([:])
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

    /// `connection` now holds `whisperId`'s presence (its claim succeeded).
    func heldPresence(_ whisperId: String, by connection: ClientConnection) {
        presenceHolders.withLock { $0[whisperId] = connection }
    }

    /// `connection` no longer stands for `whisperId` (released or unbound; a closing
    /// socket is released before it leaves the registry).
    func releasedPresence(_ whisperId: String, by connection: ClientConnection) {
        presenceHolders.withLock { holders in
            if holders[whisperId] === connection { holders[whisperId] = nil }
        }
    }

    /// The socket here that holds `whisperId`'s presence, as this instance last knew it.
    func presenceHolder(_ whisperId: String) -> ClientConnection? {
        presenceHolders.withLock { $0[whisperId] }
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
