import Foundation
import Logging
import Tracing
import WhisperMessaging
import WhisperShared

/// Serves `send_message`, `delivery_receipt` and `fetch_pending` from the router stream
/// (spec 4 and 5; ARCHITECTURE.md section 3). Every step is idempotent: an entry that is
/// processed twice (a router died before acknowledging it) changes nothing twice.
struct MessageRouter: Sendable {
    let redis: RedisClient
    let identities: IdentityCache
    let pending: PendingQueue
    let receipts: OwedFrames
    let groups: GroupDesk
    let calls: CallDesk
    let attachments: AttachmentRecipients
    let settings: RouterSettings
    let metrics: RoutingMetrics
    let logger: Logger

    /// Handles one entry. Throws only when the infrastructure failed (the entry is then
    /// left unacknowledged, to be claimed again); refusals go back to the client.
    @discardableResult
    func handle(_ entry: RouterStream.Entry, redelivery: Bool = false) async throws -> RoutingOutcome {
        do {
            switch entry.type {
            case .sendMessage:
                let message = try decode(SendMessage.self, entry)
                return try await traced(entry, messageId: message.messageId) { trace in
                    try await send(message, entry: entry, redelivery: redelivery, traceparent: trace)
                }
            case .groupSendMessage:
                let copy = try decode(GroupSendMessage.self, entry)
                return try await traced(entry, messageId: copy.messageId) { trace in
                    try await send(copy.envelope, groupId: copy.groupId, entry: entry, redelivery: redelivery, traceparent: trace)
                }
            case .groupCreate:
                try await reply(try await groups.create(try decode(GroupCreate.self, entry), entry: entry), to: entry)
                metrics.routed(.group)
                return .group
            case .groupUpdate:
                try await reply(try await groups.update(try decode(GroupUpdate.self, entry), entry: entry), to: entry)
                metrics.routed(.group)
                return .group
            case .groupInvitationsList:
                try await reply(try await groups.invitations(for: entry.whisperId, entry: entry), to: entry)
                metrics.routed(.group)
                return .group
            case .callInitiate:
                return try await counted(calls.initiate(try decode(CallInitiate.self, entry), entry: entry))
            case .callAnswer:
                return try await counted(calls.answer(try decode(CallAnswer.self, entry), entry: entry))
            case .callIceCandidate:
                return try await counted(calls.candidate(try decode(CallIceCandidate.self, entry), entry: entry))
            case .callEnd:
                return try await counted(calls.end(try decode(CallEnd.self, entry), entry: entry))
            case .deliveryReceipt:
                return try await receipt(try decode(DeliveryReceipt.self, entry), entry: entry, redelivery: redelivery)
            case .fetchPending:
                return try await fetch(try decode(FetchPending.self, entry), entry: entry)
            default:
                throw WhisperError(.invalidPayload, "\(entry.type.rawValue) is not routed")
            }
        } catch let refusal as WhisperError {
            metrics.refused(refusal.code)
            try await reply(ServerFrameCodec.encodeError(refusal.code, refusal.message, requestId: entry.requestId), to: entry)
            logger.info("frame_refused", metadata: [
                "type": "\(entry.type.rawValue)", "code": "\(refusal.code.rawValue)", "whisperId": "\(entry.whisperId)", "connId": "\(entry.connId)",
            ])
            return .refused
        }
    }

    private func counted(_ outcome: RoutingOutcome) -> RoutingOutcome {
        metrics.routed(outcome)
        return outcome
    }

    /// `send_message` and `delivery_receipt`: the fast reader first (chosen at compile time).
    /// What the stream holds passed the gateway's checks, but the router holds it to the
    /// same rules again: an entry written by anything else must not reach arithmetic or
    /// storage with values the schema refuses.
    private func decode<P: ClientPayload & HotPayload>(_ type: P.Type, _ entry: RouterStream.Entry) throws -> P {
        let text = RouterStream.decodablePayload(entry.payload)
        if let object = FastJSON.object(text), let payload = P(fast: object) {
            return try checked(payload)
        }
        return try decodeGeneral(P.self, text)
    }

    private func decode<P: ClientPayload>(_ type: P.Type, _ entry: RouterStream.Entry) throws -> P {
        try decodeGeneral(P.self, RouterStream.decodablePayload(entry.payload))
    }

