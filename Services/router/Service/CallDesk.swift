import Foundation
import Logging
import Prometheus
import WhisperMessaging
import WhisperShared

/// Call signaling (docs/protocol.md section 7): each frame is checked like a message, then
/// against the call's state in Redis (`call:{callId}`, `line:{W}`, `calls:ringing`; docs/
/// architecture.md, "Calls"). Every step writes one hash slot and is idempotent, so an
/// entry handled twice (its router died) changes nothing twice.
struct CallDesk: Sendable {
    let redis: RedisClient
    let identities: IdentityCache
    /// Where a callee who was not on line is told about a missed call (the same
    /// per-identity frame store that keeps receipts and group events).
    let frames: OwedFrames
    let settings: CallSettings
    let metrics: CallMetrics
    let logger: Logger

    struct CallSettings: Sendable {
        var ringTimeout: Duration
        var answeredTTL: Duration
        /// How long an ended call's record stays, for repeated frames.
        var endedTTL: Duration = .seconds(600)
        var sweepInterval: Duration
        /// How long a router that claimed a due call has to end it before another may.
        var sweepLease: Duration = .seconds(30)
        /// New calls per caller and callee (`Limit.callsPerPair`), and to one callee from
        /// identities that are not its direct peers (`Limit.strangerCallsPerCallee`).
        var limits = LimitRules()
    }

    // MARK: - Frames from the parties

    /// `redelivery`: the stream entry is handled a second time (its router died), so a
    /// ringing call is rung again in case the first router died before it rang; a client
    /// that sends the same `call_initiate` again is only told the call is ringing.
    func initiate(_ signal: CallInitiate, entry: RouterStream.Entry, redelivery: Bool = false) async throws -> RoutingOutcome {
        try await verify(signal, entry: entry)
        guard signal.to != signal.from else { throw WhisperError(.invalidPayload, "to must be another identity than from") }
        guard let callee = try await identities.lookup(signal.to) else { throw WhisperError(.notFound, "no such callee") }
        guard !callee.banned else { throw WhisperError(.forbidden, "the callee is banned") }
        let callId = signal.callId
        let fromPeer = try await areDirectPeers(signal.from, signal.to)
        // Every attempt is charged before anything is stored, a repeat of a call too: per
        // pair, and strangers' calls per callee, so nobody can ring, wake (VoIP push) or
        // fill another's store of missed calls without bound. (An entry handled again
        // after its router died is not an attempt of the caller's.)
        if !redelivery {
            let limiter = RateLimiter(redis: redis), pair = Limit.callsPerPair
            // The caller's bucket for this callee.
            if case .limited(let retry) = try await limiter.take(pair.pairAction(signal.to), key: signal.from, rule: settings.limits[pair]) {
                throw pair.refused(retryAfterMs: retry)
            }
            if !fromPeer { try await limiter.charge(.strangerCallsPerCallee, key: signal.to, rules: settings.limits) }
        }
        let offer = ServerFrameCodec.encode(CallIncoming(signal))
        let socket = PresenceRecord(gateway: entry.gateway, connId: entry.connId)
        switch try await open(signal, offer: offer, callerSocket: socket) {
        case .conflict:
            throw WhisperError(.invalidPayload, "callId is already used by another call")
        case .existing(.answered):
            // A repeat of a call that has moved on: nothing to do again.
            throw WhisperError(.invalidPayload, "the call is already answered")
        case .existing(.ended):
            throw WhisperError(.notFound, "the call has ended")
        case .existing(.ringing) where !redelivery:
            // The caller sent it again (a retry after a lost answer): it rings already, so
            // the callee is neither rung nor woken again; the caller is told it rings.
            let record = try await load(callId)
            try await tellCaller(CallRinging(callId: callId, to: signal.to, timestamp: Clock.millisecondsNow(), via: record?.reached == true ? .socket : .push), entry)
            return .call
        case .existing, .opened:
            break
        }
        // The callee's line first: a busy callee must not cost the caller their other call.
        // A call from a direct peer does not wait behind a stranger's call that is only
        // ringing: that one ends (busy), so a stranger cannot hold someone's line.
        var claim = try await claimLine(of: signal.to, for: callId, party: .callee)
        if case .held(let other) = claim, fromPeer, let held = try await load(other), held.state == .ringing,
           try await !areDirectPeers(held.caller, signal.to) {
            logger.info("call_yielded", metadata: ["callId": "\(other)", "to": "\(callId)"])
            try await finish(other, held, by: .server, reason: ServerCallEndReason.busy.rawValue, onlyIfRinging: true)
            claim = try await claimLine(of: signal.to, for: callId, party: .callee)
        }
        if case .held(let other) = claim {
            logger.info("call_busy", metadata: ["callId": "\(callId)", "heldBy": "\(other)"])
            let record = CallRecord(caller: signal.from, callee: signal.to, state: .ringing)
            try await finish(callId, record, by: .server, reason: ServerCallEndReason.busy.rawValue, replyingTo: entry)
            return .call
        }
        _ = try await claimLine(of: signal.from, for: callId, party: .caller)

        let reached = try await deliver(offer, to: signal.to) != nil
        if reached {
            _ = try await redis.send("HSET", RedisKeys.call(callId), "reached", "1")
        } else {
            try await redis.send(PushStream.job(to: signal.to, kind: .call, id: callId, at: Clock.millisecondsNow(), in: redis.configuration.streamShards))
        }
        let deadline = Clock.millisecondsNow() &+ Int64(settings.ringTimeout.milliseconds)
        _ = try await redis.send("ZADD", RedisKeys.ringingCalls, "NX", deadline, callId)
        try await tellCaller(CallRinging(callId: callId, to: signal.to, timestamp: Clock.millisecondsNow(), via: reached ? .socket : .push), entry)
        metrics.rang(afterMs: Clock.elapsedMilliseconds(since: entry.receivedAt))
        logger.info("call_ringing", metadata: [
            "callId": "\(callId)", "whisperId": "\(signal.from)", "via": "\(reached ? "socket" : "push")",
        ])
        return .call
    }

