import NIOCore
import Tracing
import WhisperMessaging
import WhisperProtocol
import WhisperShared

/// Serves `send_message` at the sender's gateway, without the router stream: the work
/// is `MessageSending` (the routers' code too); this desk says where the sender hears
/// `message_accepted` and where a recipient on this instance is written, early while
/// the store is in flight for a direct peer. docs/architecture.md, "A message at the
/// sender's gateway" and "Delivered while it is stored".
struct SendDesk: Sendable {
    let sending: MessageSending
    let instanceID: String
    let connections: ConnectionRegistry
    let control: ControlChannel
    /// What this instance delivered to its own sockets is remembered there, and its
    /// waiting applications go with the store.
    let receipts: ReceiptDesk
    /// `GATEWAY_DELIVER_WHILE_STORING` (`deliverEarly`).
    let deliversWhileStoring: Bool
    let limits: FrameLimits
    /// Past this wait in the socket's queue a message is refused as busy.
    let sendWaitMax: Duration
    /// `GATEWAY_STORE_GROUP_WAIT_MS`: how long the store of a message delivered early may
    /// wait for others to share its write (`MessageSending.Caller.storeMayWait`).
    let storeGroupWait: Duration

    var metrics: RoutingMetrics { sending.metrics }

    /// `send_message` from a socket: charged to the address (in memory, the route's
    /// gates) and to the identity's bucket for messages (the one group copies are charged
    /// to as they enter the stream), then `send`. What a router would refuse is answered
    /// the same way, not counted against the socket; a frame the gateway kept waiting past
    /// `sendWaitMax` is refused as busy (a socket's own backlog is held back by TCP
    /// instead: `SocketInbox.nextTimed()`).
    func serve(_ message: SendMessage, whisperId: String, _ served: FrameRoute.Served) async throws {
        let requestId = served.frame.requestId, connection = served.connection, waitingSince = served.waitingSince
        // Far too large whatever else it holds: refused before any work.
        if message.ciphertext.utf8.count > Limits.MAX_STORED_MESSAGE_BYTES {
            throw FrameRefusal.counted(.invalidPayload, "the message is over \(Limits.MAX_STORED_MESSAGE_BYTES) bytes with all its fields")
        }
        if waitingSince > 0, sendWaitMax > .zero, NIODeadline.now().uptimeNanoseconds &- waitingSince > UInt64(clamping: sendWaitMax.nanoseconds) {
            throw FrameRefusal.busy(limits)
        }
        let bucket = RouterStream.bucket(.sendPerSender, whisperId, in: sending.redis.configuration.streamShards)
        if case .limited(let retry) = try await limits.charge(.send, bucket: bucket, limit: .sendPerSender, on: connection) {
            throw FrameRefusal.over(.sendPerSender, retryAfterMs: retry)
        }
        let receivedAt = Clock.millisecondsNow()
        do {
            guard WhisperTracing.isEnabled else {
                try await send(message, requestId: requestId, sender: whisperId, receivedAt: receivedAt, on: connection, turn: served.turn)
                return
            }
            // A message's trace begins and, for a recipient on this instance, ends here.
            try await withSpan(ClientFrameType.sendMessage.rawValue, ofKind: .server) { span in
                span.attributes["whisper.frame.type"] = ClientFrameType.sendMessage.rawValue
                span.attributes["whisper.gateway.instance"] = instanceID
                span.attributes["whisper.message_id"] = message.messageId
                let outcome = try await send(
                    message, requestId: requestId, sender: whisperId, receivedAt: receivedAt, on: connection,
                    traceparent: WhisperTracing.traceparent(of: span.context), turn: served.turn
                )
                span.attributes["whisper.outcome"] = outcome.rawValue
            }
        } catch let refusal as WhisperError {
            metrics.routed(.refused)
            connection.logger.info("frame_refused", metadata: [
                "type": "send_message", "code": "\(refusal.code.rawValue)", "whisperId": "\(whisperId)",
            ])
            throw FrameRefusal(code: refusal.code, message: refusal.message, counted: false)
        }
    }

