import Tracing
import WhisperMessaging
import WhisperShared

/// The frames a router serves, added to the router stream: charged to the address (the
/// route's gates), then to the identity's bucket inside the append script, and refused as
/// busy while the stream is over its backlog, a message then for a moment without a round
/// trip (`BusyHold`), so that under overload a refusal costs less than the work it refuses.
struct RouterStreamDesk: Sendable {
    let limits: FrameLimits
    let receipts: ReceiptDesk
    let redis: RedisClient
    let instanceID: String

    /// Adds the socket's frame, of the routed `type` its route names, to the stream; a
    /// refusal is thrown (`FrameRefusal`).
    func enqueue(_ type: RouterStream.Routed, _ served: FrameRoute.Served, whisperId: String, charging limit: Limit) async throws {
        let frame = served.frame, connection = served.connection
        let isMessage = type == .groupSendMessage
        if isMessage, limits.busy.holds() { throw FrameRefusal.busy(limits) }
        // A page must not hold what this socket has just acknowledged here.
        if type == .fetchPending { await receipts.applier.flush() }
        let payload = try RouterStream.storedPayload(frame.payload)
        // The router checks the exact stored size; this only keeps what cannot pass out of the stream.
        if isMessage, payload.count > Limits.MAX_STORED_MESSAGE_BYTES + 128 {
            throw FrameRefusal.counted(
                .invalidPayload, "the message is \(payload.count) bytes with all its fields; at most \(Limits.MAX_STORED_MESSAGE_BYTES)"
            )
        }
        var entry = RouterStream.Entry(
            gateway: instanceID, connId: connection.id, whisperId: whisperId, type: type,
            requestId: frame.requestId, payload: payload, receivedAt: Clock.millisecondsNow()
        )
        guard WhisperTracing.isEnabled, isMessage else {
            try await admit(entry, charging: limit, isMessage: isMessage)
            return
        }
        // A message's trace begins here (docs/operations.md, "Traces").
        try await withSpan(frame.type.rawValue, ofKind: .server) { span in
            span.attributes["whisper.frame.type"] = frame.type.rawValue
            span.attributes["whisper.gateway.instance"] = instanceID
            if let copy = frame.payload as? GroupSendMessage { span.attributes["whisper.message_id"] = copy.messageId }
            entry.traceparent = WhisperTracing.traceparent(of: span.context)
            try await admit(entry, charging: limit, isMessage: isMessage)
        }
    }

    private func admit(_ entry: RouterStream.Entry, charging limit: Limit, isMessage: Bool) async throws {
        switch try await add(entry, charging: limit, isMessage: isMessage) {
        case .added:
            return
        case .limited(let retry):
            throw FrameRefusal.over(limit, retryAfterMs: retry)
        case .busy:
            // Not the client's doing: answered, not counted against the socket.
            throw FrameRefusal(code: .rateLimited, message: limits.busyRefusal, counted: false)
        }
    }

    /// Adds an entry to the router stream, charging its identity's bucket for its kind,
    /// unless the routers are behind: then it is counted as a busy refusal (and, for a
    /// message, the stream is taken for full for a moment). For frames from a socket and
    /// for their HTTP twins alike; each answers the outcome its own way.
    func add(_ entry: RouterStream.Entry, charging limit: Limit, isMessage: Bool) async throws -> RouterStream.Entry.Admission {
        // Fetches finish work (they empty queues): they get in until twice the limit.
        let backlog = isMessage ? limits.routerBacklogMax : limits.routerBacklogMax * 2
        let admission = try await entry.add(charging: limit, rules: limits.rules, backlogLimit: backlog, on: redis)
        if case .busy = admission {
            if isMessage { limits.busy.hold() }
            limits.busyRefusals.increment()
        }
        return admission
    }
}
