import Logging
import Prometheus
import ServiceLifecycle
import Synchronization
import Tracing
import WhisperMessaging
import WhisperShared

/// Carries out what other services ask of this instance's sockets (`GatewayCommand`s
/// on `gateway:<instance>`): revoke a session, close a superseded socket, deliver a frame;
/// and what every gateway hears (identity changes, channels announced nearby).
/// Nothing here waits, so it runs as the subscriber's message handler, on the event
/// loop that read the message.
struct ControlChannel: Sendable {
    let connections: ConnectionRegistry
    /// Receipts handed to this instance's sockets (stored, or live), and the memory of
    /// messages delivered here with their origin, for their receipts.
    let receipts: ReceiptDesk
    let banned: RecentBans
    /// The identities this instance's `SendDesk` caches: a change reaches it at once.
    let identities: IdentityCache
    let latency: DurationHistogram
    /// Live-text places of this instance's sockets: what a `live` command may write.
    let live: LiveRegistry
    /// Push-to-talk channels announced nearby (`ptt:nearby`).
    let nearby: NearbyBoard
    /// The instance's memory of direct peers (`SendDesk`'s): a message written here to its
    /// recipient tells it the recipient's sender has now been written to.
    let peers: PeerMemory
    let logger: Logger

    init(
        connections: ConnectionRegistry, receipts: ReceiptDesk, banned: RecentBans, identities: IdentityCache, metrics: ServiceMetrics,
        live: LiveRegistry, nearby: NearbyBoard, peers: PeerMemory, logger: Logger
    ) {
        self.peers = peers
        self.live = live
        self.nearby = nearby
        self.receipts = receipts
        self.connections = connections
        self.identities = identities
        self.banned = banned
        self.latency = metrics.histogram("routing_latency", help: "From a message reaching the sender's gateway to its write on the recipient's socket.")
        self.logger = logger
    }

    func handle(_ message: RedisPubSubMessage) {
        if message.channel == IdentityChange.channel {
            handle(identityChange: message.payload)
            return
        }
        if message.channel == NearbyBoard.channel {
            nearby.apply(message.payload)
            return
        }
        if message.channel == LiveProfiles.channel {
            LiveProfiles.deliver(message.payload, to: connections)
            return
        }
        guard let command = GatewayCommand.decode(message.payload) else {
            logger.warning("control_message_unreadable", metadata: ["sizeBytes": "\(message.payload.count)"])
            return
        }
        // The socket a command names, when it is on this instance (live commands name
        // several, or none that must be here).
        let target = { self.connections.connection(command.connId) }
        switch command.kind {
        case .liveReceipt:
            if let frame = command.frame, let live = command.live {
                receipts.takeLive(frame, live, connection: target())
            }
        case .live:
            guard let route = command.liveRoute, let frame = command.frame else { return }
            live.write(frame, to: command.connId.split(separator: ",").prefix(10_000).lazy.map(String.init), route, through: connections)
        case .revoke:
            guard let connection = target() else { return }
            revoke(connection, reason: command.reason ?? .replacedByNewDevice)
        case .supersede:
            guard let connection = target() else { return }
            _ = connection.unbind()
            connection.close(code: CloseCode.superseded, reason: "superseded by a newer connection")
        case .receipt:
            guard let frame = command.frame, let stored = command.stored, let connection = target() else { return }
            receipts.handOver(frame, stored: stored, to: connection)
        case .deliver:
            guard let frame = command.frame, let connection = target() else { return }
            // Remembered before the write, so the receipt cannot come first; only for the
            // socket of the message's recipient.
            if let origin = command.origin, connection.whisperId == origin.recipient {
                receipts.memory.remember(
                    recipient: origin.recipient, messageId: origin.messageId, sender: origin.sender, senderConnection: origin.connId,
                    senderGateway: origin.gateway
                )
            }
            deliver(frame, to: connection, from: command.origin?.sender, traceparent: command.traceparent, acceptedAt: command.acceptedAt)
        }
    }

    /// Writes a frame for its socket: published here, or stored by this instance's own
    /// `SendDesk` for a socket of this instance. With a trace, the write is the last span
    /// of the message's trace; with `acceptedAt` (when the sender's gateway read the
    /// message), its routing latency is observed. With its `sender`, the recipient may now
    /// be the sender's direct peer (`PeerMemory.heard`).
    func deliver(_ frame: [UInt8], to connection: ClientConnection, from sender: String?, traceparent: String?, acceptedAt: Int64?) {
        if let sender, let recipient = connection.whisperId { peers.heard(from: sender, by: recipient) }
        var span: (any Span)?
        if let parent = traceparent, WhisperTracing.isEnabled {
            span = InstrumentationSystem.tracer.startAnySpan(
                "deliver message_received", context: WhisperTracing.context(continuing: parent), ofKind: .producer
            )
            span?.attributes["whisper.connection"] = connection.id
        }
        defer { span?.end() }
        connection.sendRaw(frame)
        if let acceptedAt {
            latency.recordNanoseconds(Clock.nanoseconds(ofMilliseconds: Clock.elapsedMilliseconds(since: acceptedAt)))
        }
    }
}

extension ControlChannel {
    /// A ban or a deletion closes every socket of this instance bound to the identity,
    /// whichever socket presence names (after a ban a reconnect may be binding right now:
    /// `RecentBans` catches that one; a deleted identity has no session left to bind with).
    func handle(identityChange payload: [UInt8]) {
        guard let change = IdentityChange.decode(payload) else {
            logger.warning("identity_change_unreadable", metadata: ["sizeBytes": "\(payload.count)"])
            return
        }
        identities.forget(change.whisperId)
        switch change.kind {
        case .banned:
            banned.insert(change.whisperId)
            for (whisperId, connection) in connections.bound() where whisperId == change.whisperId {
                revoke(connection, reason: .banned)
            }
        case .unbanned:
            banned.remove(change.whisperId)
        case .deleted:
            for (whisperId, connection) in connections.bound() where whisperId == change.whisperId {
                revoke(connection, reason: .accountDeleted)
            }
        }
    }

    func revoke(_ connection: ClientConnection, reason: SessionRevoked.Reason) {
        guard !connection.isClosing else { return }
        _ = connection.unbind()
        connection.send(SessionRevoked(reason: reason))
        connection.close(code: CloseCode.sessionRevoked, reason: "session revoked")
        connection.logger.info("session_revoked", metadata: ["reason": "\(reason.rawValue)"])
    }
}
