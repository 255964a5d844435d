import Logging
import Tracing
import WhisperMessaging
import WhisperShared

/// Serves `send_message` at the gateway holding the sender's socket, without the router
/// stream (`GATEWAY_SEND_PATH=direct`, the default; docs/architecture.md, "The life of
/// a message"). The checks are the router's (`MessageChecks`), in the same order; the
/// store is the same script, whose reply is the sender's acceptance; a recipient whose
/// socket is on this instance gets the message from here, any other through its
/// gateway's channel, published by the script. A message costs two Redis round trips
/// (the sender's bucket, the store) and no router, stream entry, read or
/// acknowledgement.
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
    let logger: Logger

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
        let outcome = try await pending.store(
            recipient: message.to, messageId: message.messageId, sender: message.from, body: body,
            acceptance: .reply(gateway: instanceID), acceptedAt: receivedAt, redeliver: false, pairLimit: pairLimit,
            traceparent: traceparent
        )
        let routed: RoutingOutcome
        if let refusal = PendingQueue.refusal(for: outcome.result, metrics: metrics) { throw refusal }
        switch outcome.result {
        case .conflict, .limited, .full:
            return .refused
        case .notMember, .stale:
            // Only group copies are checked for membership; they go through the routers.
            throw WhisperError(.internalError, "unexpected answer from the message store")
        case .duplicate:
            // A client resend: answered as before, nothing queued.
            connection.sendRaw(ServerFrameCodec.encode(MessageAccepted(messageId: message.messageId), requestId: requestId))
            metrics.routed(.duplicate)
            return .duplicate
        case .stored(_, let depth):
            metrics.queueDepth(depth)
            connection.sendRaw(ServerFrameCodec.encode(MessageAccepted(messageId: message.messageId), requestId: requestId))
            if let local = outcome.localConnection {
                // The recipient's socket is on this instance: written from here, as the
                // control channel would have written it.
                if let recipient = connections.connection(local) {
                    control.deliver(Self.received(body), to: recipient, traceparent: traceparent, acceptedAt: receivedAt)
                    routed = .delivered
                } else {
                    // Closed a moment ago: the message waits for its next fetch, and a wake-up.
                    try await redis.send(PushStream.job(to: message.to, kind: .message, id: message.messageId, at: Clock.millisecondsNow()))
                    routed = .queued
                }
            } else if outcome.deliveredLive {
                routed = .delivered
            } else {
                try await redis.send(PushStream.job(to: message.to, kind: .message, id: message.messageId, at: Clock.millisecondsNow()))
                routed = .queued
            }
        }
        metrics.routed(routed)
        return routed
    }

    /// `message_received` around the stored payload, as the store script builds it for
    /// a published delivery.
    static func received(_ body: [UInt8]) -> [UInt8] {
        Array(#"{"type":"message_received","payload":"#.utf8) + body + [UInt8(ascii: "}")]
    }
}
