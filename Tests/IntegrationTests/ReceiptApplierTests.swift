import Foundation
@testable import GatewayService
import Testing
import WhisperClient
import WhisperMessaging
import WhisperShared

/// A receipt's application to the recipient's queue waits for other work
/// (`ReceiptApplier`): it goes in the write of the gateway's next store, before any page
/// the recipient asks for, and at shutdown at the latest. These run with a wait of an
/// hour, so only those events can have applied it. A gateway's first receipt is applied
/// at once (it teaches Redis the script), so each test begins with one.
@Suite(.serialized)
struct ReceiptApplierTests {
    /// Waits until the sender has the receipt for `messageId`.
    private static func waitForReceipt(of messageId: String, at sender: TestUser) async throws {
        try await waitUntil {
            await sender.events.all(.messageDelivered).contains { $0.payload(as: MessageDelivered.self)?.messageId == messageId }
        }
    }

    /// A first exchange, whose receipt is applied at once.
    private static func warmUp(_ alice: TestUser, _ bob: TestUser, in stack: MessagingStack) async throws {
        let (first, atBob) = try await alice.sendAndWaitForArrival("first", to: bob)
        try await bob.connection.acknowledge(atBob)
        try await waitUntil { try await stack.messageState(first.messageId, for: bob) == "delivered" }
        try await waitForReceipt(of: first.messageId, at: alice)
    }

    /// Alice and Bob on one gateway whose applications wait an hour: a message from
    /// Alice that Bob has acknowledged and whose receipt Alice has, not yet applied.
    /// `body` runs with them; the stack stops after it (stopping it twice is harmless).
    private static func acknowledgedNotApplied(
        _ body: (_ stack: MessagingStack, _ alice: TestUser, _ bob: TestUser, _ message: SendMessage, _ atBob: MessageReceived) async throws -> Void
    ) async throws {
        try await MessagingStack.start(routers: 0, gateway: { $0.receiptApplyMaxWait = .seconds(3_600) }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 0)
            try await warmUp(alice, bob, in: stack)
            let (message, atBob) = try await alice.sendAndWaitForArrival("one", to: bob)
            try await bob.connection.acknowledge(atBob)
            // Given to Alice before it is applied: the receipt does not wait.
            try await waitForReceipt(of: message.messageId, at: alice)
            _ = try await bob.connection.ping()
            #expect(try await stack.messageState(message.messageId, for: bob) == "pending", "waiting for other work")
            #expect(try await stack.pendingDepth(bob.whisperId) == 1)
            try await body(stack, alice, bob, message, atBob)
        }
    }

    @Test func anApplicationGoesInTheWriteOfTheNextStore() async throws {
        try await Self.acknowledgedNotApplied { stack, alice, bob, message, atBob in
            // A repeat meanwhile is still a repeat: not passed on again.
            try await bob.connection.acknowledge(atBob)
            _ = try await bob.connection.ping()

            // Carol's message to Dave is a store on the same gateway: it carries the application.
            let carol = try await stack.user(on: 0)
            let dave = try await stack.offlineUser(on: 0)
            try await carol.connection.send(carol.message("unrelated", to: dave))
            #expect(try await stack.messageState(message.messageId, for: bob) == "delivered")
            #expect(try await stack.pendingDepth(bob.whisperId) == 0)
            _ = try await alice.connection.ping()
            #expect(await alice.events.all(.messageDelivered).count == 2, "the warm-up's and this one's, once each")
        }
    }

    @Test func aPageDoesNotHoldWhatTheSocketHasJustAcknowledged() async throws {
        try await MessagingStack.start(gateway: { $0.receiptApplyMaxWait = .seconds(3_600) }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 0)
            try await Self.warmUp(alice, bob, in: stack)
            let (first, atBob) = try await alice.sendAndWaitForArrival("one", to: bob)
            let (second, _) = try await alice.sendAndWaitForArrival("two", to: bob)
            try await bob.connection.acknowledge(atBob)
            let page = try await bob.connection.fetchPending()
            #expect(page.messages.map(\.messageId) == [second.messageId], "the first was applied before the page")
            #expect(try await stack.messageState(first.messageId, for: bob) == "delivered")
        }
    }

    @Test func whatWaitsIsAppliedWhenTheGatewayStops() async throws {
        try await Self.acknowledgedNotApplied { stack, _, bob, message, _ in
            try await stack.stop()
            #expect(try await stack.messageState(message.messageId, for: bob) == "delivered")
            #expect(try await stack.pendingDepth(bob.whisperId) == 0)
        }
    }

    @Test func withoutOtherWorkItGoesAfterItsWait() async throws {
        try await MessagingStack.start(routers: 0, gateway: { $0.receiptApplyMaxWait = .milliseconds(20) }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            try await Self.warmUp(alice, bob, in: stack)
            let (message, atBob) = try await alice.sendAndWaitForArrival("one", to: bob)
            try await bob.connection.acknowledge(atBob)
            try await waitUntil { try await stack.messageState(message.messageId, for: bob) == "delivered" }
            #expect(try await stack.pendingDepth(bob.whisperId) == 0)
        }
    }
}