    /// `call_ringing` to the caller's socket, as the answer to its `call_initiate`.
    private func tellCaller(_ ringing: CallRinging, _ entry: RouterStream.Entry) async throws {
        try await GatewayCommand(kind: .deliver, connId: entry.connId, frame: ServerFrameCodec.encode(ringing, requestId: entry.requestId))
            .publish(to: entry.gateway, on: redis)
    }

    func answer(_ signal: CallAnswer, entry: RouterStream.Entry) async throws -> RoutingOutcome {
        try await verify(signal, entry: entry)
        let record = try await party(of: signal)
        guard signal.from == record.callee else { throw WhisperError(.forbidden, "only the callee answers a call") }
        let reply = try await redis.evaluate(
            Self.transitionScript, keys: [RedisKeys.call(signal.callId)],
            arguments: [
                "answer", Clock.millisecondsNow(), "callee", "", Int(settings.answeredTTL.milliseconds),
                PresenceRecord(gateway: entry.gateway, connId: entry.connId).encoded,
            ]
        )
        switch Transition(reply) {
        case .missing, .ended:
            throw WhisperError(.notFound, "the call has ended")
        case .unchanged:
            return .ignored
        case .done(_, let created, _):
            _ = try await redis.pipeline([
                RedisCommand("ZREM", [RedisKeys.ringingCalls, signal.callId]),
                RedisCommand("DEL", [RedisKeys.callCandidates(signal.callId)]),
                RedisCommand("PEXPIRE", [RedisKeys.line(record.caller), Int(settings.answeredTTL.milliseconds)]),
                RedisCommand("PEXPIRE", [RedisKeys.line(record.callee), Int(settings.answeredTTL.milliseconds)]),
            ])
            _ = try await deliver(ServerFrameCodec.encode(CallAnswered(signal)), to: record.caller)
            metrics.setup(.answered)
            metrics.answered(afterMs: Clock.elapsedMilliseconds(since: created))
            logger.info("call_answered", metadata: ["callId": "\(signal.callId)", "whisperId": "\(signal.from)"])
            return .call
        }
    }

