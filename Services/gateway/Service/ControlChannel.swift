import Logging
import Prometheus
import ServiceLifecycle
import Synchronization
import Tracing
import WhisperMessaging
import WhisperShared

/// Carries out what other services ask of this instance's sockets (`GatewayCommand`s
/// on `gateway:<instance>`): revoke a session, close a superseded socket, deliver a frame.
/// Nothing here waits, so it runs as the subscriber's message handler, on the event
/// loop that read the message.
struct ControlChannel: Sendable {
    let connections: ConnectionRegistry
    let settler: ReceiptSettler
    /// For receipts handed over live (`liveReceipt`): where one the socket cannot take
    /// is stored, and what applies it once it is safe.
    let receipts: OwedFrames
    let applier: ReceiptApplier
    let presence: PresenceStore
    /// Messages delivered here with their origin, for their receipts (`ReceiptDesk`).
    let deliveries: LocalDeliveries
    let banned: RecentBans
    /// The identities this instance's `SendDesk` caches: a change reaches it at once.
    let identities: IdentityCache
    let latency: DurationHistogram
    let logger: Logger

    init(
        connections: ConnectionRegistry, settler: ReceiptSettler, receipts: OwedFrames, applier: ReceiptApplier, presence: PresenceStore,
        deliveries: LocalDeliveries, banned: RecentBans, identities: IdentityCache, metrics: ServiceMetrics, logger: Logger
    ) {
        self.presence = presence
        self.deliveries = deliveries
        self.receipts = receipts
        self.applier = applier
        self.connections = connections
        self.identities = identities
        self.banned = banned
        self.settler = settler
        self.latency = metrics.histogram("routing_latency", help: "From a message reaching the sender's gateway to its write on the recipient's socket.")
        self.logger = logger
    }

    func handle(_ message: RedisPubSubMessage) {
        if message.channel == IdentityChange.channel {
            handle(identityChange: message.payload)
            return
        }
        guard let command = GatewayCommand.decode(message.payload) else {
            logger.warning("control_message_unreadable", metadata: ["sizeBytes": "\(message.payload.count)"])
            return
        }
        if command.kind == .liveReceipt {
            if let frame = command.frame, let live = command.live {
                takeLive(frame, live, connection: connections.connection(command.connId))
            }
            return
        }
        guard let connection = connections.connection(command.connId) else { return }
        switch command.kind {
        case .revoke:
            revoke(connection, reason: command.reason ?? .replacedByNewDevice)
        case .supersede:
            _ = connection.unbind()
            connection.close(code: CloseCode.superseded, reason: "superseded by a newer connection")
        case .receipt:
            guard let frame = command.frame, let stored = command.stored else { return }
            handOver(frame, stored: stored, to: connection)
        case .deliver:
            if let frame = command.frame {
                // Remembered before the write, so the receipt cannot come first; only
                // for the socket of the message's recipient.
                if let origin = command.origin, connection.whisperId == origin.recipient {
                    deliveries.remember(
                        recipient: origin.recipient, messageId: origin.messageId, sender: origin.sender, senderConnection: origin.connId,
                        senderGateway: origin.gateway
                    )
                }
                deliver(frame, to: connection, traceparent: command.traceparent, acceptedAt: command.acceptedAt)
            }
        case .liveReceipt:
            break
        }
    }

    /// A receipt another gateway handed over without storing it (`ReceiptDesk`): written
    /// to its owner's socket, or stored when that socket is gone, is not the owner's, or
    /// cannot take it within `OwedFrames.handOverLimit` (a gone socket's receipt is
    /// handed to the owner's socket of now, wherever presence names one: the owner may
    /// have moved since);
    /// then applied to the recipient's queue. A store that fails applies nothing: the
    /// message stays pending and is acknowledged again.
    func takeLive(_ frame: [UInt8], _ live: LiveReceipt, connection: ClientConnection?) {
        let (receipts, applier, presence, logger) = (self.receipts, self.applier, self.presence, self.logger)
        let owned = connection.flatMap { $0.whisperId == live.owner ? $0 : nil }
        Task {
            do {
                let socket = owned == nil ? try await presence.lookup(live.owner) : nil
                try await receipts.give(frame, to: owned, owner: live.owner, handingTo: socket)
            } catch {
                logger.warning("live_receipt_keep_failed", metadata: ["error": "\(error)"])
                return
            }
            await applier.add(.init(recipient: live.recipient, messageId: live.messageId, delivered: live.delivered))
        }
    }

    /// Writes a stored receipt to its owner's socket (published here, or kept by this
    /// instance's own `ReceiptDesk`) and settles it once written. Only to the socket of
    /// the receipt's owner; left stored otherwise.
    func handOver(_ frame: [UInt8], stored: StoredReceipt, to connection: ClientConnection) {
        guard connection.whisperId == stored.owner else { return }
        let settler = self.settler
        connection.sendRaw(frame) { settler.settle(stored) }
    }

    /// Writes a frame for its socket: published here, or stored by this instance's own
    /// `SendDesk` for a socket of this instance. With a trace, the write is the last span
    /// of the message's trace; with `acceptedAt` (when the sender's gateway read the
    /// message), its routing latency is observed.
    func deliver(_ frame: [UInt8], to connection: ClientConnection, traceparent: String?, acceptedAt: Int64?) {
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
    /// A ban closes every socket of this instance bound to the identity, whichever
    /// socket presence names (a reconnect may be binding right now: `RecentBans`
    /// catches that one).
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
