import Logging
import Prometheus
import ServiceLifecycle
import WhisperShared

/// Carries out what other services ask of this instance's sockets (`GatewayCommand`s
/// on `gateway:<instance>`): revoke a session, close a superseded socket, deliver a frame.
/// Nothing here waits, so it runs as the subscriber's message handler, on the event
/// loop that read the message.
struct ControlChannel: Sendable {
    let connections: ConnectionRegistry
    let settler: ReceiptSettler
    let latency: DurationHistogram
    let logger: Logger

    init(connections: ConnectionRegistry, settler: ReceiptSettler, metrics: ServiceMetrics, logger: Logger) {
        self.connections = connections
        self.settler = settler
        self.latency = metrics.histogram("routing_latency", help: "From a message reaching the sender's gateway to its write on the recipient's socket.")
        self.logger = logger
    }

    func handle(_ message: RedisPubSubMessage) {
        guard let command = GatewayCommand.decode(message.payload) else {
            logger.warning("control_message_unreadable", metadata: ["sizeBytes": "\(message.payload.count)"])
            return
        }
        guard let connection = connections.connection(command.connId) else { return }
        switch command.kind {
        case .revoke:
            _ = connection.unbind()
            connection.send(SessionRevoked(reason: command.reason ?? .replacedByNewDevice))
            connection.close(code: CloseCode.sessionRevoked, reason: "session revoked")
            connection.logger.info("session_revoked", metadata: ["reason": "\(command.reason?.rawValue ?? "")"])
        case .supersede:
            _ = connection.unbind()
            connection.close(code: CloseCode.superseded, reason: "superseded by a newer connection")
        case .receipt:
            // Only to the socket of the receipt's owner; left stored otherwise.
            guard let frame = command.frame, let stored = command.stored, connection.whisperId == stored.owner else { return }
            let settler = self.settler
            connection.sendRaw(frame) { settler.settle(stored) }
        case .deliver:
            if let frame = command.frame {
                connection.sendRaw(frame)
                if let acceptedAt = command.acceptedAt {
                    latency.recordNanoseconds(Clock.nanoseconds(ofMilliseconds: Clock.elapsedMilliseconds(since: acceptedAt)))
                }
            }
        }
    }
}

/// Keeps the presence entries of this instance's sockets alive while they are open.
struct PresenceKeeper: Service {
    let presence: PresenceStore
    let connections: ConnectionRegistry
    let instanceID: String
    let interval: Duration
    let logger: Logger

    func run() async throws {
        try await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                let bound = connections.bound()
                do {
                    try await presence.prepare()
                    try await presence.refresh(bound.map { ($0.whisperId, PresenceRecord(gateway: instanceID, connId: $0.connection.id)) })
                } catch {
                    logger.warning("presence_refresh_failed", metadata: ["error": "\(error)", "connections": "\(bound.count)"])
                }
            }
        }
    }
}
