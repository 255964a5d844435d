import Foundation
import Logging
import NIOCore
import Prometheus
import Synchronization
import Tracing
import WhisperMessaging
import WhisperShared

/// What the gateway does with each frame, in stages: decode (the checks of spec 3.1;
/// size is enforced by the WebSocket layer), the control gate, the sender (a session,
/// a listener device, or anyone), the route's limits, then the route's handler
/// (`FrameRoute`, one per frame type in `FrameRoutes.swift`).
struct FrameHandler: Sendable {
    let environment: ServiceEnvironment
    let auth: ServiceClient
    /// turn-cred's internal port, when TURN is offered.
    let turnCred: ServiceClient?
    let sessions: SessionStore
    let presence: PresenceStore
    let recentBans: RecentBans
    let limits: FrameLimits
    let receipts: ReceiptDesk
    let typing: TypingDesk
    let watching: PresenceDesk
    /// Serves `send_message` here (`GATEWAY_SEND_PATH=direct`); nil: through the router stream.
    let sends: SendDesk?
    /// Past this wait in the socket's queue a direct `send_message` is refused as busy.
    let sendWaitMax: Duration
    /// Live text: the sequence and the content (`LiveRelay`).
    let live: LiveRelay
    /// Push-to-talk channels and their floor (`PTTDesk`).
    let ptt: PTTDesk
    let decoder = ClientFrameDecoder()

    var instanceID: String { environment.settings.instanceID }

    /// Handles one frame of the socket; `waitingSince` is since when it has waited for the
    /// gateway (`NIODeadline` uptime, ns; 0 when it did not: `SocketInbox.nextTimed()`).
    func handle(_ bytes: [UInt8], waitingSince: UInt64 = 0, on connection: ClientConnection) async {
        // Frames a client sent before closing are still handled (a receipt written just
        // before the close must not be lost); the answers have nowhere to go and are
        // dropped. A socket the server ended is not read any further.
        guard !connection.refusesFrames else { return }
        let frame: InboundFrame
        switch decoder.decode(bytes) {
        case .success(let decoded):
            frame = decoded
        case .failure(let rejection):
            connection.logger.info("frame_rejected", metadata: [
                "code": "\(rejection.code.rawValue)", "reason": "\(rejection.message)", "sizeBytes": "\(bytes.count)",
            ])
            await refuse(rejection.code, rejection.message, requestId: rejection.requestId, on: connection)
            return
        }
        let route = FrameRoute.table[frame.type] ?? FrameRoute.route(for: frame.type)
        if route.isControl, !admitControl(on: connection) {
            await refuse(over: .controlPerSocket, retryAfterMs: nil, requestId: frame.requestId, on: connection)
            return
        }
        do {
            guard try await admitSender(frame, route, on: connection),
                  let served = try await admitLimits(frame, route, waitingSince: waitingSince, on: connection) else { return }
            if route.answersRefusals {
                do {
                    try await route.serve(self, served)
                } catch let refusal as WhisperError {
                    await reply(error: refusal.code, refusal.message, requestId: frame.requestId, on: connection)
                }
            } else {
                try await route.serve(self, served)
            }
        } catch {
            environment.logger.error("frame_failed", metadata: ["type": "\(frame.type.rawValue)", "connId": "\(connection.id)", "error": "\(error)"])
            await reply(error: .internalError, "the server failed; try again", requestId: frame.requestId, on: connection)
        }
    }

