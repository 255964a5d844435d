import Foundation
import NIOCore
import NIOEmbedded
@testable import GatewayService
import Synchronization
import Testing
import WhisperClient
import WhisperMessaging
import WhisperShared

/// `send_message` served by the sender's gateway: checked, verified, stored and passed
/// on with no router and no stream entry.
@Suite(.serialized)
struct DirectSendTests {
    @Test func messagesAreStoredAndDeliveredWithoutARouter() async throws {
        // No router at all: only the gateways serve messages.
        try await MessagingStack.start(routers: 0).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 0)     // the sender's own gateway
            let carol = try await stack.user(on: 1)   // the other gateway
            let dave = try await stack.offlineUser(on: 1)

            let toBob = alice.message("same gateway", to: bob)
            let toCarol = alice.message("other gateway", to: carol)
            let toDave = alice.message("offline", to: dave)
            #expect(try await alice.connection.send(toBob).messageId == toBob.messageId)
            #expect(try await alice.connection.send(toCarol).messageId == toCarol.messageId)
            #expect(try await alice.connection.send(toDave).messageId == toDave.messageId)

            // Stored before delivery, delivered live and opened by its recipient.
            let atBob = try #require(try await bob.events(.messageReceived).first?.payload(as: MessageReceived.self))
            #expect(atBob.messageId == toBob.messageId)
            #expect(try MessageCrypto.open(atBob, by: (bob.whisperId, bob.keys), sender: alice.peerKeys) == Array("same gateway".utf8))
            let atCarol = try #require(try await carol.events(.messageReceived).first?.payload(as: MessageReceived.self))
            #expect(atCarol.messageId == toCarol.messageId)
            #expect(try await stack.pendingDepth(bob.whisperId) == 1)
            #expect(try await stack.pendingDepth(carol.whisperId) == 1)
            // Offline: stored, and a wake-up job for push-sender.
            #expect(try await stack.pendingDepth(dave.whisperId) == 1)
            #expect(try await stack.pushJobs().contains { $0["to"] == dave.whisperId && $0["id"] == toDave.messageId })

            // A resend is answered as before and stores nothing.
            #expect(try await alice.connection.send(toBob).messageId == toBob.messageId)
            #expect(try await stack.pendingDepth(bob.whisperId) == 1)
            // Nothing went through the router stream.
            #expect(try await stack.routerStreamBacklog() == 0)

