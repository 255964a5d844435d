import WhisperMessaging
import WhisperShared

/// Serves `send_message` at the gateway holding the sender's socket, without the router
/// stream (`GATEWAY_SEND_PATH=direct`, the default; docs/architecture.md, "The life of
/// a message"). The checks are the router's (`MessageChecks`), in the same order; the
/// store is the same script, whose reply is the sender's acceptance; a recipient whose
/// socket is on this instance gets the message from here, any other through its
/// gateway's channel, published by the script. A message costs one Redis round trip
/// (the store; the sender's bucket is charged through the socket's lease, a round trip
/// per lease) and no router, stream entry, read or acknowledgement.
///
/// The guarantees do not change: nothing is acknowledged before it is stored (the
/// script's reply leaves Redis after its write); a resend of a known messageId is
/// answered as before and stores nothing; a gateway that dies mid-way leaves either
/// nothing (the client resends) or a stored message (the resend is answered as a
/// duplicate, and the recipient gets the message live or with its next fetch); one
/// socket's frames are handled one at a time, so one sender's messages are stored in the
/// order it sent them.
struct SendDesk: Sendable {
    let checks: MessageChecks
    let attachments: AttachmentRecipients
    let pending: PendingQueue
    let redis: RedisClient
    let instanceID: String
    let pairLimit: RateLimitRule
    let metrics: RoutingMetrics
    let connections: ConnectionRegistry
    let control: ControlChannel
    /// What this instance delivered to its own sockets, for their receipts.
    let deliveries: LocalDeliveries
    /// Receipts' applications waiting to go to Redis: they go with the store.
    let applier: ReceiptApplier

    /// Checks, stores and passes on one message the socket's identity (`sender`, whose
    /// own bucket was charged) sent; `receivedAt` is when the gateway read it (ms).
    /// Refusals are thrown as `WhisperError`s for the caller to answer.
    @discardableResult
    func send(
        _ message: SendMessage, requestId: String?, sender: String, receivedAt: Int64, on connection: ClientConnection,
        traceparent: String? = nil
    ) async throws -> RoutingOutcome {
        let body = try await checks.check(message, sentBy: sender)
        if let attachment = message.attachment {
            try await attachments.admit(attachment, sender: message.from, recipient: message.to, messageId: message.messageId)
        }
        let applications = applier.take()
        let outcome: PendingQueue.StoreOutcome
        do {
            outcome = try await pending.store(
                recipient: message.to, messageId: message.messageId, sender: message.from, body: body,
                acceptance: .reply(gateway: instanceID), acceptedAt: receivedAt, redeliver: false, pairLimit: pairLimit,
                traceparent: traceparent,
                origin: DeliveryOrigin(
                    gateway: instanceID, connId: connection.id, sender: sender, recipient: message.to, messageId: message.messageId
                ),
                alongside: applications.map(PendingQueue.applyCommand)
            )
        } catch {
            applier.returned(applications, replies: nil)
            throw error
        }
        applier.returned(applications, replies: outcome.alongside)
        let depth: Int
        switch outcome.result {
        case .stored(_, let stored):
            depth = stored
        case .duplicate:
            // A client resend: answered as before, nothing queued.
            connection.send(MessageAccepted(messageId: message.messageId), requestId: requestId)
            metrics.routed(.duplicate)
            return .duplicate
        case .conflict, .limited, .full, .notMember, .stale:
            // Membership (`notMember`, `stale`) is checked for group copies only, which
            // the routers store.
            throw PendingQueue.refusal(for: outcome.result, metrics: metrics)
        }
        metrics.queueDepth(depth)
        connection.send(MessageAccepted(messageId: message.messageId), requestId: requestId)
        // The recipient's socket on this instance is written from here, as the control
        // channel would have written it; one that closed a moment ago leaves the message
        // to its next fetch, like a recipient with no socket, and a wake-up.
        var live = outcome.deliveredLive
        if let local = outcome.localConnection {
            if let recipient = connections.connection(local) {
                deliveries.remember(recipient: message.to, messageId: message.messageId, sender: sender, senderConnection: connection.id)
                control.deliver(Self.received(body), to: recipient, traceparent: traceparent, acceptedAt: receivedAt)
            } else {
                live = false
            }
        }
        if !live {
            try await redis.send(PushStream.job(to: message.to, kind: .message, id: message.messageId, at: Clock.millisecondsNow()))
        }
        let routed: RoutingOutcome = live ? .delivered : .queued
        metrics.routed(routed)
        return routed
    }

    /// `message_received` around the stored payload, as the store script builds it for
    /// a published delivery.
    static func received(_ body: [UInt8]) -> [UInt8] {
        Array(#"{"type":"message_received","payload":"#.utf8) + body + [UInt8(ascii: "}")]
    }
}