    /// The sender stage: a session's frame needs a live session for the socket's
    /// identity (and, for control frames, a token of the identity's share of them); a
    /// listener's frame needs the socket's listener device. False once refused.
    private func admitSender(_ frame: InboundFrame, _ route: FrameRoute, on connection: ClientConnection) async throws -> Bool {
        switch route.sender {
        case .anyone:
            return true
        case .session:
            guard let token = frame.sessionToken, try await authorize(token, on: connection) else {
                await refuse(.notRegistered, "no valid session for this connection; register first", requestId: frame.requestId, on: connection)
                return false
            }
            // Session and token frames, per identity across every gateway (one
            // identity may hold sockets on several instances in a row).
            if route.isControl, let whisperId = connection.whisperId,
               case .limited(let retry) = try await limits.limiter.take(.controlPerIdentity, key: whisperId, rules: limits.rules) {
                await refuse(over: .controlPerIdentity, retryAfterMs: retry, requestId: frame.requestId, on: connection)
                return false
            }
            return true
        case .listenerDevice:
            guard let device = connection.liveDevice, !device.isEmpty else {
                await refuse(
                    .notRegistered, "this socket has no listener device: open it with the whisper_live_device cookie (POST /live/devices)",
                    requestId: frame.requestId, on: connection
                )
                return false
            }
            return true
        }
    }

    /// The limits stage: the route's gates in order. Nil once the frame was refused.
    private func admitLimits(_ frame: InboundFrame, _ route: FrameRoute, waitingSince: UInt64, on connection: ClientConnection) async throws -> FrameRoute.Served? {
        var whisperId: String?
        for gate in route.gates {
            switch gate {
            case .control:
                // Charged before the session stage (`handle`, `admitSender`).
                continue
            case .identity:
                guard let bound = connection.whisperId else {
                    await refuse(.notRegistered, "no valid session for this connection; register first", requestId: frame.requestId, on: connection)
                    return nil
                }
                whisperId = bound
            case .address(let limit):
                guard limits.take(limit, address: connection.remoteAddress) else {
                    await refuse(over: limit, retryAfterMs: nil, requestId: frame.requestId, on: connection)
                    return nil
                }
            case .identityBucket(let limit):
                // Listed after `identity` (`FrameRoute.acting`); without one the frame is
                // refused, never let past the bucket.
                guard let key = whisperId else {
                    await refuse(.notRegistered, "no valid session for this connection; register first", requestId: frame.requestId, on: connection)
                    return nil
                }
                if case .limited(let retry) = try await limits.limiter.take(limit, key: key, rules: limits.rules) {
                    await refuse(over: limit, retryAfterMs: retry, requestId: frame.requestId, on: connection)
                    return nil
                }
            }
        }
        return FrameRoute.Served(frame: frame, connection: connection, whisperId: whisperId, waitingSince: waitingSince)
    }

    /// Frames that cost nothing but the gateway's (and auth's) time: limited here, per
    /// socket and per address, since no other limit sees them.
    private func admitControl(on connection: ClientConnection) -> Bool {
        connection.takeControl() && limits.take(.controlPerAddress, address: connection.remoteAddress)
    }

    /// Answers a refused frame, unless the socket has had too many refusals (per socket
    /// or from its address): then it is closed with 4003 instead, and what it sends
    /// next is not read.
    func refuse(_ code: ErrorCode, _ message: String, requestId: String?, on connection: ClientConnection) async {
        guard connection.takeRefusal(), limits.take(.refusalsPerAddress, address: connection.remoteAddress) else {
            environment.metrics.recordError(code)
            if !connection.isClosing {
                connection.logger.warning("socket_refusals_exceeded")
                connection.close(code: CloseCode.tooManyRefusals, reason: "too many refused frames")
            }
            return
        }
        await reply(error: code, message, requestId: requestId, on: connection)
    }

    /// Refuses a frame over `limit` with the limit's words (`RATE_LIMITED`), counted
    /// against the socket like any refusal.
    func refuse(over limit: Limit, retryAfterMs: Int?, requestId: String?, on connection: ClientConnection) async {
        await refuse(.rateLimited, limit.refusal(retryAfterMs: retryAfterMs), requestId: requestId, on: connection)
    }

    // MARK: - Handlers the routes share

    /// Passes the frame to auth and its answer back.
    func forwardToAuth(_ payload: some ClientPayload, _ served: FrameRoute.Served) async throws {
        served.connection.sendRaw(try await auth.forward(payload, requestId: served.frame.requestId, context: context(of: served.connection)))
    }

