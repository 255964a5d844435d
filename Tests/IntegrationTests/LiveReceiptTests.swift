import Foundation
@testable import GatewayService
import Testing
import WhisperClient
import WhisperMessaging
import WhisperShared

/// A receipt whose sender's socket is on another gateway is handed to that gateway
/// (`live_receipt`), not stored: it writes the frame and applies the receipt, or stores
/// the frame when its socket cannot take it. Gateway 0 holds the senders, gateway 1 the
/// recipients; no routers, so no stream command runs.
@Suite(.serialized)
struct LiveReceiptTests {
    private static func presence(of user: TestUser, in stack: MessagingStack) async throws -> PresenceRecord {
        let value = try await stack.withRedis { try await $0.send("GET", RedisKeys.presence(user.whisperId)).string }
        return try #require(value.flatMap(PresenceRecord.init(encoded:)))
    }

    private static func handedOver(in stack: MessagingStack) async throws -> Double {
        Metrics.value(in: try await stack.metricsText(of: [stack.gateways[1]]), "whisper_gateway_receipts_handed_over_total")
    }

    @Test func aReceiptCrossesGatewaysWithoutAStore() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            for text in ["one", "two", "three"] {
                let (message, atBob) = try await alice.sendAndWaitForArrival(text, to: bob)
                try await bob.connection.acknowledge(atBob)
                try await waitUntil {
                    await alice.events.all(.messageDelivered).contains { $0.payload(as: MessageDelivered.self)?.messageId == message.messageId }
                }
                // Applied by Alice's gateway once her socket took the receipt.
                try await waitUntil { try await stack.messageState(message.messageId, for: bob) == "delivered" }
            }
            #expect(try await stack.pendingDepth(bob.whisperId) == 0)
            #expect(try await Self.handedOver(in: stack) == 3)
            // Bob's gateway knew each message's origin from its delivery: no look-up.
            #expect(Metrics.value(in: try await stack.metricsText(of: [stack.gateways[1]]), "whisper_gateway_receipts_known_total") == 3)
            // Nothing was stored for Alice: her receipt store was not even created.
            #expect(try await stack.withRedis { try await $0.send("EXISTS", OwedStore.receipts.key(alice.whisperId)).int } == 0)
            #expect(await alice.events.all(.messageDelivered).count == 3)
        }
    }

    /// The sender's gateway applies a handed-over receipt with its next store or after
    /// its wait (here a long one, so that nothing is applied while the repeats come):
    /// repeats meanwhile still look pending in Redis, and are not passed on again.
    @Test func repeatsBeforeTheSendersGatewayAppliedAreNotPassedOn() async throws {
        try await MessagingStack.start(routers: 0, gateway: { $0.receiptApplyMaxWait = .seconds(30) }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let (_, atBob) = try await alice.sendAndWaitForArrival("one", to: bob)
            for _ in 0..<3 { try await bob.connection.acknowledge(atBob, status: .delivered) }
            for _ in 0..<3 { try await bob.connection.acknowledge(atBob, status: .read) }
            let told = try await alice.events(.messageDelivered, count: 2)
            // Bob's frames are served in order: once his ping is answered, every repeat was handled.
            _ = try await bob.connection.ping()
            #expect(await alice.events.all(.messageDelivered).count == told.count)
            #expect(try await Self.handedOver(in: stack) == 2, "one hand-over per status")
        }
    }

    @Test func aLiveReceiptForASocketThatIsGoneIsStoredForTheSendersSocketOfNowThenApplied() async throws {
        try await MessagingStack.start(routers: 0).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let (message, _) = try await alice.sendAndWaitForArrival("one", to: bob)
            let aliceGateway = try await Self.presence(of: alice, in: stack).gateway
            // What Bob's gateway would publish, naming a socket Alice's gateway no longer has.
            let live = LiveReceipt(owner: alice.whisperId, recipient: bob.whisperId, messageId: message.messageId, delivered: true)
            let frame = ServerFrameCodec.encode(MessageDelivered(messageId: message.messageId, status: .delivered, timestamp: 1, from: bob.whisperId))
            let command = GatewayCommand(kind: .liveReceipt, connId: "closed-a-moment-ago", frame: frame, live: live)
            let receivers = try await stack.withRedis { try await command.publish(to: aliceGateway, on: $0) }
            #expect(receivers == 1)
            try await waitUntil { try await stack.messageState(message.messageId, for: bob) == "delivered" }
            #expect(try await stack.pendingDepth(bob.whisperId) == 0)
            // Stored, and handed to the socket her presence names now, which settles it.
            try await waitUntil {
                await alice.events.all(.messageDelivered).contains { $0.payload(as: MessageDelivered.self)?.messageId == message.messageId }
            }
            #expect(try await stack.withRedis { try await $0.send("EXISTS", OwedStore.receipts.key(alice.whisperId)).int } == 1, "it was stored")
            try await waitUntil { try await stack.storedReceipts(alice.whisperId) == 0 }
        }
    }

    @Test func aReceiptForAGatewayThatIsGoneIsStoredAndAppliedWhereItArrived() async throws {
        // A group copy, through a router, so the delivery carries no origin and the
        // receipt is looked up.
        try await MessagingStack.start(routers: 1).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let message = alice.copy("one", to: bob, in: try await stack.streamGroup(alice, [bob]))
            _ = try await alice.connection.send(message)
            let atBob = try #require(try await bob.events(.messageReceived).first?.payload(as: MessageReceived.self))
            // Alice's presence names a gateway that no longer listens.
            try await stack.withRedis { _ = try await $0.send("SET", RedisKeys.presence(alice.whisperId), "gateway-gone conn-1", "PX", 60_000) }
            try await bob.connection.acknowledge(atBob)
            try await waitUntil { try await stack.messageState(message.messageId, for: bob) == "delivered" }
            #expect(try await stack.storedReceipts(alice.whisperId) == 1)
            #expect(try await Self.handedOver(in: stack) == 0)
        }
    }

    @Test func aDeliverCarriesItsOriginWithOrWithoutATrace() throws {
        let origin = DeliveryOrigin(gateway: "gateway-a", connId: "c-1", sender: "WSP-A", recipient: "WSP-B", messageId: "m-1")
        let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        for traceparent in [nil, trace] {
            let command = GatewayCommand(kind: .deliver, connId: "c-2", frame: Array("{}".utf8), traceparent: traceparent, origin: origin)
            #expect(GatewayCommand.decode(command.encoded) == command)
        }
        // What the store script publishes: the detail as PendingQueue passes it.
        let detail = GatewayCommand.deliverDetail(traceparent: trace, origin: origin)
        let published = GatewayCommand.decode(Array("deliver\nc-2\n\(detail)\n17\n{}".utf8))
        #expect(published?.origin == origin && published?.traceparent == trace && published?.acceptedAt == 17)
        // A detail that is not an origin is none.
        #expect(GatewayCommand.decode(Array("deliver\nc-2\na b c\n\n{}".utf8))?.origin == nil)
    }

    @Test func theCommandReadsBackAsItWasWritten() throws {
        let live = LiveReceipt(owner: "WSP-A", recipient: "WSP-B", messageId: "m-1", delivered: false)
        let command = GatewayCommand(kind: .liveReceipt, connId: "c-1", frame: Array("{}".utf8), live: live)
        #expect(GatewayCommand.decode(command.encoded) == command)
        // Without its frame, or with a status it does not know, it is not read at all.
        #expect(GatewayCommand.decode(Array("live_receipt\nc-1\nWSP-A WSP-B m-1 read\n\n".utf8)) == nil)
        #expect(GatewayCommand.decode(Array("live_receipt\nc-1\nWSP-A WSP-B m-1 seen\n\n{}".utf8)) == nil)
    }
}
