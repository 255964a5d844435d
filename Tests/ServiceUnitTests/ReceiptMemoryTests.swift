import Testing
import WhisperMessaging
@testable import GatewayService

/// The gateway's one memory of recent receipts (`ReceiptMemory`): deliveries it made,
/// each status taken once, what it forgets and when.
@Suite struct ReceiptMemoryTests {
    private func receipt(_ recipient: String, _ messageId: String, delivered: Bool = true) -> PendingQueue.ReceiptApplication {
        .init(recipient: recipient, messageId: messageId, delivered: delivered)
    }

    @Test func eachStatusIsTakenOnceWithTheDelivery() {
        let memory = ReceiptMemory()
        memory.remember(recipient: "bob", messageId: "M-1", sender: "alice", senderConnection: "c1")
        let expected = ReceiptMemory.Delivery(sender: "alice", senderConnection: "c1")
        // Message IDs compare without case, as the queues store them.
        #expect(memory.claim(receipt("bob", "m-1")) == .first(expected))
        #expect(memory.claim(receipt("bob", "M-1")) == .repeated, "a repeat is known as one")
        #expect(memory.claim(receipt("bob", "M-1", delivered: false)) == .first(expected), "read is its own status")
        #expect(memory.claim(receipt("bob", "M-1", delivered: false)) == .repeated)
    }

    @Test func onlyTheRecipientItWasDeliveredToFindsIt() {
        let memory = ReceiptMemory()
        memory.remember(recipient: "bob", messageId: "m", sender: "alice", senderConnection: "c1")
        #expect(memory.claim(receipt("mallory", "m")) == .first(nil))
        #expect(memory.claim(receipt("alice", "m")) == .first(nil))
        #expect(memory.claim(receipt("bob", "m")) == .first(.init(sender: "alice", senderConnection: "c1")))
    }

    @Test func aReceiptNotDeliveredHereIsKnownOnceTakenUntilReleased() {
        let memory = ReceiptMemory()
        #expect(memory.claim(receipt("bob", "M-1")) == .first(nil))
        #expect(memory.claim(receipt("bob", "m-1")) == .repeated)
        #expect(memory.claim(receipt("alice", "M-1")) == .first(nil), "another recipient's")
        memory.release(receipt("bob", "M-1"))
        #expect(memory.claim(receipt("bob", "M-1")) == .first(nil), "released: looked up again")
        // Released with nothing else known, the entry goes.
        memory.release(receipt("bob", "M-1"))
        memory.release(receipt("alice", "M-1"))
        #expect(memory.count == 0)
    }

    @Test func aReleasedDeliveryKeepsItsOrigin() {
        let memory = ReceiptMemory()
        memory.remember(recipient: "bob", messageId: "m", sender: "alice", senderConnection: "c1", senderGateway: "gateway-a")
        let expected = ReceiptMemory.Delivery(sender: "alice", senderConnection: "c1", senderGateway: "gateway-a")
        #expect(memory.claim(receipt("bob", "m")) == .first(expected))
        memory.release(receipt("bob", "m"))
        #expect(memory.claim(receipt("bob", "m")) == .first(expected))
        // A redelivery of the message leaves what was taken taken.
        memory.remember(recipient: "bob", messageId: "m", sender: "alice", senderConnection: "c2")
        #expect(memory.claim(receipt("bob", "m")) == .repeated)
    }

    @Test func theOldestAreForgottenPastTheCapacity() {
        let memory = ReceiptMemory(capacity: 100)
        for index in 0..<1_000 {
            memory.remember(recipient: "bob", messageId: "m\(index)", sender: "alice", senderConnection: "c")
            // Some are read on the way.
            if index % 3 == 0 { _ = memory.claim(receipt("bob", "m\(index)", delivered: false)) }
            #expect(memory.count <= 100)
        }
        #expect(memory.claim(receipt("bob", "m1")) == .first(nil), "forgotten")
        #expect(memory.claim(receipt("bob", "m998")) == .first(.init(sender: "alice", senderConnection: "c")), "recent")
        #expect(memory.claim(receipt("bob", "m998")) == .repeated)
    }

    @Test func whatOutlivedItsLifetimeIsForgotten() {
        let memory = ReceiptMemory(lifetime: .zero)
        memory.remember(recipient: "bob", messageId: "m", sender: "alice", senderConnection: "c1")
        #expect(memory.claim(receipt("bob", "m")) == .first(nil), "past its lifetime Redis decides")
        #expect(memory.claim(receipt("bob", "m")) == .first(nil))
    }

    @Test func claimsAreBoundedOldestFirst() {
        let memory = ReceiptMemory(capacity: 100)
        for index in 0..<1_000 {
            _ = memory.claim(receipt("bob", "m\(index)"))
        }
        #expect(memory.count == 100)
        #expect(memory.claim(receipt("bob", "m0")) == .first(nil))
        #expect(memory.claim(receipt("bob", "m999")) == .repeated)
    }
}