    private func decodeGeneral<P: ClientPayload>(_ type: P.Type, _ text: [UInt8]) throws -> P {
        guard let payload = try? ProtocolJSON.decoder.decode(P.self, from: Data(text)) else {
            throw WhisperError(.invalidPayload, "payload does not match its schema")
        }
        return try checked(payload)
    }

    private func checked<P: ClientPayload>(_ payload: P) throws -> P {
        do {
            try payload.validate()
        } catch {
            throw WhisperError(.invalidPayload, "payload.\(error.field) \(error.rule)")
        }
        return payload
    }

    // MARK: - send_message

    /// The checks run cheapest first, so that a refused message costs as little as it
    /// can: what the entry itself shows (session's identity, size, time), then the
    /// sender (cached), the signature (CPU only), the recipient (cached, unknown ones
    /// too), and last the store script, which charges the pair's bucket and the
    /// recipient's queue cap. docs/architecture.md lists the order.
    ///
    /// A group copy (`groupId` set) is signed over the groupId and checked once more
    /// after the recipient: both ends must be members of the group (cached membership,
    /// whose version the store script checks against the recipient's record).
    /// Runs `body` inside a span that continues the entry's trace, when traces are on and
    /// the gateway started one; `body` gets the context to pass on to the recipient's gateway.
    private func traced(
        _ entry: RouterStream.Entry, messageId: String, _ body: (String?) async throws -> RoutingOutcome
    ) async throws -> RoutingOutcome {
        guard WhisperTracing.isEnabled, let parent = entry.traceparent else { return try await body(nil) }
        return try await withSpan("route \(entry.type.rawValue)", context: WhisperTracing.context(continuing: parent), ofKind: .consumer) { span in
            span.attributes["whisper.frame.type"] = entry.type.rawValue
            span.attributes["whisper.message_id"] = messageId
            span.attributes["whisper.router.instance"] = settings.common.instanceID
            let outcome = try await body(WhisperTracing.traceparent(of: span.context))
            span.attributes["whisper.outcome"] = outcome.rawValue
            return outcome
        }
    }

    private func send(
        _ message: SendMessage, groupId: String? = nil, entry: RouterStream.Entry, redelivery: Bool, traceparent: String? = nil
    ) async throws -> RoutingOutcome {
        // The sender's own limit was charged by the gateway as it added the entry; the
        // limit per recipient is charged by the store script (no round trip of its own).
        let body = try await MessageChecks(identities: identities).check(message, groupId: groupId, sentBy: entry.whisperId)
        var membership: PendingQueue.GroupCheck?
        if let groupId {
            membership = try await groups.admit(sender: message.from, recipient: message.to, groupId: groupId)
        }
        if let attachment = message.attachment {
            try await attachments.admit(attachment, sender: message.from, recipient: message.to, messageId: message.messageId)
        }

        let accepted = GatewayCommand(kind: .deliver, connId: entry.connId, frame: Self.accepted(message.messageId, requestId: entry.requestId))
        var attempts = 0
        var result: PendingQueue.StoreOutcome
        while true {
            result = try await pending.store(
                recipient: message.to, messageId: message.messageId, sender: message.from, body: body,
                acceptance: .publish(gateway: entry.gateway, command: accepted), acceptedAt: entry.receivedAt, redeliver: redelivery,
                pairLimit: settings.sendPerPair, group: membership, traceparent: traceparent
            )
            attempts += 1
            guard let groupId, attempts < 4 else { break }
            switch result.result {
            case .stale:
                // The group changed since this router read it: read it again.
                groups.directory.forget(groupId)
                membership = try await groups.admit(sender: message.from, recipient: message.to, groupId: groupId)
                continue
            case .notMember:
                membership = try await groups.recheck(sender: message.from, recipient: message.to, groupId: groupId)
                continue
            default:
                break
            }
            break
        }
        let (stored, live) = (result.result, result.deliveredLive)
        let outcome: RoutingOutcome
        switch stored {
        case .notMember:
            throw WhisperError(.forbidden, "to is not a member of this group")
        case .stale:
            throw WhisperError(.internalError, "the group is changing; try again")
        case .conflict, .limited, .full:
            throw PendingQueue.refusal(for: stored, metrics: metrics)
        case .duplicate:
            // A client resend: answered as before, nothing queued. A stream entry handled
            // a second time (its router died) was also delivered again, if still pending.
            metrics.routed(.duplicate)
            return .duplicate
        case .stored(_, let depth):
            metrics.queueDepth(depth)
            if live {
                outcome = .delivered
            } else {
                try await redis.send(PushStream.job(to: message.to, kind: .message, id: message.messageId, at: Clock.millisecondsNow()))
                outcome = .queued
            }
        }
        metrics.routed(outcome)
        logger.debug("message_routed", metadata: [
            "messageId": "\(message.messageId)", "whisperId": "\(message.from)", "outcome": "\(outcome.rawValue)",
            "sizeBytes": "\(message.ciphertext.utf8.count)",
        ])
        return outcome
    }