    /// `register_proof`: auth's answer, then the socket acts for the identity.
    func register(_ payload: RegisterProof, _ served: FrameRoute.Served) async throws {
        let connection = served.connection
        let answer = try await auth.forward(payload, requestId: served.frame.requestId, context: context(of: connection))
        let ack = try? ServerFrameCodec.decode(answer).payload(as: RegisterAck.self)
        // The ack goes out first: claiming presence may close a concurrent socket of
        // the same identity, and that one's close must not overtake its own ack.
        // Frames of a socket are handled one at a time, so the next frame finds the
        // socket bound.
        connection.sendRaw(answer)
        if let ack {
            await rebind(connection, to: ack.whisperId)
        }
    }

    /// `logout`: auth ends the session; the socket stops acting for the identity.
    func logout(_ payload: Logout, _ served: FrameRoute.Served) async throws {
        let connection = served.connection
        connection.forgetVerifiedSession()
        let answer = try await auth.forward(payload, requestId: served.frame.requestId, context: context(of: connection))
        if (try? ServerFrameCodec.decode(answer))?.type == .loggedOut {
            await release(connection)
        }
        connection.sendRaw(answer)
    }

    /// `get_turn_credentials`, from turn-cred when this server offers TURN.
    func turnCredentials(_ payload: GetTurnCredentials, _ served: FrameRoute.Served) async throws {
        guard let turnCred else {
            await refuse(
                .forbidden, "get_turn_credentials is not available on this server (no TURN service configured)",
                requestId: served.frame.requestId, on: served.connection
            )
            return
        }
        served.connection.sendRaw(try await turnCred.forward(payload, requestId: served.frame.requestId, context: context(of: served.connection)))
    }

    /// A Whisperer's conversations, served here from Postgres.
    func liveConversations(_ served: FrameRoute.Served) -> LiveConversationDesk {
        LiveConversationDesk(postgres: environment.postgres, logger: served.connection.logger)
    }

    /// `live_conversation_delete`: gone in Postgres, then whoever is in it live is let go.
    /// Should that fail (Redis unreachable), the deletion stands: no new place can be
    /// taken, and the sockets in it keep theirs until they leave.
    func deleteLiveConversation(_ delete: LiveConversationDelete, owner: String, _ served: FrameRoute.Served) async throws {
        let deleted = try await liveConversations(served).delete(delete, owner: owner)
        do {
            try await live.deleted(delete.conversationId)
        } catch {
            served.connection.logger.warning("live_deleted_release_failed", metadata: ["error": "\(error)"])
        }
        served.answer(deleted)
    }

