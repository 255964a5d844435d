import Foundation
import Logging
import NIOCore
import NIOWebSocket
import Prometheus
import Synchronization
import WhisperShared

/// The sockets open on this instance, by connection id (a lock: every delivered frame looks
/// one up), and which socket holds each identity's presence (`presenceHolder`), for
/// delivery while a message is stored. That memory is stale for as long as another
/// gateway's claim takes to close the socket; the store's reply still delivers to the new
/// holder, and it refuses nothing (docs/architecture.md, "In-process memories").
public final class ConnectionRegistry: Sendable {
    private let connections = Mutex<[String: ClientConnection]>([:])
    private let presenceHolders = Mutex<[String: ClientConnection]>([:])
    /// The sockets of each listener device (live text), by device ID, then connection id.
    private let listenerDevices = Mutex<[String: [String: ClientConnection]]>([:])
    private let active: Gauge

    init(metrics: ServiceMetrics) {
        self.active = metrics.gauge("ws_connections_active", help: "WebSocket connections open on this gateway instance.")
    }

    func add(_ connection: ClientConnection) {
        let count = connections.withLock {
            $0[connection.id] = connection
            return $0.count
        }
        if let device = connection.liveDevice {
            listenerDevices.withLock { $0[device, default: [:]][connection.id] = connection }
        }
        active.set(Double(count))
    }

    func remove(_ id: String) {
        let (count, removed) = connections.withLock {
            let removed = $0.removeValue(forKey: id)
            return ($0.count, removed)
        }
        if let device = removed?.liveDevice {
            listenerDevices.withLock { devices in
                devices[device]?[id] = nil
                if devices[device]?.isEmpty == true { devices[device] = nil }
            }
        }
        active.set(Double(count))
    }

    /// The sockets here of a listener device.
    func sockets(ofListenerDevice device: String) -> [ClientConnection] {
        listenerDevices.withLock { $0[device].map { Array($0.values) } ?? [] }
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
