import Testing
@testable import GatewayService

@Suite struct LocalDeliveriesTests {
    @Test func eachStatusIsTakenOnceAndReadForgetsTheMessage() {
        let deliveries = LocalDeliveries()
        deliveries.remember(recipient: "bob", messageId: "M-1", sender: "alice", senderConnection: "c1")
        let expected = LocalDeliveries.Delivery(sender: "alice", senderConnection: "c1")
        // Message IDs compare without case, as the queues store them.
        #expect(deliveries.take(recipient: "bob", messageId: "m-1", delivered: true) == expected)
        #expect(deliveries.take(recipient: "bob", messageId: "M-1", delivered: true) == nil, "a repeat is looked up")
        #expect(deliveries.take(recipient: "bob", messageId: "M-1", delivered: false) == expected)
        #expect(deliveries.take(recipient: "bob", messageId: "M-1", delivered: false) == nil)
        #expect(deliveries.count == 0)
    }

    @Test func onlyTheRecipientItWasDeliveredToFindsIt() {
        let deliveries = LocalDeliveries()
        deliveries.remember(recipient: "bob", messageId: "m", sender: "alice", senderConnection: "c1")
        #expect(deliveries.take(recipient: "mallory", messageId: "m", delivered: true) == nil)
        #expect(deliveries.take(recipient: "alice", messageId: "m", delivered: true) == nil)
        #expect(deliveries.take(recipient: "bob", messageId: "m", delivered: true) != nil)
    }

    @Test func theOldestAreForgottenPastTheCapacity() {
        let deliveries = LocalDeliveries(capacity: 100)
        for index in 0..<1_000 {
            deliveries.remember(recipient: "bob", messageId: "m\(index)", sender: "alice", senderConnection: "c")
            // Some are taken on the way (read), which leaves stale keys to skip.
            if index % 3 == 0 { _ = deliveries.take(recipient: "bob", messageId: "m\(index)", delivered: false) }
            #expect(deliveries.count <= 100)
        }
        #expect(deliveries.take(recipient: "bob", messageId: "m1", delivered: true) == nil, "forgotten")
        #expect(deliveries.take(recipient: "bob", messageId: "m998", delivered: true) != nil, "recent")
        #expect(deliveries.take(recipient: "bob", messageId: "m999", delivered: true) == nil, "taken when remembered")
    }

    @Test func whatOutlivedItsLifetimeIsForgotten() {
        let deliveries = LocalDeliveries(lifetime: .zero)
        deliveries.remember(recipient: "bob", messageId: "m", sender: "alice", senderConnection: "c1")
        #expect(deliveries.take(recipient: "bob", messageId: "m", delivered: true) == nil)
        #expect(deliveries.count == 0)
    }

    @Test func handOversAreKnownPerStatusForTheirWindow() {
        let recent = RecentHandOvers()
        recent.insert(.init(recipient: "bob", messageId: "M-1", delivered: true))
        #expect(recent.contains(.init(recipient: "bob", messageId: "m-1", delivered: true)))
        #expect(!recent.contains(.init(recipient: "bob", messageId: "M-1", delivered: false)), "read is its own status")
        #expect(!recent.contains(.init(recipient: "alice", messageId: "M-1", delivered: true)))
        let expired = RecentHandOvers(window: .zero)
        expired.insert(.init(recipient: "bob", messageId: "m", delivered: true))
        #expect(!expired.contains(.init(recipient: "bob", messageId: "m", delivered: true)), "past its window Redis decides")
        #expect(expired.count == 0)
    }

    @Test func handOversAreBoundedOldestFirst() {
        let recent = RecentHandOvers(capacity: 100)
        for index in 0..<1_000 {
            recent.insert(.init(recipient: "bob", messageId: "m\(index)", delivered: true))
        }
        #expect(recent.count == 100)
        #expect(!recent.contains(.init(recipient: "bob", messageId: "m0", delivered: true)))
        #expect(recent.contains(.init(recipient: "bob", messageId: "m999", delivered: true)))
    }
}
