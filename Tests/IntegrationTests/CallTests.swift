import Foundation
import Testing
import WhisperClient
import WhisperShared

/// Call signaling across two gateways and two routers (docs/protocol.md section 7).
@Suite struct CallTests {
    static func signal<Marker: CallSignalFrame>(
        _ kind: CallSignal<Marker>.Type, _ text: String, callId: String, from sender: TestUser, to peer: TestUser,
        media: CallMedia? = nil, reason: CallEndReason? = nil
    ) -> CallSignal<Marker> {
        CallCrypto.make(
            kind, Array(text.utf8), callId: callId, from: (sender.whisperId, sender.keys), to: peer.peerKeys, sessionToken: sender.token,
            media: media, reason: reason
        )
    }

    static func opened<Marker: CallDeliveryFrame>(
        _ frame: ServerFrame, as type: CallSignalDelivery<Marker>.Type, signedAs kind: ClientFrameType, by recipient: TestUser, from peer: TestUser
    ) throws -> String {
        let payload = try #require(frame.payload(as: type))
        return String(decoding: try CallCrypto.open(payload, signedAs: kind, by: (recipient.whisperId, recipient.keys), peer: peer.peerKeys), as: UTF8.self)
    }

    static func callState(_ stack: MessagingStack, _ callId: String) async throws -> String? {
        try await stack.withRedis { try await $0.send("HGET", RedisKeys.call(callId), "state").string }
    }

    @Test func initiateRingAnswerCandidatesBothWaysAndEnd() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let callId = RandomID.uuid()

            let offer = Self.signal(CallInitiate.self, "offer-sdp", callId: callId, from: alice, to: bob, media: .video)
            let start = try await alice.connection.startCall(offer)
            guard case .ringing(let ringing) = start else { Issue.record("not ringing: \(start)"); return }
            #expect(ringing.callId == callId && ringing.to == bob.whisperId && ringing.via == .socket)
            // Sent again (a lost answer): ringing again, still one call.
            guard case .ringing = try await alice.connection.startCall(offer) else { Issue.record("a repeat did not ring"); return }

            let incoming = try #require(try await bob.events(.callIncoming).first)
            #expect(try Self.opened(incoming, as: CallIncoming.self, signedAs: .callInitiate, by: bob, from: alice) == "offer-sdp")
            #expect(incoming.payload(as: CallIncoming.self)?.media == .video)
            #expect(try await Self.callState(stack, callId) == "ringing")

            try await bob.connection.signal(Self.signal(CallAnswer.self, "answer-sdp", callId: callId, from: bob, to: alice))
            let answered = try #require(try await alice.events(.callAnswered).first)
            #expect(try Self.opened(answered, as: CallAnswered.self, signedAs: .callAnswer, by: alice, from: bob) == "answer-sdp")
            #expect(try await Self.callState(stack, callId) == "answered")

            try await alice.connection.signal(Self.signal(CallIceCandidate.self, "candidate-a1", callId: callId, from: alice, to: bob))
            try await bob.connection.signal(Self.signal(CallIceCandidate.self, "candidate-b1", callId: callId, from: bob, to: alice))
            let atBob = try #require(try await bob.events(.callRemoteCandidate).first)
            let atAlice = try #require(try await alice.events(.callRemoteCandidate).first)
            #expect(try Self.opened(atBob, as: CallRemoteCandidate.self, signedAs: .callIceCandidate, by: bob, from: alice) == "candidate-a1")
            #expect(try Self.opened(atAlice, as: CallRemoteCandidate.self, signedAs: .callIceCandidate, by: alice, from: bob) == "candidate-b1")