    /// Messages, group changes, calls and pending-queue pages go to the routers through
    /// the router stream; a router answers through this instance's channel. Each is
    /// charged first to its address (in memory, the route's gates), then to its
    /// identity's bucket for its kind, in the script that adds it: a frame over either
    /// limit never reaches a router, and is refused like any other (a client that
    /// ignores `RATE_LIMITED` is soon closed).
    func enqueueForRouter(_ served: FrameRoute.Served, whisperId: String, charging limit: Limit) async throws {
        let frame = served.frame, connection = served.connection
        let isMessage = frame.type == .sendMessage || frame.type == .groupSendMessage
        // Refused without a round trip while the stream was found full a moment ago:
        // under overload a refusal must cost less than the work it turns away.
        if isMessage, limits.busy.holds() {
            limits.busyRefusals.increment()
            await reply(error: .rateLimited, limits.busyRefusal, requestId: frame.requestId, on: connection)
            return
        }
        // A page must not hold what this socket has just acknowledged here.
        if frame.type == .fetchPending { await receipts.applier.flush() }
        let payload = try RouterStream.storedPayload(frame.payload)
        // The router checks the exact stored size; this only keeps what cannot pass out of the stream.
        if isMessage, payload.count > Limits.MAX_STORED_MESSAGE_BYTES + 128 {
            await refuse(
                .invalidPayload, "the message is \(payload.count) bytes with all its fields; at most \(Limits.MAX_STORED_MESSAGE_BYTES)",
                requestId: frame.requestId, on: connection
            )
            return
        }
        var entry = RouterStream.Entry(
            gateway: instanceID, connId: connection.id, whisperId: whisperId, type: frame.type,
            requestId: frame.requestId, payload: payload, receivedAt: Clock.millisecondsNow()
        )
        guard WhisperTracing.isEnabled, isMessage else {
            try await admit(entry, frame: frame, charging: limit, isMessage: isMessage, on: connection)
            return
        }
        // A message's trace begins here (docs/operations.md, "Traces").
        try await withSpan(frame.type.rawValue, ofKind: .server) { span in
            span.attributes["whisper.frame.type"] = frame.type.rawValue
            span.attributes["whisper.gateway.instance"] = instanceID
            if let message = frame.payload as? SendMessage { span.attributes["whisper.message_id"] = message.messageId }
            if let copy = frame.payload as? GroupSendMessage { span.attributes["whisper.message_id"] = copy.messageId }
            entry.traceparent = WhisperTracing.traceparent(of: span.context)
            try await admit(entry, frame: frame, charging: limit, isMessage: isMessage, on: connection)
        }
    }

    /// Adds a checked frame to the router stream (``addToRouterStream(_:charging:isMessage:)``)
    /// and answers the socket when it was not added.
    private func admit(_ entry: RouterStream.Entry, frame: InboundFrame, charging limit: Limit, isMessage: Bool, on connection: ClientConnection) async throws {
        switch try await addToRouterStream(entry, charging: limit, isMessage: isMessage) {
        case .added:
            break
        case .limited(let retry):
            await refuse(over: limit, retryAfterMs: retry, requestId: frame.requestId, on: connection)
        case .busy:
            // Not the client's doing: answered, but not counted against the socket.
            await reply(error: .rateLimited, limits.busyRefusal, requestId: frame.requestId, on: connection)
        }
    }

    /// Adds an entry to the router stream, charging its identity's bucket for its kind,
    /// unless the routers are behind: then it is counted as a busy refusal (and, for a
    /// message, the stream is taken for full for a moment). For frames from a socket and
    /// for their HTTP twins alike; each answers the outcome its own way.
    func addToRouterStream(_ entry: RouterStream.Entry, charging limit: Limit, isMessage: Bool) async throws -> RouterStream.Entry.Admission {
        // Fetches finish work (they empty queues): they get in until twice the limit.
        let backlog = isMessage ? limits.routerBacklogMax : limits.routerBacklogMax * 2
        let admission = try await entry.add(charging: limit, rules: limits.rules, backlogLimit: backlog, on: environment.redis)
        if case .busy = admission {
            if isMessage { limits.busy.hold() }
            limits.busyRefusals.increment()
        }
        return admission
    }

