import Foundation
import Synchronization
import TestWaiting
import Testing
@testable import RouterService
import WhisperMessaging
import WhisperShared

/// The router's per-sender lanes: order within a sender, a bound on entries in flight,
/// and what is acknowledged (or left for a claim) after success and failure.
@Suite struct EntryLanesTests {
    static func item(_ id: String, from sender: String) -> EntryLanes.Item {
        EntryLanes.Item(
            id: id,
            entry: RouterStream.Entry(gateway: "g", connId: "c", whisperId: sender, type: .groupSendMessage, requestId: nil, payload: [], receivedAt: 0),
            redelivery: false
        )
    }

    @Test func oneLanePerSenderInStreamOrder() {
        let lanes = EntryLanes(limit: 100)
        #expect(lanes.add(Self.item("1-0", from: "A")), "the first entry of a sender starts its lane")
        #expect(!lanes.add(Self.item("2-0", from: "A")))
        #expect(lanes.add(Self.item("3-0", from: "B")))
        #expect(!lanes.add(Self.item("4-0", from: "A")))
        #expect(!lanes.add(Self.item("1-0", from: "A")), "an entry already in hand is not queued twice")

        var handledA: [String] = []
        while let item = lanes.next(for: "A") {
            handledA.append(item.id)
            lanes.finished(item)
        }
        #expect(handledA == ["1-0", "2-0", "4-0"])
        // A's lane ended: its next entry starts a new one.
        #expect(lanes.add(Self.item("5-0", from: "A")))
        #expect(lanes.next(for: "B")?.id == "3-0")
        #expect(Set(lanes.takeFinished()) == ["1-0", "2-0", "4-0"])
        #expect(lanes.takeFinished().isEmpty)
    }

    @Test func aFailedEntryLeavesTheRestOfItsLaneForAClaim() {
        let lanes = EntryLanes(limit: 100)
        _ = lanes.add(Self.item("1-0", from: "A"))
        _ = lanes.add(Self.item("2-0", from: "A"))
        _ = lanes.add(Self.item("3-0", from: "B"))
        #expect(lanes.next(for: "A")?.id == "1-0")
        lanes.abandon("A")
        #expect(!lanes.isHandling("1-0") && !lanes.isHandling("2-0"), "claimable again")
        #expect(lanes.isHandling("3-0"))
        #expect(lanes.takeFinished().isEmpty, "nothing of the failed lane is acknowledged")
        #expect(lanes.next(for: "A") == nil)
    }

    @Test func readingWaitsWhileTheLimitIsInFlight() async throws {
        let lanes = EntryLanes(limit: 2)
        _ = lanes.add(Self.item("1-0", from: "A"))
        _ = lanes.add(Self.item("2-0", from: "B"))
        #expect(lanes.room == 1, "never asks Redis for zero entries")
        final class Flag: Sendable { let value = Atomic<Bool>(false) }
        let resumed = Flag()
        let waited = Task {
            await lanes.waitForRoom()
            resumed.value.store(true, ordering: .relaxed)
        }
        // The reader is parked, and stays parked while the limit is in flight.
        try await waitUntil { lanes.isWaitingForRoom }
        let resumedEarly = resumed.value.load(ordering: .relaxed)
        #expect(!resumedEarly)
        lanes.finished(try #require(lanes.next(for: "A")))
        await waited.value
        let resumedLater = resumed.value.load(ordering: .relaxed)
        #expect(resumedLater, "room came when an entry finished")
        #expect(!lanes.isWaitingForRoom)
        // With room to spare it returns at once.
        await lanes.waitForRoom()
    }
}