    /// Checks, stores and passes on one message the socket's identity (`sender`, whose
    /// own bucket was charged) sent; `receivedAt` is when the gateway read it (ms).
    /// Refusals are thrown as `WhisperError`s for the caller to answer. `turn`: released
    /// once the store of a message delivered early is written (`SocketTurns`).
    @discardableResult
    func send(
        _ message: SendMessage, requestId: String?, sender: String, receivedAt: Int64, on connection: ClientConnection,
        traceparent: String? = nil, turn: FrameTurn? = nil
    ) async throws -> RoutingOutcome {
        let origin = DeliveryOrigin(gateway: instanceID, connId: connection.id, sender: sender, recipient: message.to, messageId: message.messageId)
        return try await sending.send(
            message,
            from: MessageSending.Sender(whisperId: sender, requestId: requestId, receivedAt: receivedAt, traceparent: traceparent, origin: origin),
            caller: Socket(desk: self, connection: connection, turn: turn)
        )
    }

    /// The sender's socket on this instance, as `MessageSending` sees it.
    private struct Socket: MessageSending.Caller {
        let desk: SendDesk
        let connection: ClientConnection
        let turn: FrameTurn?

        func accept(_ frame: [UInt8]) -> RedisCommand? {
            connection.sendRaw(frame)
            return nil
        }

        /// The recipient's socket on this instance is written from here, as the control
        /// channel would have written it; one that closed a moment ago leaves the message
        /// to its next fetch, like a recipient with no socket, and a wake-up.
        func deliverHere(_ frame: [UInt8], to socket: PresenceRecord, message: SendMessage, sender: MessageSending.Sender) -> Bool? {
            guard socket.gateway == desk.instanceID else { return nil }
            guard let recipient = desk.connections.connection(socket.connId) else { return false }
            desk.receipts.memory.remember(
                recipient: message.to, messageId: message.messageId, sender: sender.whisperId, senderConnection: connection.id
            )
            desk.control.deliver(frame, to: recipient, from: sender.whisperId, traceparent: sender.traceparent, acceptedAt: sender.receivedAt)
            return true
        }

        /// The recipient's socket here, when this instance holds its presence, is written
        /// before the store answers. Its receipt, should it come first, waits for the
        /// store's answer before it is given to the sender (`ReceiptMemory.Settling`).
        func deliverEarly(_ frame: () -> [UInt8], message: SendMessage, sender: MessageSending.Sender) -> MessageSending.EarlyDelivery? {
            guard desk.deliversWhileStoring, let recipient = desk.connections.presenceHolder(message.to), recipient.whisperId == message.to, !recipient.isClosing
            else { return nil }
            let settling = ReceiptMemory.Settling()
            desk.receipts.memory.remember(
                recipient: message.to, messageId: message.messageId, sender: sender.whisperId, senderConnection: connection.id,
                settling: settling
            )
            desk.control.deliver(frame(), to: recipient, from: sender.whisperId, traceparent: sender.traceparent, acceptedAt: sender.receivedAt)
            return MessageSending.EarlyDelivery(socket: PresenceRecord(gateway: desk.instanceID, connId: recipient.id), ride: settling.ride)
        }

        func settle(_ message: SendMessage, stored: Bool, receiptRecorded: Bool) {
            desk.receipts.memory.settle(
                recipient: message.to, messageId: message.messageId, stored ? (receiptRecorded ? .storedWithReceipt : .stored) : .refused
            )
        }

        /// The socket's next frame is handled while the store's reply is awaited.
        func storeWritten() {
            turn?.release()
        }

        var storeMayWait: Duration { desk.storeGroupWait }

        /// The socket's next frame does not wait for the publish (`MessageSending.Caller`).
        var waitsForPublishes: Bool { false }

        func alongside() -> (commands: [RedisCommand], returned: @Sendable ([RESPValue]?) -> Void) {
            let applier = desk.receipts.applier
            let applications = applier.take()
            return (applications.map(PendingQueue.applyCommand), { applier.returned(applications, replies: $0) })
        }
    }
}
