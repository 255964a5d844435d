import Foundation
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOWebSocket
import Prometheus
import Synchronization
import WhisperShared

/// One client's WebSocket on this gateway instance.
public final class ClientConnection: Sendable {
    /// Unique per connection, across instances (`connId` in logs).
    public let id: String
    let remoteAddress: String?
    let outbound: WebSocketOutboundWriter
    let logger: Logger
    /// The identity this socket acts for, once a session was used or created on it.
    private let binding = Mutex<String?>(nil)
    /// The token last found live for this socket, trusted for a few seconds so that a
    /// busy socket does not cost a Redis lookup per frame. Dropped whenever the session
    /// may have changed through this socket (refresh, logout) or was ended elsewhere
    /// (revoke, supersede: both unbind).
    private let verified = Mutex<(token: String, until: ContinuousClock.Instant)?>(nil)
    static let verifiedFor: Duration = .seconds(5)
    /// Frames waiting to be written, in order. One writer task per socket drains it, so
    /// whoever hands a frame over never waits for this socket's network.
    private let outbox: AsyncStream<Outgoing>
    private let outboxInput: AsyncStream<Outgoing>.Continuation

    /// Frames a socket may have waiting before it counts as too slow and is closed.
    static let outboxLimit = 4_096

    enum Outgoing: Sendable {
        case frame([UInt8])
        case close(code: UInt16, reason: String)
    }

    init(outbound: WebSocketOutboundWriter, remoteAddress: String?, logger: Logger) {
        self.id = RandomID.uuid()
        self.outbound = outbound
        self.remoteAddress = remoteAddress
        var logger = logger
        logger[metadataKey: "connId"] = .string(id)
        self.logger = logger
        (outbox, outboxInput) = AsyncStream.makeStream(bufferingPolicy: .bufferingOldest(Self.outboxLimit))
    }

    /// Writes queued frames until the socket closes or `finish()` is called.
    func runWriter() async {
        for await item in outbox {
            switch item {
            case .frame(let bytes):
                do {
                    // A text frame straight from the bytes: every frame is JSON this
                    // server wrote (valid UTF-8), so no round trip through String.
                    try await outbound.write(.custom(WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(bytes: bytes))))
                } catch {
                    return
                }
            case .close(let code, let reason):
                try? await outbound.close(.unknown(code), reason: reason)
                return
            }
        }
    }

    /// No more frames: the writer ends once the queue is empty.
    func finish() {
        outboxInput.finish()
    }

    var whisperId: String? { binding.withLock { $0 } }

    /// Binds the socket to an identity; returns false when it is bound to another one.
    func bind(to whisperId: String) -> (accepted: Bool, isNew: Bool) {
        binding.withLock { current in
            if let current { return (current == whisperId, false) }
            current = whisperId
            return (true, true)
        }
    }

    func unbind() -> String? {
        forgetVerifiedSession()
        return binding.withLock { current in
            defer { current = nil }
            return current
        }
    }

    func hasVerified(_ token: String) -> Bool {
        verified.withLock { entry in
            guard let current = entry, current.token == token, ContinuousClock.now < current.until else { return false }
            return true
        }
    }

    func rememberVerified(_ token: String) {
        verified.withLock { $0 = (token, ContinuousClock.now + Self.verifiedFor) }
    }

    func forgetVerifiedSession() {
        verified.withLock { $0 = nil }
    }

    func send<P: ServerPayload>(_ payload: P, requestId: String? = nil) {
        sendRaw(ServerFrameCodec.encode(payload, requestId: requestId))
    }

    /// Queues a complete frame for this socket.
    func sendRaw(_ bytes: [UInt8]) {
        if case .dropped = outboxInput.yield(.frame(bytes)) {
            // The client does not read: close rather than hold its frames without bound.
            // What it missed stays in its pending queue.
            logger.warning("socket_too_slow", metadata: ["queued": "\(Self.outboxLimit)"])
            outboxInput.finish()
            Task { try? await outbound.close(.unknown(1008), reason: "too slow") }
        }
    }

    /// Queues a close, after the frames already queued.
    func close(code: UInt16, reason: String) {
        outboxInput.yield(.close(code: code, reason: reason))
        outboxInput.finish()
    }
}

/// WebSocket close codes the gateway uses besides the standard ones.
enum CloseCode {
    /// The session ended (`session_revoked` came just before): do not reconnect with it.
    static let sessionRevoked: UInt16 = 4001
    /// The same session now uses a newer socket; this one is no longer needed.
    static let superseded: UInt16 = 4002
}

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

    func all() -> [ClientConnection] { connections.withLock { Array($0.values) } }

    func connection(_ id: String) -> ClientConnection? { connections.withLock { $0[id] } }

    /// Every bound socket with the identity it acts for (presence refresh).
    func bound() -> [(whisperId: String, connection: ClientConnection)] {
        connections.withLock { $0.values.compactMap { connection in connection.whisperId.map { ($0, connection) } } }
    }
}