    func candidate(_ signal: CallIceCandidate, entry: RouterStream.Entry) async throws -> RoutingOutcome {
        try await verify(signal, entry: entry)
        let record = try await party(of: signal)
        guard record.state != .ended else { throw WhisperError(.notFound, "the call has ended") }
        let frame = ServerFrameCodec.encode(CallRemoteCandidate(signal))
        if record.state == .ringing, signal.from == record.caller {
            // Kept for a callee who fetches the call after a push.
            _ = try await redis.evaluate(
                Self.bufferScript, keys: [RedisKeys.callCandidates(signal.callId), RedisKeys.call(signal.callId)],
                arguments: [frame, Limits.MAX_BUFFERED_CANDIDATES]
            )
        } else if record.state == .answered {
            _ = try await redis.pipeline([RedisKeys.call(signal.callId), RedisKeys.line(signal.from), RedisKeys.line(signal.to)].map {
                RedisCommand("PEXPIRE", [$0, Int(settings.answeredTTL.milliseconds)])
            })
        }
        _ = try await deliver(frame, to: signal.to)
        return .call
    }

    func end(_ signal: CallEnd, entry: RouterStream.Entry) async throws -> RoutingOutcome {
        try await verify(signal, entry: entry)
        let record = try await party(of: signal)
        let by: Ender = signal.from == record.caller ? .caller : .callee
        let ended = try await finish(
            signal.callId, record, by: by, reason: (signal.reason ?? .hangup).rawValue, peerFrame: CallEnded(signal)
        )
        return ended ? .call : .ignored
    }

    // MARK: - After a push

    /// A callee whose call rings hears of it on its next `fetch_pending` (the wake-up
    /// after a VoIP push): the offer, then the candidates the caller has sent so far.
    func handOver(to whisperId: String, gateway: String, connId: String) async throws {
        guard let callId = try await redis.send("GET", RedisKeys.line(whisperId)).string else { return }
        let replies = try await redis.pipeline([
            RedisCommand("HMGET", [RedisKeys.call(callId), "state", "callee", "offer"]),
            RedisCommand("LRANGE", [RedisKeys.callCandidates(callId), 0, -1]),
        ])
        guard let fields = replies.first?.array, fields.count == 3, fields[0].string == CallState.ringing.rawValue,
              fields[1].string == whisperId, let offer = fields[2].bytes else { return }
        let frames = [offer] + (replies.last?.array ?? []).compactMap(\.bytes)
        _ = try await redis.pipeline(
            frames.map { GatewayCommand(kind: .deliver, connId: connId, frame: $0).publishing(to: gateway) }
                + [RedisCommand("HSET", [RedisKeys.call(callId), "reached", "1"])]
        )
        logger.info("call_handed_over", metadata: ["callId": "\(callId)", "whisperId": "\(whisperId)"])
    }

    // MARK: - Ring timeout

    /// Claims the due calls (pushing each one's deadline a lease ahead, so that a router
    /// dying here leaves it to another) and ends those still ringing.
    func sweepOnce() async throws {
        let now = Clock.millisecondsNow()
        let reply = try await redis.evaluate(
            Self.claimDueScript, keys: [RedisKeys.ringingCalls],
            arguments: [now, now &+ Int64(settings.sweepLease.milliseconds), 100]
        )
        for callId in (reply.array ?? []).compactMap(\.string) {
            if let record = try await load(callId), record.state == .ringing {
                let reason: ServerCallEndReason = record.reached ? .timeout : .unavailable
                try await finish(callId, record, by: .server, reason: reason.rawValue, onlyIfRinging: true)
            }
            _ = try await redis.send("ZREM", RedisKeys.ringingCalls, callId)
        }
    }

    // MARK: - Steps

    /// Session identity, timestamp window and signature: the rules of every signed frame
    /// (`MessageChecks`), with the frame's own type in the canonical bytes.
    private func verify<Marker>(_ signal: CallSignal<Marker>, entry: RouterStream.Entry) async throws {
        try MessageChecks.checkAuthor(signal.from, session: entry.whisperId)
        try MessageChecks.checkTimestamp(signal.timestamp, now: Clock.millisecondsNow())
        try await MessageChecks(identities: identities).verifySignature(
            from: signal.from, sig: signal.sig,
            over: CanonicalSigning.bytes(
                messageType: Marker.frameType.rawValue, messageId: signal.callId, from: signal.from, toOrGroupId: signal.to,
                timestamp: signal.timestamp, nonce: signal.nonce, ciphertext: signal.ciphertext
            )
        )
    }