    /// `send_message` served here (`SendDesk`): charged to the address (in memory) and
    /// the identity's bucket for messages (the one group copies are charged to as they
    /// enter the stream), then checked, stored and passed on without a router. What the
    /// router would refuse is answered the same way, and, as from a router, not counted
    /// against the socket; a frame the gateway kept waiting past `sendWaitMax` is refused
    /// as busy (a socket's own backlog is held back by TCP instead: `SocketInbox.nextTimed()`).
    func serveSend(_ message: SendMessage, whisperId: String, by sends: SendDesk, _ served: FrameRoute.Served) async throws {
        let requestId = served.frame.requestId, connection = served.connection, waitingSince = served.waitingSince
        // Far too large whatever else it holds (the stored payload carries the
        // ciphertext as it is): refused before any work, as on the router path.
        if message.ciphertext.utf8.count > Limits.MAX_STORED_MESSAGE_BYTES {
            await refuse(
                .invalidPayload, "the message is over \(Limits.MAX_STORED_MESSAGE_BYTES) bytes with all its fields", requestId: requestId,
                on: connection
            )
            return
        }
        if waitingSince > 0, sendWaitMax > .zero {
            let waited = NIODeadline.now().uptimeNanoseconds &- waitingSince
            if waited > UInt64(clamping: sendWaitMax.nanoseconds) {
                limits.busyRefusals.increment()
                await reply(error: .rateLimited, limits.busyRefusal, requestId: requestId, on: connection)
                return
            }
        }
        let bucket = RouterStream.bucket(.sendPerSender, whisperId, in: environment.redis.configuration.streamShards)
        if case .limited(let retry) = try await charge(.send, bucket: bucket, limit: .sendPerSender, on: connection) {
            await refuse(over: .sendPerSender, retryAfterMs: retry, requestId: requestId, on: connection)
            return
        }
        let receivedAt = Clock.millisecondsNow()
        do {
            guard WhisperTracing.isEnabled else {
                try await sends.send(message, requestId: requestId, sender: whisperId, receivedAt: receivedAt, on: connection)
                return
            }
            // A message's trace begins and, for a recipient on this instance, ends here.
            try await withSpan(ClientFrameType.sendMessage.rawValue, ofKind: .server) { span in
                span.attributes["whisper.frame.type"] = ClientFrameType.sendMessage.rawValue
                span.attributes["whisper.gateway.instance"] = instanceID
                span.attributes["whisper.message_id"] = message.messageId
                let outcome = try await sends.send(
                    message, requestId: requestId, sender: whisperId, receivedAt: receivedAt, on: connection,
                    traceparent: WhisperTracing.traceparent(of: span.context)
                )
                span.attributes["whisper.outcome"] = outcome.rawValue
            }
        } catch let refusal as WhisperError {
            sends.metrics.routed(.refused)
            await reply(error: refusal.code, refusal.message, requestId: requestId, on: connection)
            connection.logger.info("frame_refused", metadata: [
                "type": "send_message", "code": "\(refusal.code.rawValue)", "whisperId": "\(whisperId)",
            ])
        }
    }

    /// Takes a token of the socket's identity for `kind`: one leased earlier, or a new
    /// lease from the bucket in Redis (`TokenLease`). A busy socket's next lease is asked
    /// for ahead of need, beside the frame, not before it.
    private func charge(
        _ kind: TokenLease.Kind, bucket: String, limit: Limit, on connection: ClientConnection
    ) async throws -> RateLimiter.Decision {
        let now = NIODeadline.now().uptimeNanoseconds
        let leased = connection.spendLeased(kind, now: now, max: limits.leaseMax)
        if leased.spent {
            if let ahead = leased.ahead {
                let limiter = limits.limiter, rule = limits.rules[limit]
                Task {
                    let answer = try? await limiter.lease(bucket: bucket, rule: rule, wanted: ahead.size)
                    var granted: Int?
                    if case .granted(let count)? = answer { granted = count }
                    connection.leasedAhead(kind, granted: granted, generation: ahead.generation, now: NIODeadline.now().uptimeNanoseconds)
                }
            }
            return .allowed
        }
        let wanted = connection.leaseSize(kind, now: now, max: limits.leaseMax)
        switch try await limits.limiter.lease(bucket: bucket, rule: limits.rules[limit], wanted: wanted) {
        case .granted(let granted):
            connection.leased(kind, granted: granted, now: NIODeadline.now().uptimeNanoseconds)
            return .allowed
        case .limited(let retry):
            return .limited(retryAfterMs: retry)
        }
    }

