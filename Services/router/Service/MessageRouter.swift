import Foundation
import Logging
import Tracing
import WhisperMessaging
import WhisperShared

/// Serves the frames of the router stream (docs/architecture.md, "Through the router stream"):
/// group copies, `fetch_pending`, group changes, account deletions and call signaling. Every step is idempotent: an entry
/// that is processed twice (a router died before acknowledging it) changes nothing twice.
/// Receipts are served by the gateways (`ReceiptDesk`), never here.
struct MessageRouter: Sendable {
    let redis: RedisClient
    /// The send path, shared with the gateways' `SendDesk`.
    let sending: MessageSending
    let pending: PendingQueue
    let receipts: OwedFrames
    let groups: GroupDesk
    let accounts: AccountDesk
    let calls: CallDesk
    let settings: RouterSettings
    let metrics: RoutingMetrics
    let logger: Logger

    /// Handles one entry. Throws only when the infrastructure failed (the entry is then
    /// left unacknowledged, to be claimed again); refusals go back to the client.
    @discardableResult
    func handle(_ entry: RouterStream.Entry, redelivery: Bool = false) async throws -> RoutingOutcome {
        do {
            switch entry.type {
            case .groupSendMessage:
                let copy = try decode(GroupSendMessage.self, entry)
                return try await traced(entry, messageId: copy.messageId) { trace in
                    try await send(copy.asMessage, groupId: copy.groupId, entry: entry, redelivery: redelivery, traceparent: trace)
                }
            case .groupCreate:
                try await reply(try await groups.create(try decode(GroupCreate.self, entry), entry: entry), to: entry)
                metrics.routed(.group)
                return .group
            case .groupUpdate:
                try await reply(try await groups.update(try decode(GroupUpdate.self, entry), entry: entry), to: entry)
                metrics.routed(.group)
                return .group
            case .accountDelete:
                try await accounts.delete(try decode(AccountDelete.self, entry), entry: entry) { try await reply($0, to: entry) }
                metrics.routed(.group)
                return .group
            case .groupInvitationsList:
                try await reply(try await groups.invitations(for: entry.whisperId, entry: entry), to: entry)
                metrics.routed(.group)
                return .group
            case .callInitiate:
                return try await counted(calls.initiate(try decode(CallInitiate.self, entry), entry: entry, redelivery: redelivery))
            case .callAnswer:
                return try await counted(calls.answer(try decode(CallAnswer.self, entry), entry: entry))
            case .callIceCandidate:
                return try await counted(calls.candidate(try decode(CallIceCandidate.self, entry), entry: entry))
            case .callEnd:
                return try await counted(calls.end(try decode(CallEnd.self, entry), entry: entry))
            case .fetchPending:
                return try await fetch(try decode(FetchPending.self, entry), entry: entry)
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

    /// One copy of a group message, served as the gateways' `SendDesk` serves a 1:1
    /// message (`MessageSending`: the same checks, in the same order, and the same store)
    /// and told to the sender through its gateway's channel. The copy is signed over the
    /// groupId, and both ends must be members of the group (cached membership, whose
    /// version the store script checks against the recipient's record; a group that
    /// changed meanwhile is read again). An entry handled a second time (`redelivery`:
    /// its router died) is answered again, and delivered again if still pending.
    private func send(
        _ message: SendMessage, groupId: String, entry: RouterStream.Entry, redelivery: Bool, traceparent: String? = nil
    ) async throws -> RoutingOutcome {
        let groups = self.groups
        let group = MessageSending.GroupCopy(groupId: groupId) { after in
            switch after {
            case .notMember?:
                return try await groups.recheck(sender: message.from, recipient: message.to, groupId: groupId)
            case .some:
                // The group changed since this router read it: read it again.
                groups.directory.forget(groupId)
                return try await groups.admit(sender: message.from, recipient: message.to, groupId: groupId)
            case nil:
                return try await groups.admit(sender: message.from, recipient: message.to, groupId: groupId)
            }
        }
        return try await sending.send(
            message,
            from: MessageSending.Sender(
                whisperId: entry.whisperId, requestId: entry.requestId, receivedAt: entry.receivedAt, traceparent: traceparent, origin: nil
            ),
            group: group, redeliver: redelivery, caller: Stream(entry: entry)
        )
    }

    /// The sender's gateway, as `MessageSending` sees it from a router.
    private struct Stream: MessageSending.Caller {
        let entry: RouterStream.Entry

        func accept(_ frame: [UInt8]) -> RedisCommand? {
            GatewayCommand(kind: .deliver, connId: entry.connId, frame: frame).publishing(to: entry.gateway)
        }

        func deliverHere(_ frame: [UInt8], to socket: PresenceRecord, message: SendMessage, sender: MessageSending.Sender) -> Bool? { nil }

        /// A router holds no sockets: every message waits for its store.
        func deliverEarly(_ frame: () -> [UInt8], message: SendMessage, sender: MessageSending.Sender) -> MessageSending.EarlyDelivery? { nil }

        func settle(_ message: SendMessage, stored: Bool, receiptRecorded: Bool) {}

        func alongside() -> (commands: [RedisCommand], returned: @Sendable ([RESPValue]?) -> Void) { ([], { _ in }) }

        /// The entry is acknowledged next, on another connection: only once it is published.
        var waitsForPublishes: Bool { true }
    }

    // MARK: - fetch_pending

    private func fetch(_ request: FetchPending, entry: RouterStream.Entry) async throws -> RoutingOutcome {
        // Charged at the gateway, per identity and per address, as the entry was added.
        // Receipts that waited for this sender go first, then group events (each settled
        // once written).
        try await receipts.handOver(for: entry.whisperId, to: entry.gateway, connId: entry.connId)
        try await groups.events.handOver(for: entry.whisperId, to: entry.gateway, connId: entry.connId)
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
        try await reply(ServerFrameCodec.encode(.pendingMessages, payloadJSON: payload, requestId: entry.requestId), to: entry)
        metrics.routed(.page)
        return .page
    }

    private func reply(_ frame: [UInt8], to entry: RouterStream.Entry) async throws {
        try await GatewayCommand(kind: .deliver, connId: entry.connId, frame: frame).publish(to: entry.gateway, on: redis)
    }
}