            try await alice.connection.signal(Self.signal(CallEnd.self, "", callId: callId, from: alice, to: bob, reason: .hangup))
            let ended = try #require(try await bob.events(.callEnded).first?.payload(as: CallEnded.self))
            #expect(ended.origin == .peer && ended.reason == "hangup" && ended.from == alice.whisperId)
            #expect(try CallCrypto.open(ended, by: (bob.whisperId, bob.keys), peer: alice.peerKeys) == [])
            #expect(try await Self.callState(stack, callId) == "ended")
            await #expect(throws: WhisperClientError.refused(.notFound, "the call has ended")) { _ = try await alice.connection.startCall(offer) }
            let lines = try await stack.withRedis { try await $0.send("EXISTS", RedisKeys.line(alice.whisperId), RedisKeys.line(bob.whisperId)).int }
            #expect(lines == 0)
            let metrics = try await stack.metricsText(of: stack.routers)
            #expect(metrics.contains(#"whisper_call_setups_total{outcome="answered"} 1"#))
            #expect(metrics.contains("whisper_call_time_to_ring_seconds_count"))
            #expect(metrics.contains("whisper_call_time_to_answer_seconds_count"))
        }
    }

    /// An offline callee: a VoIP push job goes out, the caller hears `ringing` (via push),
    /// and when the ring timeout passes both are told `unavailable`; the callee finds it
    /// as a missed call when it comes back.
    @Test func offlineCalleeGetsAVoIPPushAndTheCallerATimeoutEnd() async throws {
        try await MessagingStack.start(router: { $0.callRingTimeout = .seconds(1); $0.callSweepInterval = .milliseconds(100) }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.offlineUser(on: 1)
            let callId = RandomID.uuid()

            let start = try await alice.connection.startCall(Self.signal(CallInitiate.self, "offer", callId: callId, from: alice, to: bob))
            guard case .ringing(let ringing) = start else { Issue.record("not ringing: \(start)"); return }
            #expect(ringing.via == .push)
            let jobs = try await stack.pushJobs()
            #expect(jobs.contains { $0["kind"] == "call" && $0["id"] == callId && $0["to"] == bob.whisperId })
            // A call is never a message: nothing waits in the pending queue.
            #expect(try await stack.pendingDepth(bob.whisperId) == 0)

            let ended = try #require(try await alice.events(.callEnded).first?.payload(as: CallEnded.self))
            #expect(ended.origin == .server && ended.reason == ServerCallEndReason.unavailable.rawValue)
            #expect(ended.callId == callId && ended.from == bob.whisperId && ended.to == alice.whisperId && ended.sig == nil)
            #expect(try await Self.callState(stack, callId) == "ended")

            // Back on line: the missed call, not the offer.
            let back = try await stack.reconnect(bob, on: 0)
            _ = try await back.connection.fetchPending()
            let missed = try #require(try await back.events(.callEnded).first?.payload(as: CallEnded.self))
            #expect(missed.callId == callId && missed.from == alice.whisperId && missed.reason == "unavailable")
            #expect(await back.events.all(.callIncoming).isEmpty)
            let metrics = try await stack.metricsText(of: stack.routers)
            #expect(metrics.contains(#"whisper_call_setups_total{outcome="unavailable"} 1"#))
        }
    }

    /// Woken by the push in time: the fetch that follows hands over the offer and the
    /// caller's candidates so far; the answer reaches the caller.
    @Test func calleeWokenByPushFetchesTheOfferAndCandidatesThenAnswers() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.offlineUser(on: 1)
            let callId = RandomID.uuid()

            _ = try await alice.connection.startCall(Self.signal(CallInitiate.self, "offer", callId: callId, from: alice, to: bob))
            for index in 0..<3 {
                try await alice.connection.signal(Self.signal(CallIceCandidate.self, "early-\(index)", callId: callId, from: alice, to: bob))
            }
            try await stack.withRedis { redis in
                try await waitUntil { try await redis.send("LLEN", RedisKeys.callCandidates(callId)).int == 3 }
            }

            let back = try await stack.reconnect(bob, on: 1)
            _ = try await back.connection.fetchPending()
            let incoming = try #require(try await back.events(.callIncoming).first)
            #expect(try Self.opened(incoming, as: CallIncoming.self, signedAs: .callInitiate, by: bob, from: alice) == "offer")
            let candidates = try await back.events(.callRemoteCandidate, count: 3)
            // Candidates carry no order (ICE gathers them in any); two routers may take them in turn.
            #expect(try Set(candidates.map { try Self.opened($0, as: CallRemoteCandidate.self, signedAs: .callIceCandidate, by: bob, from: alice) })
                == ["early-0", "early-1", "early-2"])

            try await back.connection.signal(Self.signal(CallAnswer.self, "answer", callId: callId, from: bob, to: alice))
            _ = try await alice.events(.callAnswered)
            #expect(try await Self.callState(stack, callId) == "answered")
        }
    }

    @Test func unansweredCallTimesOutForBothAndABusyCalleeEndsTheSecondCall() async throws {
        try await MessagingStack.start(router: { $0.callRingTimeout = .seconds(1); $0.callSweepInterval = .milliseconds(100) }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let carol = try await stack.user(on: 0)

            // Rings on bob's socket, nobody answers: `timeout` to both.
            let unanswered = RandomID.uuid()
            _ = try await alice.connection.startCall(Self.signal(CallInitiate.self, "offer", callId: unanswered, from: alice, to: bob))
            _ = try await bob.events(.callIncoming)
            let toAlice = try #require(try await alice.events(.callEnded).first?.payload(as: CallEnded.self))
            let toBob = try #require(try await bob.events(.callEnded).first?.payload(as: CallEnded.self))
            #expect(toAlice.reason == "timeout" && toAlice.origin == .server && toAlice.from == bob.whisperId)
            #expect(toBob.reason == "timeout" && toBob.origin == .server && toBob.from == alice.whisperId)

            // Alice and bob in a call; carol calling bob gets `busy` at once, bob a missed call.
            let first = RandomID.uuid()
            _ = try await alice.connection.startCall(Self.signal(CallInitiate.self, "offer", callId: first, from: alice, to: bob))
            try await bob.connection.signal(Self.signal(CallAnswer.self, "answer", callId: first, from: bob, to: alice))
            _ = try await alice.events(.callAnswered)
            let second = RandomID.uuid()
            let start = try await carol.connection.startCall(Self.signal(CallInitiate.self, "offer", callId: second, from: carol, to: bob))
            guard case .ended(let busy) = start else { Issue.record("not ended: \(start)"); return }
            #expect(busy.reason == "busy" && busy.origin == .server && busy.callId == second)
            let missed = try await bob.events(.callEnded, count: 2).compactMap { $0.payload(as: CallEnded.self) }.filter { $0.callId == second }
            #expect(missed.first?.reason == "busy" && missed.first?.from == carol.whisperId)
            #expect(await bob.events.all(.callIncoming).filter { $0.payload(as: CallIncoming.self)?.callId == second }.isEmpty)
            // The first call goes on.
            #expect(try await Self.callState(stack, first) == "answered")
            let metrics = try await stack.metricsText(of: stack.routers)
            #expect(metrics.contains(#"whisper_call_setups_total{outcome="timeout"} 1"#))
            #expect(metrics.contains(#"whisper_call_setups_total{outcome="busy"} 1"#))
        }
    }

    /// Unsigned or wrongly signed frames are refused; a third user can neither inject
    /// candidates into nor end someone else's call, and nothing of theirs is passed on.
    @Test func badSignaturesAndThirdPartiesAreRefused() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let mallory = try await stack.user(on: 0)
            let callId = RandomID.uuid()

            // Signed by someone else's key.
            var forged = Self.signal(CallInitiate.self, "offer", callId: callId, from: alice, to: bob)
            forged.sig = Self.signal(CallInitiate.self, "offer", callId: callId, from: mallory, to: bob).sig
            await #expect(throws: WhisperClientError.refused(.authFailed, "sig does not verify with the sender's signing key")) {
                _ = try await alice.connection.startCall(forged)
            }
            // Not signed at all (an empty signature is refused by the frame check).
            var unsigned = Self.signal(CallInitiate.self, "offer", callId: callId, from: alice, to: bob)
            unsigned.sig = ""
            do {
                _ = try await alice.connection.startCall(unsigned)
                Issue.record("an unsigned call_initiate was accepted")
            } catch WhisperClientError.refused(let code, _) {
                #expect(code == .invalidPayload)
            }
            // Signed over other bytes (the ciphertext changed after signing).
            var altered = Self.signal(CallInitiate.self, "offer", callId: callId, from: alice, to: bob)
            altered.ciphertext = Self.signal(CallInitiate.self, "other", callId: callId, from: alice, to: bob).ciphertext
            await #expect(throws: WhisperClientError.self) { _ = try await alice.connection.startCall(altered) }
            #expect(try await Self.callState(stack, callId) == nil)
            #expect(await bob.events.all(.callIncoming).isEmpty)

            _ = try await alice.connection.startCall(Self.signal(CallInitiate.self, "offer", callId: callId, from: alice, to: bob))
            _ = try await bob.events(.callIncoming)
            try await bob.connection.signal(Self.signal(CallAnswer.self, "answer", callId: callId, from: bob, to: alice))
            _ = try await alice.events(.callAnswered)

            // Mallory, properly signed as herself, on their call: refused, nothing passed on.
            try await mallory.connection.signal(Self.signal(CallIceCandidate.self, "injected", callId: callId, from: mallory, to: bob))
            try await mallory.connection.signal(Self.signal(CallEnd.self, "", callId: callId, from: mallory, to: alice))
            // Mallory claiming to be alice (on her own session, signed with her own key).
            try await mallory.connection.signal(CallCrypto.make(
                CallIceCandidate.self, Array("spoofed".utf8), callId: callId, from: (alice.whisperId, mallory.keys), to: bob.peerKeys,
                sessionToken: mallory.token
            ))
            let refusals = try await mallory.events(.error, count: 3).compactMap { $0.payload(as: ErrorPayload.self) }
            #expect(refusals.map(\.code) == [.forbidden, .forbidden, .forbidden], "\(refusals)")
            #expect(refusals.filter { $0.message.contains("only the two parties") }.count == 2)
            // A real candidate after hers arrives, and is the only one.
            try await alice.connection.signal(Self.signal(CallIceCandidate.self, "real", callId: callId, from: alice, to: bob))
            let atBob = try await bob.events(.callRemoteCandidate)
            #expect(atBob.count == 1)
            #expect(try Self.opened(atBob[0], as: CallRemoteCandidate.self, signedAs: .callIceCandidate, by: bob, from: alice) == "real")
            #expect(await alice.events.all(.callEnded).isEmpty)
            #expect(await bob.events.all(.callEnded).isEmpty)
            #expect(try await Self.callState(stack, callId) == "answered")

            // The callee answering again, or the caller answering: not the caller's to do.
            try await alice.connection.signal(Self.signal(CallAnswer.self, "answer", callId: callId, from: alice, to: bob))
            let refused = try await alice.events(.error).compactMap { $0.payload(as: ErrorPayload.self) }
            #expect(refused.first?.code == .forbidden)
        }
    }

    /// The callee declining (`rejected`), and a caller who starts another call while the
    /// first still rings: the first ends `replaced` for both of its parties.
    @Test func declinedAndReplacedCallsEndForBothParties() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let carol = try await stack.user(on: 1)

            let declined = RandomID.uuid()
            _ = try await alice.connection.startCall(Self.signal(CallInitiate.self, "offer", callId: declined, from: alice, to: bob))
            _ = try await bob.events(.callIncoming)
            try await bob.connection.signal(Self.signal(CallEnd.self, "", callId: declined, from: bob, to: alice, reason: .declined))
            let refusal = try #require(try await alice.events(.callEnded).first?.payload(as: CallEnded.self))
            #expect(refusal.origin == .peer && refusal.reason == "declined" && refusal.callId == declined)

            let first = RandomID.uuid()
            _ = try await alice.connection.startCall(Self.signal(CallInitiate.self, "offer", callId: first, from: alice, to: bob))
            let second = RandomID.uuid()
            let start = try await alice.connection.startCall(Self.signal(CallInitiate.self, "offer", callId: second, from: alice, to: carol))
            guard case .ringing = start else { Issue.record("not ringing: \(start)"); return }
            let atBob = try await bob.events(.callEnded).compactMap { $0.payload(as: CallEnded.self) }.filter { $0.callId == first }
            #expect(atBob.first?.reason == "replaced" && atBob.first?.origin == .server)
            let atAlice = try await alice.events(.callEnded, count: 2).compactMap { $0.payload(as: CallEnded.self) }.filter { $0.callId == first }
            #expect(atAlice.first?.reason == "replaced")
            _ = try await carol.events(.callIncoming)
            #expect(try await Self.callState(stack, first) == "ended")
            #expect(try await Self.callState(stack, second) == "ringing")

            // A signal past the size bound is refused at the gateway.
            let big = Self.signal(CallIceCandidate.self, String(repeating: "c", count: Limits.MAX_CALL_SIGNAL_BYTES + 1), callId: second, from: alice, to: carol)
            try await alice.connection.signal(big)
            let refused = try await alice.events(.error).compactMap { $0.payload(as: ErrorPayload.self) }
            #expect(refused.first?.code == .invalidPayload)
            #expect(await carol.events.all(.callRemoteCandidate).isEmpty)

            let metrics = try await stack.metricsText(of: stack.routers)
            #expect(metrics.contains(#"whisper_call_setups_total{outcome="rejected"} 1"#))
            #expect(metrics.contains(#"whisper_call_setups_total{outcome="cancelled"} 1"#))
        }
    }

    /// Item 4 of issue 34: one caller rang one callee twelve times in seconds, and many
    /// strangers together could ring someone without end. New calls are limited per pair
    /// and, from identities that are not the callee's direct peers, per callee; a repeat
    /// of a call already made is not charged.
    @Test func callsToOneCalleeAreLimitedPerPairAndFromStrangersTogether() async throws {
        try await MessagingStack.start(router: { $0.limits[.strangerCallsPerCallee] = RateLimitRule(capacity: 7, period: .seconds(3_600)) }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let dave = try await stack.user(on: 0)
            @Sendable func call(_ caller: TestUser) async throws -> ErrorCode? {
                let callId = RandomID.uuid()
                let offer = Self.signal(CallInitiate.self, "offer", callId: callId, from: caller, to: bob)
                do {
                    guard case .ringing = try await caller.connection.startCall(offer) else { return .internalError }
                    // Hung up at once, as in the attack (and ended before the next call, so
                    // that one does not find the callee's line busy).
                    try await caller.connection.signal(Self.signal(CallEnd.self, "", callId: callId, from: caller, to: bob, reason: .hangup))
                    try await waitUntil { try await Self.callState(stack, callId) == "ended" }
                    return nil
                } catch WhisperClientError.refused(let code, _) {
                    return code
                }
            }
            // Alice: five calls, then refused.
            var alices: [ErrorCode?] = []
            for _ in 0..<6 { alices.append(try await call(alice)) }
            #expect(alices == [nil, nil, nil, nil, nil, .rateLimited])
            // Dave, another stranger: two more reach bob (seven strangers' calls in all).
            var daves: [ErrorCode?] = []
            for _ in 0..<3 { daves.append(try await call(dave)) }
            #expect(daves == [nil, nil, .rateLimited])
            let rang = Set(await bob.events.all(.callIncoming).compactMap { $0.payload(as: CallIncoming.self)?.callId })
            #expect(rang.count == 7)
        }
    }

    /// A resent `call_initiate` of a ringing call is answered `call_ringing` but neither
    /// rings nor wakes the callee again, and counts against the caller's calls to it.
    @Test func aResentCallRingsAndWakesOnceAndEveryAttemptIsCharged() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.offlineUser(on: 1)
            let callId = RandomID.uuid()
            let offer = Self.signal(CallInitiate.self, "offer", callId: callId, from: alice, to: bob)
            for _ in 0..<5 {
                guard case .ringing(let ringing) = try await alice.connection.startCall(offer) else { Issue.record("not ringing"); return }
                #expect(ringing.via == .push)
            }
            #expect(try await stack.pushJobs().filter { $0["kind"] == "call" && $0["id"] == callId }.count == 1, "woken once")
            // Five attempts (the pair's bound): a sixth, the same call again, is refused.
            await expectRefused(.rateLimited, "a sixth attempt") { _ = try await alice.connection.startCall(offer) }
        }
    }

    /// Item 4 of issue 34: a stranger's call that is only ringing does not make a direct
    /// peer's call busy: it ends (busy) and the peer's call rings. A stranger calling
    /// while the peer's call rings is busy as before.
    @Test func aStrangersRingingCallYieldsToADirectPeersCall() async throws {
        try await MessagingStack.start().running { stack in
            let stranger = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let carol = try await stack.user(on: 0)
            let other = try await stack.user(on: 1)
            try await stack.makePeers([bob, carol])

            let held = RandomID.uuid()
            guard case .ringing = try await stranger.connection.startCall(Self.signal(CallInitiate.self, "offer", callId: held, from: stranger, to: bob)) else {
                Issue.record("the stranger's call did not ring")
                return
            }
            let peers = RandomID.uuid()
            let start = try await carol.connection.startCall(Self.signal(CallInitiate.self, "offer", callId: peers, from: carol, to: bob))
            guard case .ringing = start else { Issue.record("the peer's call did not ring: \(start)"); return }
            let yielded = try #require(try await stranger.events(.callEnded).first?.payload(as: CallEnded.self))
            #expect(yielded.callId == held && yielded.reason == "busy" && yielded.origin == .server)
            #expect(try await Self.callState(stack, held) == "ended")
            let incoming = try await bob.events(.callIncoming, count: 2).compactMap { $0.payload(as: CallIncoming.self)?.callId }
            #expect(incoming == [held, peers])

            // Another stranger now meets a peer's ringing call: busy, and the peer's call rings on.
            let late = try await other.connection.startCall(Self.signal(CallInitiate.self, "offer", callId: RandomID.uuid(), from: other, to: bob))
            guard case .ended(let busy) = late else { Issue.record("not busy: \(late)"); return }
            #expect(busy.reason == "busy")
            #expect(try await Self.callState(stack, peers) == "ringing")
        }
    }
}

extension CallTests {
    /// A whole call from `caller` to `callee`: it rings, the callee answers, the caller
    /// hangs up, and each side hears each step (`#expect`s here). Used where calls are one
    /// flow among others (a cluster, the deployed topology).
    static func ringAnswerAndHangUp(from caller: TestUser, to callee: TestUser) async throws {
        let callId = RandomID.uuid()
        guard case .ringing = try await caller.connection.startCall(signal(CallInitiate.self, "offer-sdp", callId: callId, from: caller, to: callee, media: .audio)) else {
            Issue.record("the call did not ring")
            return
        }
        #expect(try await callee.events(.callIncoming).first?.payload(as: CallIncoming.self)?.callId == callId)
        try await callee.connection.signal(signal(CallAnswer.self, "answer-sdp", callId: callId, from: callee, to: caller))
        #expect(try await caller.events(.callAnswered).first?.payload(as: CallAnswered.self)?.callId == callId)
        try await caller.connection.signal(signal(CallEnd.self, "", callId: callId, from: caller, to: callee, reason: .hangup))
        #expect(try await callee.events(.callEnded).first?.payload(as: CallEnded.self)?.callId == callId)
    }
}