    /// Receipts are served here (`ReceiptDesk`), limited like the routed frames: per
    /// address in memory, per identity through a lease of its bucket (`charge`). They
    /// never enter the router stream, so a busy stream does not hold them back (they
    /// empty queues).
    func serveReceipt(_ receipt: DeliveryReceipt, whisperId: String, _ served: FrameRoute.Served) async throws {
        let requestId = served.frame.requestId, connection = served.connection
        guard receipt.from == whisperId else {
            await refuse(.forbidden, "from must be the Whisper ID of this session", requestId: requestId, on: connection)
            return
        }
        if case .limited(let retry) = try await charge(
            .receipt, bucket: PendingQueue.receiptBucket(whisperId), limit: .receiptsPerIdentity, on: connection
        ) {
            await refuse(over: .receiptsPerIdentity, retryAfterMs: retry, requestId: requestId, on: connection)
            return
        }
        try await receipts.serve(receipt, from: whisperId)
    }

    /// A privileged frame may act only with a live session, and only for the identity
    /// the socket acts for. A socket's first valid session binds it (a reconnect).
    private func authorize(_ token: String, on connection: ClientConnection) async throws -> Bool {
        if connection.hasVerified(token), connection.whisperId != nil { return true }
        guard let record = try await sessions.lookup(token) else { return false }
        let (accepted, isNew) = connection.bind(to: record.whisperId)
        guard accepted else {
            connection.logger.info("session_for_other_identity")
            return false
        }
        // Bound first, checked second: a ban heard in between closes this socket
        // (`ControlChannel`), one heard before is seen here.
        if recentBans.contains(record.whisperId) {
            _ = connection.unbind()
            return false
        }
        if isNew {
            await claimPresence(record.whisperId, for: connection)
        }
        connection.rememberVerified(token)
        return true
    }

    /// After a registration on this socket: act for the new identity.
    private func rebind(_ connection: ClientConnection, to whisperId: String) async {
        if let previous = connection.unbind(), previous != whisperId {
            sends?.connections.releasedPresence(previous, by: connection)
            await watching.unsubscribeAll(previous, on: connection)
            if (try? await presence.clear(previous, ifOwnedBy: PresenceRecord(gateway: instanceID, connId: connection.id))) == true {
                await announce(previous, .offline, on: connection)
            }
        }
        _ = connection.bind(to: whisperId)
        await claimPresence(whisperId, for: connection)
    }

    /// Records this socket as the identity's live one. An older socket of the same
    /// session (a reconnect on a new network) is closed.
    private func claimPresence(_ whisperId: String, for connection: ClientConnection) async {
        let mine = PresenceRecord(gateway: instanceID, connId: connection.id)
        do {
            let previous = try await presence.set(whisperId, to: mine)
            // Known here at once for messages written while they are stored (`SendDesk`).
            if connection.whisperId == whisperId { sends?.connections.heldPresence(whisperId, by: connection) }
            if let previous {
                if previous != mine {
                    try await GatewayCommand(kind: .supersede, connId: previous.connId).publish(to: previous.gateway, on: environment.redis)
                }
            } else {
                await announce(whisperId, .online, on: connection)
            }
        } catch {
            connection.logger.warning("presence_update_failed", metadata: ["error": "\(error)"])
        }
        // A member connected: its push-to-talk channels have not lapsed.
        ptt.memberConnected(whisperId)
    }

    /// When the socket logs out or closes: it no longer stands for its identity, its
    /// presence subscriptions end, and if it was the identity's live socket, the
    /// identity's watchers are told it went offline.
    func release(_ connection: ClientConnection) async {
        guard let whisperId = connection.unbind() else { return }
        sends?.connections.releasedPresence(whisperId, by: connection)
        await watching.unsubscribeAll(whisperId, on: connection)
        if (try? await presence.clear(whisperId, ifOwnedBy: PresenceRecord(gateway: instanceID, connId: connection.id))) == true {
            await announce(whisperId, .offline, on: connection)
        }
    }

    private func announce(_ whisperId: String, _ status: PresenceStatus, on connection: ClientConnection) async {
        do {
            try await watching.announce(whisperId, status)
        } catch {
            connection.logger.warning("presence_announce_failed", metadata: ["error": "\(error)"])
        }
    }

