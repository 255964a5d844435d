import Foundation
import Prometheus
import HummingbirdWebSocket
import Logging
import WhisperShared

/// One client's WebSocket on this gateway instance.
public final class ClientConnection: Sendable {
    /// Unique per connection, across instances (`connId` in logs).
    public let id: String
    let outbound: WebSocketOutboundWriter
    let logger: Logger

    init(outbound: WebSocketOutboundWriter, logger: Logger) {
        self.id = UUID().uuidString.lowercased()
        self.outbound = outbound
        var logger = logger
        logger[metadataKey: "connId"] = .string(id)
        self.logger = logger
    }

    func send<P: ServerPayload>(_ payload: P, requestId: String? = nil) async throws {
        try await sendRaw(ServerFrameCodec.encode(payload, requestId: requestId))
    }

    func sendRaw(_ bytes: [UInt8]) async throws {
        try await outbound.write(.text(String(decoding: bytes, as: UTF8.self)))
    }
}

/// The sockets open on this instance, by connection id.
public actor ConnectionRegistry {
    private var connections: [String: ClientConnection] = [:]
    private let active: Gauge

    init(metrics: ServiceMetrics) {
        self.active = metrics.gauge("ws_connections_active", help: "WebSocket connections open on this gateway instance.")
    }

    func add(_ connection: ClientConnection) {
        connections[connection.id] = connection
        active.set(Double(connections.count))
    }

    func remove(_ id: String) {
        connections[id] = nil
        active.set(Double(connections.count))
    }

    public var count: Int { connections.count }

    func all() -> [ClientConnection] { Array(connections.values) }
}