    // MARK: - delivery_receipt

    private func receipt(_ receipt: DeliveryReceipt, entry: RouterStream.Entry, redelivery: Bool) async throws -> RoutingOutcome {
        guard receipt.from == entry.whisperId else {
            throw WhisperError(.forbidden, "from must be the Whisper ID of this session")
        }
        // Where the named sender is connected comes back with the acknowledgement.
        let (result, socket) = try await pending.acknowledge(
            recipient: receipt.from, messageId: receipt.messageId, delivered: receipt.status == .delivered, locating: receipt.to,
            repeated: redelivery
        )
        // Not this recipient's message, not from the named sender, or a status already
        // passed on: nothing to do, nothing to tell.
        guard case .acknowledged(let sender) = result, sender == receipt.to else {
            metrics.routed(.ignored)
            return .ignored
        }
        let delivered = MessageDelivered(messageId: receipt.messageId, status: receipt.status, timestamp: receipt.timestamp, from: receipt.from)
        // Stored first, handed to the sender's socket in the same script; it leaves the
        // store once that socket has taken it, else it waits for the next fetch_pending.
        try await receipts.keep(ServerFrameCodec.encode(delivered), for: sender, handingTo: socket)
        metrics.routed(.receipt)
        return .receipt
    }

    // MARK: - fetch_pending

    private func fetch(_ request: FetchPending, entry: RouterStream.Entry) async throws -> RoutingOutcome {
        // Charged at the gateway, per identity and per address, as the entry was added.
        // Receipts that waited for this sender go first (each settled once written).
        try await receipts.handOver(for: entry.whisperId, to: entry.gateway, connId: entry.connId)
        // A call ringing for this identity (the fetch that follows a VoIP push), once
        // per walk through the queue.
        if request.cursor == nil {
            try await calls.handOver(to: entry.whisperId, gateway: entry.gateway, connId: entry.connId)
        }
        let limit = min(request.limit ?? Limits.FETCH_PENDING_LIMIT_DEFAULT, Limits.FETCH_PENDING_LIMIT_MAX)
        let page = try await pending.page(recipient: entry.whisperId, after: request.cursor, limit: limit)
        var payload = Array(#"{"messages":["#.utf8)
        for (index, message) in page.messages.enumerated() {
            if index > 0 { payload.append(UInt8(ascii: ",")) }
            payload += message
        }
        payload += Array("]".utf8)
        if let next = page.nextCursor {
            payload += Array(#","nextCursor":"\#(next)""#.utf8)
        }
        payload.append(UInt8(ascii: "}"))
        try await reply(Self.frame(type: .pendingMessages, payload: payload, requestId: entry.requestId), to: entry)
        metrics.routed(.page)
        return .page
    }

    // MARK: - Frames

    static func accepted(_ messageId: String, requestId: String?) -> [UInt8] {
        ServerFrameCodec.encode(MessageAccepted(messageId: messageId), requestId: requestId)
    }

    /// A frame around a payload that is already JSON. `requestId` has a restricted
    /// alphabet (no quotes or backslashes), so it goes in as it is.
    static func frame(type: ServerFrameType, payload: [UInt8], requestId: String? = nil) -> [UInt8] {
        let head = requestId.map { #"{"type":"\#(type.rawValue)","requestId":"\#($0)","payload":"# } ?? #"{"type":"\#(type.rawValue)","payload":"#
        return Array(head.utf8) + payload + [UInt8(ascii: "}")]
    }

    private func reply(_ frame: [UInt8], to entry: RouterStream.Entry) async throws {
        try await GatewayCommand(kind: .deliver, connId: entry.connId, frame: frame).publish(to: entry.gateway, on: redis)
    }
}
