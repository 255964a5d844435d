import Foundation
import RouterService
import Testing
@testable import WhisperClient
import WhisperMessaging
import WhisperShared

/// 1:1 messaging end to end (docs/protocol.md section 5): two gateways, two routers, real Redis and Postgres.
@Suite struct MessagingTests {
    @Test func aMessageCrossesGatewaysAndRoutersAndItsReceiptComesBack() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)

            let message = alice.message("hello bob", to: bob)
            let accepted = try await alice.connection.send(message)
            #expect(accepted == MessageAccepted(messageId: message.messageId, status: "sent"))

            let received = try #require(try await bob.events(.messageReceived).first?.payload(as: MessageReceived.self))
            #expect(received.messageId == message.messageId)
            #expect(received.from == alice.whisperId && received.to == bob.whisperId)
            let plaintext = try MessageCrypto.open(received, by: (bob.whisperId, bob.keys), sender: alice.peerKeys)
            #expect(String(decoding: plaintext, as: UTF8.self) == "hello bob")
            #expect(try await stack.pendingDepth(bob.whisperId) == 1)

            try await bob.connection.acknowledge(received, status: .delivered)
            let delivered = try #require(try await alice.events(.messageDelivered).first?.payload(as: MessageDelivered.self))
            #expect(delivered.messageId == message.messageId && delivered.status == .delivered)
            try await waitUntil { try await stack.pendingDepth(bob.whisperId) == 0 }

            try await bob.connection.acknowledge(received, status: .read)
            let receipts = try await alice.events(.messageDelivered, count: 2)
            #expect(receipts.last?.payload(as: MessageDelivered.self)?.status == .read)
        }
    }

    @Test func theSameMessageIdSentThreeTimesIsDeliveredOnce() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let message = alice.message("only once", to: bob)
            for _ in 0..<3 {
                #expect(try await alice.connection.send(message).messageId == message.messageId)
            }
            // A later message from the same sender is handled after every copy of the first,
            // and reaches Bob after anything they caused.
            let marker = alice.message("after the repeats", to: bob)
            try await alice.connection.send(marker)
            let received = try await bob.events(.messageReceived, count: 2)
            #expect(received.compactMap { $0.payload(as: MessageReceived.self)?.messageId } == [message.messageId, marker.messageId])
            #expect(await bob.events.all(.messageReceived).count == 2)
            #expect(try await stack.pendingDepth(bob.whisperId) == 2)
        }
    }

    @Test func anOfflineRecipientPagesThroughEveryMessageExactlyOnce() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bobFirst = try await stack.offlineUser(on: 1)
            // Contacts: more than a stranger's share of a queue (100) waits for Bob.
            try await stack.makePeers([alice, bobFirst])
            let sent = try await alice.send(120, to: bobFirst, labelled: "message")
            #expect(try await stack.pendingDepth(bobFirst.whisperId) == 120)

            let bob = try await stack.reconnect(bobFirst, on: 0)
            var seen: [String] = []
            var cursor: String?
            var pages = 0
            repeat {
                let page = try await bob.connection.fetchPending(cursor: cursor, limit: 50)
                pages += 1
                for message in page.messages {
                    _ = try MessageCrypto.open(message, by: (bob.whisperId, bob.keys), sender: alice.peerKeys)
                    seen.append(message.messageId)
                    try await bob.connection.acknowledge(message)
                }
                cursor = page.nextCursor
            } while cursor != nil
            #expect(pages == 3)
            #expect(seen.count == 120)
            #expect(Set(seen) == sent)
            try await waitUntil { try await stack.pendingDepth(bob.whisperId) == 0 }
            #expect(try await bob.connection.fetchPending().messages.isEmpty)
            // Alice was online: she got every receipt live.
            try await alice.events(.messageDelivered, count: 120)
        }
    }

    @Test func receiptsForAnOfflineSenderWaitForItsNextFetch() async throws {
        try await MessagingStack.start().running { stack in
            let aliceFirst = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let (message, received) = try await aliceFirst.sendAndWaitForArrival("are you there?", to: bob)
            await aliceFirst.connection.close()
            try await stack.waitUntilOffline(aliceFirst)
            // A receipt kept longer than 72 hours ago (written here with its old ID) goes as
            // the next one is kept.
            let old = Clock.millisecondsNow() - Int64(PendingQueue.ttl.milliseconds) - 60_000
            let stale = ServerFrameCodec.encode(MessageDelivered(messageId: RandomID.uuid(), status: .delivered, timestamp: old, from: bob.whisperId))
            try await stack.withRedis { redis in
                _ = try await redis.send("XADD", OwedStore.receipts.key(aliceFirst.whisperId), "\(old)-0", "f", stale)
            }
            try await bob.connection.acknowledge(received)
            try await waitUntil { try await stack.storedReceipts(aliceFirst.whisperId) == 1 }

            let alice = try await stack.reconnect(aliceFirst, on: 1)
            _ = try await alice.connection.fetchPending()
            let receipt = try #require(try await alice.events(.messageDelivered).first?.payload(as: MessageDelivered.self))
            #expect(receipt.messageId == message.messageId)
            #expect(await alice.events.all(.messageDelivered).count == 1)
        }
    }

    @Test func aReceiptForSomeoneElsesMessageIsIgnored() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let carol = try await stack.user(on: 0)
            let (_, received) = try await alice.sendAndWaitForArrival("for bob only", to: bob)
            // Carol claims to have received Bob's message.
            try await carol.connection.acknowledge(received)
            // Carol's next frame is handled after her receipt; Alice's ping is answered
            // after anything written to her socket before it.
            _ = try await carol.connection.fetchPending()
            _ = try await alice.connection.ping()
            #expect(await alice.events.all(.messageDelivered).isEmpty)
            #expect(try await stack.storedReceipts(alice.whisperId) == 0)
            #expect(try await stack.pendingDepth(bob.whisperId) == 1)

            // Nothing waits for an answer: the SDK's sweeper has stopped, so an idle socket
            // does not wake its app four times a second.
            try await waitUntil { await !carol.connection.isSweeping }
            // A receipt gets no answer: asked as a request, it times out on the sweeper
            // the request started again, and the socket goes on working.
            let started = ContinuousClock.now
            await #expect(throws: WhisperClientError.timedOut) {
                _ = try await carol.connection.request(DeliveryReceipt(
                    sessionToken: carol.token, .init(messageId: received.messageId, from: carol.whisperId, to: alice.whisperId,
                    status: .delivered, timestamp: Clock.millisecondsNow())
                ), timeout: .milliseconds(300))
            }
            let waited = ContinuousClock.now - started
            #expect(waited >= .milliseconds(300), "timed out early, after \(waited)")
            _ = try await carol.connection.ping()
        }
    }

    @Test func badMessagesAreRefusedAndNothingIsQueued() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let mallory = try await stack.user(on: 0)

            func refused(_ message: SendMessage, _ code: ErrorCode, _ what: String) async {
                do {
                    try await alice.connection.send(message)
                    Issue.record("\(what): accepted")
                } catch WhisperClientError.refused(let actual, _) {
                    #expect(actual == code, "\(what)")
                } catch {
                    Issue.record("\(what): \(error)")
                }
            }

            var forged = alice.message("forged", to: bob)
            forged.sig = mallory.message("forged", to: bob, messageId: forged.messageId, timestamp: forged.timestamp).sig
            await refused(forged, .authFailed, "forged signature")

            var tampered = alice.message("tampered", to: bob)
            tampered.ciphertext = alice.message("other", to: bob).ciphertext
            await refused(tampered, .authFailed, "ciphertext changed after signing")

            let wrongFrom = MessageCrypto.makeMessage(Array("hi".utf8), from: (mallory.whisperId, mallory.keys), to: bob.peerKeys, sessionToken: alice.token)
            await refused(wrongFrom, .forbidden, "from is not the session's identity")

            await refused(alice.message("late", to: bob, timestamp: Clock.millisecondsNow() - 11 * 60_000), .invalidTimestamp, "stale timestamp")
            await refused(alice.message("early", to: bob, timestamp: Clock.millisecondsNow() + 11 * 60_000), .invalidTimestamp, "future timestamp")

            let oversize = alice.message(String(repeating: "x", count: Limits.MAX_TEXT_BYTES + 1), to: bob)
            await refused(oversize, .invalidPayload, "ciphertext over MAX_TEXT_BYTES")

            let ghost = TestUser(whisperId: WhisperID.generate(), keys: bob.keys, token: bob.token, connection: bob.connection, events: bob.events)
            await refused(alice.message("anyone?", to: ghost), .notFound, "unknown recipient")

            #expect(try await stack.pendingDepth(bob.whisperId) == 0)
            #expect(await bob.events.all(.messageReceived).isEmpty)
            // The socket is still usable.
            try await alice.connection.send(alice.message("a good one", to: bob))
            try await bob.events(.messageReceived)
        }
    }

    @Test func messagesToOneRecipientAreLimitedWithoutLosingResends() async throws {
        try await MessagingStack.start(routers: 1) {
            $0.limits[.sendPerPair] = RateLimitRule("5/60s")!
        }.running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let carol = try await stack.user(on: 1)
            var sent: [SendMessage] = []
            for index in 0..<5 {
                let message = alice.message("m\(index)", to: bob)
                try await alice.connection.send(message)
                sent.append(message)
            }
            do {
                try await alice.connection.send(alice.message("one too many", to: bob))
                Issue.record("sixth message accepted")
            } catch WhisperClientError.refused(let code, _) {
                #expect(code == .rateLimited)
            }
            #expect(try await stack.pendingDepth(bob.whisperId) == 5)
            // A resend of an accepted message is answered as before, not refused: it costs nothing.
            let again = try await alice.connection.send(sent[0])
            #expect(again.messageId == sent[0].messageId)
            // The limit is per recipient: Carol can still be written to.
            try await alice.connection.send(alice.message("hello carol", to: carol))
            #expect(try await stack.pendingDepth(bob.whisperId) == 5)
        }
    }

    @Test func aSenderOverItsOwnLimitIsRefusedByTheGateway() async throws {
        try await MessagingStack.start(routers: 1, gateway: {
            $0.limits[.sendPerSender] = RateLimitRule("3/60s")!
        }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let carol = try await stack.user(on: 1)
            try await alice.connection.send(alice.message("1", to: bob))
            try await alice.connection.send(alice.message("2", to: carol))
            try await alice.connection.send(alice.message("3", to: bob))
            let streamBefore = try await stack.routerStreamLength()
            do {
                try await alice.connection.send(alice.message("4", to: carol))
                Issue.record("fourth message accepted")
            } catch WhisperClientError.refused(let code, let message) {
                #expect(code == .rateLimited)
                #expect(message.contains("retry in"))
            }
            // Refused at the edge: nothing entered the router stream or a queue.
            #expect(try await stack.routerStreamLength() == streamBefore)
            #expect(try await stack.pendingDepth(carol.whisperId) == 1)
            // Other senders are not affected.
            try await bob.connection.send(bob.message("fine", to: alice))
        }
    }

    @Test func acknowledgementsAreGatheredAndNoneIsLeftOut() async throws {
        // The routers' acknowledgements: messages through the stream (group copies).
        try await MessagingStack.start(routers: 1, router: { $0.ackInterval = .milliseconds(300) }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let groupId = try await stack.streamGroup(alice, [bob])
            _ = try await stack.withRedis { try await $0.send("CONFIG", "RESETSTAT") }
            for index in 0..<20 {
                _ = try await alice.connection.send(alice.copy("m\(index)", to: bob, in: groupId))
            }
            _ = try await bob.events.wait(for: .messageReceived, count: 20, timeout: .seconds(10))
            // Every entry is acknowledged (how few XACKs that takes is the benchmark's matter).
            try await waitUntil { (try? await stack.unacknowledgedEntries()) == 0 }
            #expect((try await stack.commandCalls("xack") ?? 0) >= 1)
        }
    }

    /// Each read carries the acknowledgements of what finished before it: with the
    /// acknowledging task held back for an hour, every entry still leaves the group's
    /// pending list and the stream (the read that ends an idle second takes the last).
    @Test func readsCarryTheAcknowledgements() async throws {
        try await MessagingStack.start(routers: 1, router: { $0.ackInterval = .seconds(3600) }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let groupId = try await stack.streamGroup(alice, [bob])
            for index in 0..<10 {
                _ = try await alice.connection.send(alice.copy("m\(index)", to: bob, in: groupId))
            }
            _ = try await bob.events.wait(for: .messageReceived, count: 10, timeout: .seconds(10))
            try await waitUntil { (try? await stack.unacknowledgedEntries()) == 0 }
            try await waitUntil { (try? await stack.routerStreamBacklog()) == 0 }
        }
    }

    /// With a read linger, a router that just read a short batch waits before reading
    /// again; a lone message to an idle router still arrives, and so does a burst. How
    /// much the linger saves, and how long it holds a message, the benchmark measures.
    @Test func aReadLingerDelaysNothingForGood() async throws {
        try await MessagingStack.start(routers: 1, router: { $0.readLinger = .milliseconds(600) }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let groupId = try await stack.streamGroup(alice, [bob])
            try await alice.connection.sendOnly(alice.copy("first", to: bob, in: groupId))
            _ = try await bob.events.wait(for: .messageReceived, count: 1, timeout: .seconds(5))
            for index in 0..<9 {
                try await alice.connection.sendOnly(alice.copy("m\(index)", to: bob, in: groupId))
            }
            let received = try await bob.events.wait(for: .messageReceived, count: 10, timeout: .seconds(5))
            #expect(Set(received.compactMap { $0.payload(as: MessageReceived.self)?.messageId }).count == 10)
        }
    }
}