    /// Whether the two identities each sent the other a message lately (`Peers.exchanged`).
    private func areDirectPeers(_ one: String, _ other: String) async throws -> Bool {
        try await Peers.exchanged(one, with: [other], on: redis).first ?? false
    }

    /// The call, when `from` and `to` are its two parties; anyone else is refused and
    /// nothing is passed on.
    private func party<Marker>(of signal: CallSignal<Marker>) async throws -> CallRecord {
        guard let record = try await load(signal.callId) else { throw WhisperError(.notFound, "no such call") }
        let parties = [record.caller, record.callee]
        guard signal.from != signal.to, parties.contains(signal.from), parties.contains(signal.to) else {
            throw WhisperError(.forbidden, "only the two parties of a call may signal on it")
        }
        return record
    }

    enum Opened: Equatable {
        case opened
        case existing(CallState)
        case conflict
    }

    private func open(_ signal: CallInitiate, offer: [UInt8], callerSocket: PresenceRecord) async throws -> Opened {
        let ttl = settings.ringTimeout + .seconds(60)
        let reply = try await redis.evaluate(
            Self.openScript, keys: [RedisKeys.call(signal.callId)],
            arguments: [
                signal.from, signal.to, signal.media?.rawValue ?? "", offer, Clock.millisecondsNow(), Int(ttl.milliseconds), callerSocket.encoded,
            ]
        )
        guard let parts = reply.array, let outcome = parts.first?.string else { throw RedisError.unexpectedReply("call open") }
        switch outcome {
        case "opened": return .opened
        case "conflict": return .conflict
        default: return .existing(parts.dropFirst().first?.string.flatMap(CallState.init(rawValue:)) ?? .ended)
        }
    }

    enum Party { case caller, callee }

    enum LineClaim: Equatable {
        case claimed
        /// The callee is in another live call.
        case held(String)
    }

    /// Puts the call on `whisperId`'s line. A line held by a call that is over (or whose
    /// socket has left it) is taken over; a live one makes a callee busy, and is ended
    /// (`replaced`) for a caller starting a new call.
    private func claimLine(of whisperId: String, for callId: String, party: Party) async throws -> LineClaim {
        let ttl = Int((settings.ringTimeout + .seconds(60)).milliseconds)
        var replacing = ""
        for _ in 0..<3 {
            let reply = try await redis.evaluate(Self.claimLineScript, keys: [RedisKeys.line(whisperId)], arguments: [callId, ttl, replacing])
            guard let held = reply.string, !held.isEmpty else { return .claimed }
            if let other = try await load(held), try await isLive(other, for: whisperId) {
                if party == .callee { return .held(held) }
                try await finish(held, other, by: .server, reason: ServerCallEndReason.replaced.rawValue)
            }
            replacing = held
        }
        throw WhisperError(.internalError, "the line kept changing; try again")
    }

    /// A ringing call is live; an answered one while the party's socket that took part
    /// in it is still their live socket (an app that died mid-call leaves no busy line).
    private func isLive(_ record: CallRecord, for whisperId: String) async throws -> Bool {
        switch record.state {
        case .ended: return false
        case .ringing: return true
        case .answered:
            let socket = whisperId == record.caller ? record.callerSocket : record.calleeSocket
            guard let socket else { return false }
            let live = try await PresenceStore(redis: redis).lookup(whisperId)
            return live == socket
        }
    }

    enum Ender: String { case caller, callee, server }