    func context(of connection: ClientConnection) -> ConnectionContext {
        ConnectionContext(gateway: instanceID, connId: connection.id, remoteAddress: connection.remoteAddress, whisperId: connection.whisperId)
    }

    func reply(error code: ErrorCode, _ message: String, requestId: String?, on connection: ClientConnection) async {
        environment.metrics.recordError(code)
        connection.sendRaw(ServerFrameCodec.encodeError(code, message, requestId: requestId))
    }
}

/// The gateway's limits on frames: the configured rules, and the tables of per-address
/// buckets of the address-scoped ones (this instance's counts; the per-socket buckets
/// live on each socket).
struct FrameLimits: Sendable {
    let rules: LimitRules
    private let addressTables: [Limit: LocalBucketTable]
    let limiter: RateLimiter
    let routerBacklogMax: Int
    /// The most tokens one lease takes from an identity's bucket (`TokenLease`).
    let leaseMax: Int
    let busyRetryMs: Int
    /// What a busy refusal says.
    var busyRefusal: String { "the server is busy; retry in \(busyRetryMs) ms" }
    let busyRefusals: Counter
    let busy = BusyHold()

    init(settings: GatewaySettings, redis: RedisClient, metrics: ServiceMetrics) {
        rules = settings.limits
        addressTables = Dictionary(uniqueKeysWithValues: Limit.of(service: GatewaySettings.serviceName).filter { $0.scope == .address }.map {
            ($0, LocalBucketTable(rule: settings.limits[$0]))
        })
        limiter = RateLimiter(redis: redis)
        routerBacklogMax = settings.routerBacklogMax
        leaseMax = settings.leaseMax
        busyRetryMs = settings.busyRetryMs
        busyRefusals = metrics.counter("gateway_busy_refusals", help: "Frames refused with RATE_LIMITED \"busy\": the router stream's backlog was at its limit, or a message waited past GATEWAY_SEND_WAIT_MAX_MS.")
    }

    /// Takes a token of `address`'s bucket of `limit`, one of the gateway's
    /// address-scoped limits; any other limit has no table here and refuses.
    func take(_ limit: Limit, address: String) -> Bool {
        addressTables[limit]?.take(address) ?? false
    }

    /// Runs an attempt that names something the sender may only guess at (a join code):
    /// refused while the identity's or the address's bucket of misses is empty; charged
    /// to both only when `attempt` fails `NOT_FOUND`, so wrong guesses are bounded and
    /// right ones are not. `identityLimit` is identity-scoped, `addressLimit` one of the
    /// gateway's address-scoped limits.
    func guessing<T>(
        _ identityLimit: Limit, _ addressLimit: Limit, identity: String, address: String, _ attempt: () async throws -> T
    ) async throws -> T {
        if case .limited(let retry) = try await limiter.peek(identityLimit, key: identity, rules: rules) {
            throw identityLimit.refused(retryAfterMs: retry)
        }
        guard addressTables[addressLimit]?.hasToken(address) ?? false else { throw addressLimit.refused(retryAfterMs: nil) }
        do {
            return try await attempt()
        } catch let error as WhisperError where error.code == .notFound {
            _ = addressTables[addressLimit]?.take(address)
            _ = try await limiter.take(identityLimit, key: identity, rules: rules)
            throw error
        }
    }
}

/// Remembers for a moment that the router stream was full, so that the messages that
/// follow are refused in memory instead of each costing a script round trip. The
/// moment (25 ms) is short against the retry hint: the routers take a few hundred
/// entries off the backlog meanwhile.
final class BusyHold: Sendable {
    static let span: Int64 = 25
    private let until = Atomic<Int64>(0)

    func hold() {
        until.store(Clock.millisecondsNow() &+ Self.span, ordering: .relaxed)
    }

    func holds() -> Bool {
        Clock.millisecondsNow() < until.load(ordering: .relaxed)
    }
}