            // The receipts come back to the sender and empty the queues. Bob's is written to
            // Alice's socket by the gateway they share: no pub/sub hop, and never stored
            // (her receipt store was not even created).
            try await bob.connection.acknowledge(atBob)
            let first = try #require(try await alice.events(.messageDelivered).first?.payload(as: MessageDelivered.self))
            #expect(first.messageId == toBob.messageId)
            try await waitUntil { try await stack.pendingDepth(bob.whisperId) == 0 }
            #expect(try await stack.withRedis { try await $0.send("EXISTS", OwedStore.receipts.key(alice.whisperId)).int } == 0)
            // Carol's, from the other gateway, is handed to Alice's gateway, which writes it
            // and applies it: not stored either.
            try await carol.connection.acknowledge(atCarol)
            let delivered = try await alice.events(.messageDelivered, count: 2).compactMap { $0.payload(as: MessageDelivered.self)?.messageId }
            #expect(Set(delivered) == [toBob.messageId, toCarol.messageId])
            try await waitUntil { try await stack.pendingDepth(bob.whisperId) == 0 }
            try await waitUntil { try await stack.pendingDepth(carol.whisperId) == 0 }
            #expect(try await stack.withRedis { try await $0.send("EXISTS", OwedStore.receipts.key(alice.whisperId)).int } == 0)
        }
    }

    /// A receipt between two sockets of one gateway is served from what that gateway
    /// remembers of the delivery (`ReceiptMemory`): no look-up in Redis, each status
    /// passed on once, a repeat looked up (and dropped) as before.
    @Test func receiptsBetweenSocketsOfOneGatewayAreServedFromMemoryOncePerStatus() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 0)
            let carol = try await stack.user(on: 1)
            let (toBob, atBob) = try await alice.sendAndWaitForArrival("near", to: bob)
            let (toCarol, atCarol) = try await alice.sendAndWaitForArrival("far", to: carol)

            try await bob.connection.acknowledge(atBob)
            try await bob.connection.acknowledge(atBob)
            try await bob.connection.acknowledge(atBob, status: .read)
            try await bob.connection.acknowledge(atBob, status: .read)
            try await carol.connection.acknowledge(atCarol)
            // Frames of one socket are handled in order, and what the gateway wrote to
            // Alice comes before its answers to her: after these pings, every receipt was
            // served and everything passed on to Alice has arrived.
            _ = try await bob.connection.ping()
            _ = try await carol.connection.ping()
            try await alice.events(.messageDelivered, count: 3)
            _ = try await alice.connection.ping()
            let receipts = await alice.events.all(.messageDelivered).compactMap { $0.payload(as: MessageDelivered.self) }
            #expect(receipts.filter { $0.messageId == toBob.messageId }.map(\.status) == [.delivered, .read])
            #expect(receipts.filter { $0.messageId == toCarol.messageId }.map(\.status) == [.delivered])
            try await waitUntil { try await stack.pendingDepth(bob.whisperId) == 0 }
            try await waitUntil { try await stack.pendingDepth(carol.whisperId) == 0 }

            let near = try await stack.metricsText(of: [stack.gateways[0]])
            let far = try await stack.metricsText(of: [stack.gateways[1]])
            #expect(Metrics.value(in: near, "whisper_gateway_receipts_known_total") == 2, "delivered and read, from memory")
            #expect(Metrics.value(in: near, "whisper_gateway_receipts_total", ["outcome": "passed"]) == 2)
            #expect(Metrics.value(in: near, "whisper_gateway_receipts_total", ["outcome": "ignored"]) == 2, "the repeats")
            #expect(Metrics.value(in: far, "whisper_gateway_receipts_known_total") == 1, "Carol's gateway delivered it with its origin")
            #expect(Metrics.value(in: far, "whisper_gateway_receipts_total", ["outcome": "passed"]) == 1)
        }
    }

    @Test func theGatewayCountsWhatItRoutesAndRefusesLikeARouter() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let mallory = try await stack.user(on: 0)
            for index in 0..<3 {
                try await alice.connection.send(alice.message("counted \(index)", to: bob))
            }
            let frames = try await bob.events(.messageReceived, count: 3)
            for frame in frames {
                try await bob.connection.acknowledge(try #require(try frame.payload(as: MessageReceived.self)))
            }
            try await alice.events(.messageDelivered, count: 3)
            // Refused as a router would: over the size limit, a stale timestamp, a forged signature.
            await expectRefused(.invalidPayload, "oversize") {
                try await alice.connection.send(alice.message(String(repeating: "x", count: Limits.MAX_TEXT_BYTES + 1), to: bob))
            }
            await expectRefused(.invalidTimestamp, "stale") {
                try await alice.connection.send(alice.message("late", to: bob, timestamp: Clock.millisecondsNow() - 11 * 60_000))
            }
            var forged = alice.message("forged", to: bob)
            forged.sig = mallory.message("forged", to: bob, messageId: forged.messageId, timestamp: forged.timestamp).sig
            await expectRefused(.authFailed, "forged") { try await alice.connection.send(forged) }

            let gateways = try await stack.metricsText(of: stack.gateways)
            #expect(Metrics.value(in: gateways, "whisper_messages_routed_total", ["outcome": "delivered"]) == 3, "\(gateways)")
            #expect(Metrics.value(in: gateways, "whisper_messages_routed_total", ["outcome": "refused"]) == 3)
            #expect(Metrics.value(in: gateways, "whisper_pending_queue_depth_count") == 3)
            #expect(Metrics.value(in: gateways, "whisper_routing_latency_seconds_count") == 3)
            #expect(Metrics.value(in: gateways, "whisper_errors_total", ["code": "INVALID_PAYLOAD"]) == 1)
            #expect(Metrics.value(in: gateways, "whisper_errors_total", ["code": "INVALID_TIMESTAMP"]) == 1)
            #expect(Metrics.value(in: gateways, "whisper_errors_total", ["code": "AUTH_FAILED"]) == 1)
            // Refusals the router would have answered do not count against the socket.
            _ = try await alice.connection.ping()
        }
    }

    /// The sender's limit is charged through leases of its bucket in Redis: exact at the
    /// limit, and a new socket does not bring back what the last one leased.
    @Test func theSendersLimitHoldsAcrossLeasesAndSockets() async throws {
        try await MessagingStack.start(routers: 0, gateway: { $0.limits[.sendPerSender] = RateLimitRule("5/60s")! }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            for index in 0..<5 {
                try await alice.connection.send(alice.message("m\(index)", to: bob))
            }
            await expectRefused(.rateLimited, "sixth") { try await alice.connection.send(alice.message("one too many", to: bob)) }
            let again = try await stack.reconnect(alice, on: 1)
            await expectRefused(.rateLimited, "on a new socket") { try await again.connection.send(again.message("still too many", to: bob)) }
            #expect(try await stack.pendingDepth(bob.whisperId) == 5)
        }
    }

    /// Backpressure without a stream: a socket that sends faster than its messages are
    /// stored is held back by TCP (its queue is not read past 16 frames), not refused. Its
    /// own backlog does not count as waiting for the gateway, so a burst queued behind a
    /// held store is admitted whole, and every message of it is stored: only a message the
    /// gateway itself kept waiting past `sendWaitMax` is refused as busy
    /// (`SocketInbox.nextTimed()`). The wait is made, not hoped for: Redis holds writes for
    /// a second (`CLIENT PAUSE`, this stack's own server), so the burst's first store waits
    /// on it and the frames behind it wait far past the bound whatever the machine's speed.
    @Test func aSocketsOwnBacklogIsHeldBackNotRefused() async throws {
        try await MessagingStack.start(routers: 0, gateway: {
            $0.sendWaitMax = .milliseconds(100)
        }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            _ = try await alice.connection.send(alice.message("alone", to: bob))
            _ = try await stack.withRedis { try await $0.send("CLIENT", "PAUSE", "1000", "WRITE") }
            let messages = (0..<40).map { alice.message("burst \($0)", to: bob) }
            let refusals = await withTaskGroup(of: String?.self) { group in
                for message in messages {
                    group.addTask {
                        do {
                            _ = try await alice.connection.send(message, timeout: .seconds(60))
                            return nil
                        } catch {
                            return "\(error)"
                        }
                    }
                }
                var all: [String] = []
                for await refusal in group { if let refusal { all.append(refusal) } }
                return all
            }
            #expect(refusals.isEmpty, "a socket's own backlog is admitted: \(refusals)")
            #expect(try await stack.pendingDepth(bob.whisperId) == 1 + messages.count)
            let metrics = try await stack.metricsText(of: stack.gateways)
            #expect(Metrics.value(in: metrics, "whisper_gateway_busy_refusals_total") ?? 0 == 0)
        }
    }

    /// A direct peer's message to a socket of the same gateway is written to it while its
    /// store is in flight (docs/architecture.md, "Delivered while it is stored"): the
    /// sender hears `message_accepted` only once it is stored, and the recipient's
    /// receipt, sent before that, reaches the sender after it, on the wire. The store is
    /// held, not hoped slow: Redis holds writes (`CLIENT PAUSE ... WRITE`; reads go on)
    /// while the message is already at its recipient and its queue is still empty. A
    /// message the store refuses (another sender's messageId) may reach the recipient,
    /// but its receipt never reaches the sender.
    /// A new contact is a direct peer from the moment the two have exchanged, not up to
    /// 10 s later, when the gateway's memory of "not peers" (`PeerMemory`) lapses: a reply
    /// written to the first writer's socket here ends that memory, and so does a first
    /// message stored to someone who wrote first. Seen as early delivery (a peer's
    /// message reaches its recipient while Redis holds writes and its store waits).
    @Test func aNewContactIsADirectPeerAsSoonAsTheTwoHaveExchanged() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 0)
            let carol = try await stack.user(on: 0)
            try await stack.withRedis { redis in
                /// From a new socket of `sender`'s, two messages accepted in a row (the
                /// second leaves the socket a leased token, so that the next one writes
                /// nothing before its store), then one sent while Redis holds writes:
                /// whether it reached `recipient` before its store.
                func reachesWhileStored(_ sender: TestUser, to recipient: TestUser) async throws -> Bool {
                    let early = Mutex(false)
                    try await WebSocketTest.connect("ws://127.0.0.1:\(stack.gateways[0].port)/ws") { socket in
                        func send(_ message: SendMessage, requestId: String) async throws { try await socket.send(message, requestId: requestId) }
                        func answer(to requestId: String) async throws -> ServerFrame { try await socket.answer(to: requestId) }
                        func arrived(_ message: SendMessage) async throws {
                            try await waitUntil {
                                await recipient.events.all(.messageReceived).contains { $0.payload(as: MessageReceived.self)?.messageId == message.messageId }
                            }
                        }
                        for index in 0..<2 {
                            let message = sender.message("lease \(index)", to: recipient)
                            try await send(message, requestId: "lease-\(index)")
                            #expect(try await answer(to: "lease-\(index)").type == .messageAccepted)
                            try await arrived(message)
                        }
                        let queued = try await PendingQueue(redis: redis).depth(recipient: recipient.whisperId)
                        _ = try await redis.send("CLIENT", "PAUSE", "1500", "WRITE")
                        let held = sender.message("while stored", to: recipient)
                        try await send(held, requestId: "held")
                        try await arrived(held)
                        let stored = try await PendingQueue(redis: redis).depth(recipient: recipient.whisperId)
                        #expect(try await answer(to: "held").type == .messageAccepted)
                        early.withLock { $0 = stored == queued }
                    }
                    return early.withLock { $0 }
                }

                // Alice writes first; Bob's reply, written to her socket here, makes them peers.
                _ = try await alice.sendAndWaitForArrival("hello", to: bob)
                _ = try await bob.sendAndWaitForArrival("hello back", to: alice)
                #expect(try await reachesWhileStored(alice, to: bob), "after Bob's reply reached her, Alice is Bob's peer")

                // Bob writes first; Carol's first message, once stored, makes them peers.
                _ = try await bob.sendAndWaitForArrival("hi", to: carol)
                _ = try await carol.sendAndWaitForArrival("hi", to: bob)
                #expect(try await reachesWhileStored(carol, to: bob), "once her answer is stored, Carol is Bob's peer")
            }
        }
    }

    /// Alice, whose only socket is the one handed to `body`, and Bob, signed in, on one
    /// gateway and direct peers; with the stack's Redis.
    func alicesSocketToBob(_ body: @escaping @Sendable (TestUser, TestUser, RedisClient, WebSocketSession) async throws -> Void) async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let alice = try await stack.offlineUser(on: 0)
            let bob = try await stack.user(on: 0)
            try await stack.makePeers([alice, bob])
            try await stack.withRedis { redis in
                try await WebSocketTest.connect("ws://127.0.0.1:\(stack.gateways[0].port)/ws") { socket in
                    try await body(alice, bob, redis, socket)
                }
            }
        }
    }

    /// A steady sender's next lease of its bucket is asked for ahead of need, beside its
    /// frames (`TokenLease.leaseAhead`), so its messages do not wait for the bucket's
    /// write: after seven messages in a row, the eighth, sent while Redis holds writes,
    /// reaches the recipient before its store. Leased only as they are spent (1, 2 and 4
    /// tokens), the tokens would have run out with the seventh, and the eighth would wait
    /// for a new lease until the writes resume.
    @Test func aSteadySendersNextLeaseIsAskedAheadOfNeed() async throws {
        try await alicesSocketToBob { alice, bob, redis, socket in
            func send(_ message: SendMessage, requestId: String) async throws { try await socket.send(message, requestId: requestId) }
            func answer(to requestId: String) async throws -> ServerFrame { try await socket.answer(to: requestId) }
            for index in 0..<7 {
                try await send(alice.message("steady \(index)", to: bob), requestId: "steady-\(index)")
                #expect(try await answer(to: "steady-\(index)").type == .messageAccepted)
            }
            _ = try await bob.events(.messageReceived, count: 7)
            let queued = try await PendingQueue(redis: redis).depth(recipient: bob.whisperId)
            _ = try await redis.send("CLIENT", "PAUSE", "2000", "WRITE")
            let held = alice.message("held", to: bob)
            try await send(held, requestId: "held")
            try await waitUntil(timeout: .seconds(10)) {
                await bob.events.all(.messageReceived).contains { $0.payload(as: MessageReceived.self)?.messageId == held.messageId }
            }
            #expect(try await PendingQueue(redis: redis).depth(recipient: bob.whisperId) == queued, "at Bob before its store")
            #expect(try await answer(to: "held").type == .messageAccepted)
        }
    }

    /// A socket's next message does not wait for its last one's store once that store is
    /// written (`SocketTurns`): while Redis holds writes, two messages sent back to back
    /// both reach their recipient before either is stored, and both are then accepted.
    /// One at a time, the second would be handled only once the first's store answered.
    @Test func aSocketsNextMessageIsHandledWhileItsLastIsStored() async throws {
        try await alicesSocketToBob { alice, bob, redis, socket in
            // A steady run first: the socket holds leased tokens, so that the held
            // messages need no write but their stores.
            for index in 0..<12 {
                try await socket.send(alice.message("steady \(index)", to: bob), requestId: "steady-\(index)")
                #expect(try await socket.answer(to: "steady-\(index)").type == .messageAccepted)
            }
            _ = try await bob.events(.messageReceived, count: 12)
            let queued = try await PendingQueue(redis: redis).depth(recipient: bob.whisperId)
            _ = try await redis.send("CLIENT", "PAUSE", "3000", "WRITE")
            let held = (0..<2).map { alice.message("held \($0)", to: bob) }
            for (index, message) in held.enumerated() {
                try await socket.send(message, requestId: "held-\(index)")
            }
            try await waitUntil(timeout: .seconds(10)) {
                let arrived = Set(await bob.events.all(.messageReceived).compactMap { $0.payload(as: MessageReceived.self)?.messageId })
                return held.allSatisfy { arrived.contains($0.messageId) }
            }
            #expect(try await PendingQueue(redis: redis).depth(recipient: bob.whisperId) == queued, "both at Bob before either store")
            var answers: [String: ServerFrame] = [:]
            while answers.count < held.count {
                let frame = try await socket.receive(timeout: .seconds(10))
                if let requestId = frame.requestId, requestId.hasPrefix("held-") { answers[requestId] = frame }
            }
            #expect(answers.values.allSatisfy { $0.type == .messageAccepted }, "\(answers.values.map(\.type))")
            #expect(try await PendingQueue(redis: redis).depth(recipient: bob.whisperId) == queued + held.count)
        }
    }

    /// At most `storesInFlightMax` of a socket's messages wait for their stores at once:
    /// the next frame waits for one of them to end, and the socket's end waits for all.
    /// A message hands its socket over once (`FrameTurn.release`), and says so when done.
    @Test func aSocketsMessagesInFlightAreBounded() async throws {
        let turns = SocketTurns()
        let handedOver = Mutex(0)
        var held: [FrameTurn] = []
        for _ in 0..<SocketTurns.storesInFlightMax {
            await turns.waitForRoom()
            let turn = FrameTurn(turns: turns) { handedOver.withLock { $0 += 1 } }
            turn.release()
            turn.release()
            held.append(turn)
        }
        #expect(handedOver.withLock { $0 } == SocketTurns.storesInFlightMax, "each message hands its socket over once")
        #expect(turns.inFlight == SocketTurns.storesInFlightMax)
        let began = Mutex(false)
        let next = Task {
            await turns.waitForRoom()
            began.withLock { $0 = true }
        }
        let ended = Mutex(false)
        let end = Task {
            await turns.drained()
            ended.withLock { $0 = true }
        }
        for _ in 0..<200 { await Task.yield() }
        #expect(!began.withLock { $0 }, "no room while the bound is reached")
        #expect(held.removeFirst().end(), "it had handed its socket over")
        await next.value
        #expect(began.withLock { $0 })
        #expect(!ended.withLock { $0 }, "the socket's end waits for every message in flight")
        for turn in held { _ = turn.end() }
        await end.value
        #expect(turns.inFlight == 0)
        let kept = FrameTurn(turns: turns) {}
        #expect(!kept.end(), "a message that kept its socket says so")
        #expect(turns.inFlight == 0)
    }

    @Test func aPeersMessageReachesItsRecipientWhileItIsStored() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let alice = try await stack.offlineUser(on: 0)
            let bob = try await stack.user(on: 0)
            let carol = try await stack.user(on: 1)
            try await stack.makePeers([alice, bob])
            try await stack.withRedis { redis in
                try await WebSocketTest.connect("ws://127.0.0.1:\(stack.gateways[0].port)/ws") { socket in
                    func frameText<P: ClientPayload>(_ payload: P, requestId: String) -> String {
                        String(decoding: ClientFrameCodec.encode(payload, requestId: requestId), as: UTF8.self)
                    }
                    // Alice's next frames until the answer to `requestId`, which comes last.
                    func framesUntil(_ requestId: String) async throws -> [ServerFrame] {
                        var frames: [ServerFrame] = []
                        while true {
                            let frame: ServerFrame
                            do {
                                frame = try await socket.receive()
                            } catch {
                                Issue.record("waiting for the answer to \(requestId), after \(frames.map { "\($0.type) \($0.payload(as: ErrorPayload.self).map { "\($0.code) \($0.message)" } ?? "")" })")
                                throw error
                            }
                            frames.append(frame)
                            if frame.requestId == requestId { return frames }
                        }
                    }
                    // Alice's next frames until `count` message_delivered have come.
                    func framesUntilDelivered(_ count: Int) async throws -> [ServerFrame] {
                        var frames: [ServerFrame] = []
                        while frames.filter({ $0.type == .messageDelivered }).count < count {
                            frames.append(try await socket.receive())
                        }
                        return frames
                    }
                    // Two messages in a row leave Alice's socket a leased token (`TokenLease`),
                    // so that the third needs no write but its store's.
                    for index in 0..<2 {
                        try await socket.send(frameText(alice.message("lease \(index)", to: bob), requestId: "lease-\(index)"))
                        #expect(try await framesUntil("lease-\(index)").last?.type == .messageAccepted)
                    }
                    // Bob acknowledges those two in a row: his socket has a token for receipts too.
                    for frame in try await bob.events(.messageReceived, count: 2) {
                        try await bob.connection.acknowledge(try #require(frame.payload(as: MessageReceived.self)))
                    }
                    _ = try await framesUntilDelivered(2)
                    try await waitUntil { try await PendingQueue(redis: redis).depth(recipient: bob.whisperId) == 0 }
                    // One second: well inside the two a receipt waits for its store's answer
                    // (`ReceiptDesk.settleLimit`), past which Redis is asked instead.
                    _ = try await redis.send("CLIENT", "PAUSE", "1000", "WRITE")
                    let held = alice.message("while stored", to: bob)
                    try await socket.send(frameText(held, requestId: "held"))
                    let arrived = try await bob.events(.messageReceived, count: 3).compactMap { $0.payload(as: MessageReceived.self) }
                    let atBob = try #require(arrived.first { $0.messageId == held.messageId })
                    #expect(try await PendingQueue(redis: redis).depth(recipient: bob.whisperId) == 0, "at Bob before its store")
                    // The receipt reaches the gateway while the store is held (until the pause
                    // ends, a second after it began).
                    try await bob.connection.acknowledge(atBob)
                    let frames = try await framesUntil("held")
                    #expect(frames.last?.type == .messageAccepted, "\(frames.map(\.type))")
                    #expect(!frames.contains { $0.type == .messageDelivered }, "the receipt came before the store's answer and waited for it")
                    let delivered = try await socket.receive(timeout: .seconds(10))
                    #expect(delivered.type == .messageDelivered)
                    #expect(delivered.payload(as: MessageDelivered.self)?.messageId == held.messageId)
                    try await waitUntil { try await PendingQueue(redis: redis).depth(recipient: bob.whisperId) == 0 }

                    // Carol takes a messageId first; Alice's message with the same one is
                    // refused, after it may have reached Bob.
                    let taken = carol.message("first", to: bob)
                    _ = try await carol.connection.send(taken)
                    let clash = alice.message("second", to: bob, messageId: taken.messageId)
                    try await socket.send(frameText(clash, requestId: "clash"))
                    let refusal = try #require(try await framesUntil("clash").last)
                    #expect(refusal.type == .error && refusal.payload(as: ErrorPayload.self)?.code == .invalidPayload)
                    // The copy written to Bob before the store answered reaches his client in
                    // its own time: the refusal to Alice can be read first.
                    try await waitUntil(timeout: .seconds(10)) {
                        await bob.events.all(.messageReceived).compactMap { $0.payload(as: MessageReceived.self) }
                            .contains { $0.messageId == taken.messageId && $0.from == alice.whisperId }
                    }
                    let copies = await bob.events.all(.messageReceived).compactMap { $0.payload(as: MessageReceived.self) }
                    if let early = copies.first(where: { $0.messageId == taken.messageId && $0.from == alice.whisperId }) {
                        try await bob.connection.acknowledge(early)
                    }
                    // Bob's receipt was served before his pong; whatever it gave Alice would
                    // come before the answer to her ping, written after.
                    _ = try await bob.connection.ping()
                    try await socket.send(frameText(Ping(), requestId: "after"))
                    let afterwards = try await framesUntil("after")
                    #expect(!afterwards.contains { $0.type == .messageDelivered }, "no receipt for a refused message: \(afterwards.map(\.type))")
                    #expect(copies.contains { $0.messageId == taken.messageId && $0.from == alice.whisperId }, "delivered while stored, then refused")
                }
            }
        }
    }

    /// A `delivered` receipt that comes while its message's store still waits to be
    /// written (group commit) rides in that store (`ReceiptRide`): the message is
    /// recorded as delivered and never queued, and the sender gets `message_delivered`
    /// right after `message_accepted`, also for a resend.
    @Test func aReceiptThatComesWhileItsMessageWaitsToBeStoredRidesInTheStore() async throws {
        // A long group wait, so that Bob's receipt surely comes while the store waits.
        try await MessagingStack.start(routers: 0, gateway: { $0.storeGroupWait = .seconds(2) }).running { stack in
            let alice = try await stack.offlineUser(on: 0)
            let bob = try await stack.user(on: 0)
            try await stack.makePeers([alice, bob])
            try await stack.withRedis { redis in
                try await WebSocketTest.connect("ws://127.0.0.1:\(stack.gateways[0].port)/ws") { socket in
                    // Alice's next frames until the answer to `requestId`, and the one after it.
                    func answerAndNext(_ requestId: String) async throws -> (ServerFrame, ServerFrame) {
                        let answer = try await socket.answer(to: requestId)
                        return (answer, try await socket.receive(timeout: .seconds(10)))
                    }
                    // Two messages and two receipts first: both sockets hold leased tokens,
                    // so that nothing but the store is written to Redis meanwhile.
                    for index in 0..<2 {
                        try await socket.send(alice.message("lease \(index)", to: bob), requestId: "lease-\(index)")
                        #expect(try await socket.answer(to: "lease-\(index)").type == .messageAccepted)
                    }
                    for frame in try await bob.events(.messageReceived, count: 2) {
                        try await bob.connection.acknowledge(try #require(frame.payload(as: MessageReceived.self)))
                    }
                    var delivered = 0
                    while delivered < 2 {
                        if try await socket.receive(timeout: .seconds(10)).type == .messageDelivered { delivered += 1 }
                    }
                    try await waitUntil { try await PendingQueue(redis: redis).depth(recipient: bob.whisperId) == 0 }

                    // Bob's receipt comes a moment after the store was written to the
                    // connection, where it waits for its group; should anything else leave
                    // first and take the store with it, the next message is tried.
                    var ridden: (message: SendMessage, receipt: MessageDelivered)?
                    for attempt in 0..<5 where ridden == nil {
                        let message = alice.message("rides \(attempt)", to: bob)
                        try await socket.send(message, requestId: "rides-\(attempt)")
                        let arrived = try await bob.events(.messageReceived, count: 3 + attempt).compactMap { $0.payload(as: MessageReceived.self) }
                        try await bob.connection.acknowledge(try #require(arrived.first { $0.messageId == message.messageId }))
                        let (accepted, next) = try await answerAndNext("rides-\(attempt)")
                        #expect(accepted.type == .messageAccepted)
                        let state = try await redis.send("HGET", PendingQueue.messageKey(bob.whisperId, message.messageId), "state").string
                        if next.type == .messageDelivered, state == "delivered", let receipt = next.payload(as: MessageDelivered.self) {
                            ridden = (message, receipt)
                        } else if next.type != .messageDelivered {
                            // It went the usual way: its receipt follows.
                            while try await socket.receive(timeout: .seconds(10)).type != .messageDelivered {}
                        }
                    }
                    let (message, receipt) = try #require(ridden, "no receipt rode in its message's store")
                    #expect(receipt.messageId == message.messageId && receipt.status == .delivered && receipt.from == bob.whisperId)

                    // Recorded as delivered, with the receipt; never queued.
                    let record = try await redis.send("HMGET", PendingQueue.messageKey(bob.whisperId, message.messageId), "state", "receipt", "entry")
                    #expect(record.array?.map(\.string) == ["delivered", String(receipt.timestamp), ""])
                    #expect(try await redis.send("XLEN", RedisKeys.pending(bob.whisperId)).int == 0)
                    let metrics = try await stack.metricsText(of: [stack.gateways[0]])
                    #expect(metrics.contains("whisper_gateway_receipts_rode_total 1"), "\(metrics.split(separator: "\n").filter { $0.contains("gateway_receipts") })")

                    // A resend (its answer lost, say) is answered the same way.
                    try await socket.send(message, requestId: "again")
                    let (again, after) = try await answerAndNext("again")
                    #expect(again.type == .messageAccepted)
                    #expect(after.type == .messageDelivered && after.payload(as: MessageDelivered.self)?.messageId == message.messageId)
                    #expect(try await redis.send("XLEN", RedisKeys.pending(bob.whisperId)).int == 0)
                }
            }
        }
    }
}

extension WebSocketSession {
    /// Sends a client frame of `payload` with `requestId`.
    func send(_ payload: some ClientPayload, requestId: String) async throws {
        try await send(String(decoding: ClientFrameCodec.encode(payload, requestId: requestId), as: UTF8.self))
    }

    /// The next frame answering `requestId`, what comes before it skipped.
    func answer(to requestId: String) async throws -> ServerFrame {
        while true {
            let frame = try await receive(timeout: .seconds(10))
            if frame.requestId == requestId { return frame }
        }
    }
}

@Suite struct TokenLeaseTests {
    @Test func leasesGrowWhileFramesFollowAndTokensDoNotOutliveTheirSecond() {
        var lease = TokenLease()
        let second = TokenLease.lifetime
        var now: UInt64 = 10 * second
        var spent = lease.spend(now: now)
        #expect(!spent)
        var size = lease.nextSize(now: now, max: 16)
        #expect(size == 1)
        lease.received(1, now: now)
        spent = lease.spend(now: now)
        #expect(!spent, "the one token was spent as it came")
        // Leases that follow each other within a second double, up to the maximum.
        var sizes: [Int] = []
        for _ in 0..<6 {
            now += second / 10
            sizes.append(lease.nextSize(now: now, max: 16))
        }
        #expect(sizes == [2, 4, 8, 16, 16, 16])
        lease.received(16, now: now)
        var spentCount = 0
        while lease.spend(now: now) { spentCount += 1 }
        #expect(spentCount == 15)
        // Unspent tokens lapse after their second; a pause starts over at one.
        lease.received(8, now: now)
        spent = lease.spend(now: now + second)
        #expect(!spent)
        size = lease.nextSize(now: now + 2 * second, max: 16)
        #expect(size == 1)
    }

    @Test func aBusySocketLeasesAheadOnceHalfIsLeftAndOneLeaseAtATime() {
        var lease = TokenLease()
        let second = TokenLease.lifetime
        var now: UInt64 = 10 * second
        let loop = EmbeddedEventLoop()
        /// The size of a lease asked ahead now, or nil (its answer's promise completed
        /// at once: what counts here is that one is out until `receivedAhead`).
        func ahead() -> Int? {
            guard let asked = lease.leaseAhead(now: now, max: 16, on: loop) else { return nil }
            asked.answered.succeed()
            return asked.size
        }
        func spend() -> Bool { lease.spend(now: now) }
        _ = lease.nextSize(now: now, max: 16)
        lease.received(1, now: now)
        var asked = ahead()
        #expect(asked == 2, "leasing again within its second, nothing left: ask ahead, doubled")
        asked = ahead()
        #expect(asked == nil, "one lease ahead at a time")
        lease.receivedAhead(2, now: now)
        var spent = spend()
        #expect(spent)
        asked = ahead()
        #expect(asked == 4, "half of the last lease left")
        lease.receivedAhead(nil, now: now)
        spent = spend()
        #expect(spent)
        spent = spend()
        #expect(!spent, "a refused lease ahead adds nothing")
        asked = ahead()
        #expect(asked == 8)
        lease.receivedAhead(8, now: now)
        var spentCount = 0
        while ahead() == nil, spend() { spentCount += 1 }
        #expect(spentCount == 4, "asked ahead again once 4 of 8 were left")
        // A socket that stopped leasing for over a second does not lease ahead.
        now += 3 * second
        lease.receivedAhead(16, now: now)
        spentCount = 0
        while spentCount < 12, spend() { spentCount += 1 }
        #expect(spentCount == 12)
        asked = ahead()
        #expect(asked == nil)
        // Tokens granted ahead lapse like any others.
        spent = lease.spend(now: now + second)
        #expect(!spent)
    }
}

/// A frame that finds no token while its socket's lease asked ahead is still out waits
/// for that lease rather than asking the bucket itself, which that lease may have
/// emptied: here the bucket holds one token, the lease ahead takes it, and the frame is
/// still admitted.
@Suite(.serialized) struct LeaseAheadTests {
    @Test func aFrameWaitsForTheLeaseAskedAheadBeforeAskingTheBucket() async throws {
        try await TestServers.withRedis { redis in
            var settings = TestServers.gatewaySettings(try #require(PostgresSettings(url: TestServers.postgresURL)), authPort: 1)
            settings.limits[.sendPerSender] = RateLimitRule("1/60s")!
            let limits = FrameLimits(settings: settings, redis: redis, metrics: ServiceMetrics(service: "gateway", instanceID: "lease-\(RandomID.uuid())"))
            let channel = EmbeddedChannel()
            let connection = ClientConnection.forTest(on: channel)
            let bucket = "ratelimit:{lease-\(RandomID.uuid())}:send"
            // The socket has just leased and spends its last token: a lease is asked ahead.
            let now = NIODeadline.now().uptimeNanoseconds
            _ = connection.leaseSize(.send, now: now, max: 16)
            connection.leased(.send, granted: 2, now: now)
            let spent = connection.spendLeased(.send, now: now, max: 16)
            let ahead = try #require(spent.ahead)
            // The next frame finds no token while that lease is out, and waits for it.
            let charged = Task { try await limits.charge(.send, bucket: bucket, limit: .sendPerSender, on: connection) }
            try await waitUntil { connection.leaseAheadInFlight(.send) != nil }
            // The lease ahead takes the bucket's one token.
            guard case .granted(let granted) = try await limits.limiter.lease(bucket: bucket, rule: limits.rules[.sendPerSender], wanted: ahead.size) else {
                Issue.record("the bucket's token was not granted")
                return
            }
            connection.leasedAhead(.send, granted: granted, generation: ahead.generation, now: NIODeadline.now().uptimeNanoseconds)
            ahead.answered.succeed()
            let decision = try await charged.value
            #expect(decision == .allowed, "admitted with the token the lease ahead brought")
            _ = try? channel.finish()
        }
    }
}

/// A gateway process serving messages directly is killed with SIGKILL while they are in
/// flight; the senders resend through another gateway what was not acknowledged, and
/// every message is stored exactly once.
@Suite struct GatewayCrashTests {
    actor Tally {
        var accepted = 0
        var killed = false
        func accept() -> Int {
            accepted += 1
            return accepted
        }

        func kill(_ process: Process) {
            killed = true
            Foundation.kill(process.processIdentifier, SIGKILL)
        }
    }

    @Test func aGatewayKilledMidFlightLosesNothing() async throws {
        // Auth, a router and two gateways in this process; the senders' gateway as a process.
        try await MessagingStack.start(routers: 1).running { stack in
            let port = try TestServers.freePort()
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "\(Executables.binPath)/gateway")
            process.environment = Executables.environment(stack.database).merging([
                "PATH": "/usr/bin:/bin",
                "WHISPER_REDIS_URL": stack.redisServer.url,
                "WHISPER_LOG_LEVEL": "warning",
                "WHISPER_INSTANCE_ID": "doomed-gateway",
                "GATEWAY_HTTP_PORT": "\(port)",
                "GATEWAY_AUTH_URL": "http://127.0.0.1:\(stack.auth.internalPort)",
                "WHISPER_RATE_LIMIT_SEND_PER_PAIR": "100000/60s",
            ]) { _, new in new }
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            _ = try await HTTP.waitFor("http://127.0.0.1:\(port)/ready") { $0.status == 200 }

            let pairs = 10
            let perPair = 60
            var senders: [TestUser] = []
            var recipients: [TestUser] = []
            for _ in 0..<pairs {
                let keys = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
                let connection = WhisperConnection(url: "ws://127.0.0.1:\(port)/ws", logger: TestServers.logger)
                try await connection.connect()
                let ack = try await connection.register(keys: keys, deviceId: RandomID.uuid(), platform: .ios, pushToken: nil, voipToken: nil)
                senders.append(TestUser(whisperId: ack.whisperId, keys: keys, token: ack.sessionToken, connection: connection, events: EventLog(connection)))
                recipients.append(try await stack.user(on: 1))
            }
            let tally = Tally()
            let sent = try await withThrowingTaskGroup(of: [String].self) { group in
                for index in 0..<pairs {
                    let recipient = recipients[index]
                    var sender = senders[index]
                    group.addTask {
                        var ids: [String] = []
                        var onDoomedGateway = true
                        for number in 0..<perPair {
                            let message = sender.message("message \(number)", to: recipient)
                            // Until accepted: the same messageId each time, on whatever socket is open.
                            var attempts = 0
                            while true {
                                attempts += 1
                                do {
                                    try await sender.connection.send(message, timeout: .seconds(2))
                                    break
                                } catch where attempts < 30 {
                                    // The gateway is gone: on to another one, with the same session.
                                    if onDoomedGateway, await tally.killed {
                                        sender = try await stack.reconnect(sender, on: 0)
                                        onDoomedGateway = false
                                    }
                                }
                            }
                            ids.append(message.messageId)
                            if await tally.accept() == pairs * perPair / 3 {
                                await tally.kill(process)
                            }
                        }
                        return ids
                    }
                }
                var all: [String] = []
                for try await ids in group { all += ids }
                return all
            }
            process.waitUntilExit()
            #expect(process.terminationReason == .uncaughtSignal)
            #expect(sent.count == pairs * perPair)
            // Nobody acknowledged: every message is in its recipient's queue, once.
            for (index, recipient) in recipients.enumerated() {
                #expect(try await stack.pendingDepth(recipient.whisperId) == perPair, "recipient \(index)")
                var ids: Set<String> = []
                var cursor: String?
                repeat {
                    let page = try await recipient.connection.fetchPending(cursor: cursor, limit: 200)
                    for message in page.messages {
                        _ = try MessageCrypto.open(message, by: (recipient.whisperId, recipient.keys), sender: senders[index].peerKeys)
                        ids.insert(message.messageId)
                    }
                    cursor = page.nextCursor
                } while cursor != nil
                #expect(ids.count == perPair, "recipient \(index) has \(ids.count) of \(perPair)")
            }
        }
    }
}