    /// Ends a ringing or answered call once: the state, the lines, the ring deadline,
    /// then both parties are told (the other party with the peer's own frame, or both
    /// with the server's). A callee who never answered finds it stored as a missed call
    /// if not on line. False when the call was already over.
    @discardableResult
    private func finish(
        _ callId: String, _ record: CallRecord, by ender: Ender, reason: String, peerFrame: CallEnded? = nil,
        replyingTo entry: RouterStream.Entry? = nil, onlyIfRinging: Bool = false
    ) async throws -> Bool {
        let now = Clock.millisecondsNow()
        let reply = try await redis.evaluate(
            Self.transitionScript, keys: [RedisKeys.call(callId)],
            arguments: [onlyIfRinging ? "expire" : "end", now, ender.rawValue, reason, Int(settings.endedTTL.milliseconds), ""]
        )
        let previous: CallState
        switch Transition(reply) {
        case .missing, .ended, .unchanged:
            return false
        case .done(let state, _, _):
            previous = state
        }
        for party in [record.caller, record.callee] {
            _ = try await redis.evaluate(RedisScript.deleteIfEquals, keys: [RedisKeys.line(party)], arguments: [callId])
        }
        _ = try await redis.pipeline([
            RedisCommand("ZREM", [RedisKeys.ringingCalls, callId]),
            RedisCommand("DEL", [RedisKeys.callCandidates(callId)]),
        ])
        // Each party is told once; a party who did not end it hears why.
        var notices: [(to: String, frame: CallEnded)] = []
        if let peerFrame {
            notices.append((peerFrame.to, peerFrame))
        } else if ender == .server, let reasonValue = ServerCallEndReason(rawValue: reason) {
            for (party, peer) in [(record.caller, record.callee), (record.callee, record.caller)] {
                notices.append((party, CallEnded(callId: callId, peer: peer, party: party, reason: reasonValue, at: now)))
            }
        }
        for (party, frame) in notices {
            if party == record.caller, let entry {
                // The caller's own call_initiate gets its answer (busy) on its socket.
                try await GatewayCommand(kind: .deliver, connId: entry.connId, frame: ServerFrameCodec.encode(frame, requestId: entry.requestId))
                    .publish(to: entry.gateway, on: redis)
            } else if party == record.callee, previous == .ringing {
                // A missed call: stored, and handed over now if the callee is on line.
                try await frames.keep(ServerFrameCodec.encode(frame), for: party, handingTo: try await PresenceStore(redis: redis).lookup(party))
            } else {
                _ = try await deliver(ServerFrameCodec.encode(frame), to: party)
            }
        }
        if previous == .ringing {
            metrics.setup(CallMetrics.outcome(endedBy: ender, reason: reason))
        }
        logger.info("call_ended", metadata: ["callId": "\(callId)", "by": "\(ender.rawValue)", "reason": "\(reason)", "was": "\(previous.rawValue)"])
        return true
    }

    /// Writes `frame` to the identity's live socket; the socket it went to, or nil when
    /// the identity has none (or its gateway is gone). The presence record is read and
    /// the command published from here, in Swift: their formats have one home each
    /// (`PresenceRecord`, `GatewayCommand`), and under sharded pub/sub the gateway's
    /// channel is in another slot than the identity's keys.
    @discardableResult
    private func deliver(_ frame: [UInt8], to whisperId: String) async throws -> PresenceRecord? {
        guard let socket = try await PresenceStore(redis: redis).lookup(whisperId) else { return nil }
        let receivers = try await GatewayCommand(kind: .deliver, connId: socket.connId, frame: frame).publish(to: socket.gateway, on: redis)
        return receivers > 0 ? socket : nil
    }

    private func load(_ callId: String) async throws -> CallRecord? {
        let reply = try await redis.send(RedisCommand("HMGET", [
            RedisKeys.call(callId), "caller", "callee", "state", "reached", "callerSocket", "calleeSocket",
        ]))
        guard let fields = reply.array, fields.count == 6, let caller = fields[0].string, let callee = fields[1].string,
              let state = fields[2].string.flatMap(CallState.init(rawValue:)) else { return nil }
        return CallRecord(
            caller: caller, callee: callee, state: state, reached: fields[3].string == "1",
            callerSocket: fields[4].string.flatMap(PresenceRecord.init(encoded:)),
            calleeSocket: fields[5].string.flatMap(PresenceRecord.init(encoded:))
        )
    }
}
