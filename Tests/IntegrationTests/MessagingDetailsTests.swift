import Foundation
import Testing
import WhisperClient
import WhisperShared

/// What else issue 4 names: the push job for an offline recipient, paging while new
/// messages arrive, and the routing metrics.
@Suite struct MessagingDetailsTests {
    @Test func anOfflineRecipientIsAnnouncedByAPushJobThatCarriesNoContent() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let carolFirst = try await stack.offlineUser(on: 1)

            let live = alice.message("hello bob", to: bob)
            try await alice.connection.send(live)
            try await bob.events(.messageReceived)
            let queued = alice.message("hello carol", to: carolFirst)
            try await alice.connection.send(queued)

            // Alice's entries are handled in order: once carol's job is there, one for bob's
            // message would be there too, had there been one.
            try await waitUntil { try await stack.pushJobs().count >= 1 }
            let jobs = try await stack.pushJobs()
            #expect(jobs.count == 1, "\(jobs)")
            let job = try #require(jobs.first)
            #expect(Set(job.keys) == ["to", "kind", "id", "at"], "a push job names who and why, nothing else")
            #expect(job["to"] == carolFirst.whisperId)
            #expect(job["kind"] == "message")
            #expect(job["id"] == queued.messageId)
            let at = try #require(job["at"].flatMap { Int64($0) })
            #expect(abs(at - Clock.millisecondsNow()) < 60_000)
        }
    }

    /// A client that acknowledges its messages and closes at once (a command-line client,
    /// an app sent to the background) loses none of those receipts: frames that came
    /// before its close are handled.
    @Test func receiptsWrittenJustBeforeTheClientClosesAreApplied() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bobFirst = try await stack.offlineUser(on: 1)
            let sent = try await alice.send(20, to: bobFirst, labelled: "ack then close")
            #expect(try await stack.pendingDepth(bobFirst.whisperId) == 20)
            let bob = try await stack.reconnect(bobFirst, on: 1)
            let page = try await bob.connection.fetchPending(limit: 50)
            #expect(Set(page.messages.map(\.messageId)) == sent)
            for message in page.messages { try await bob.connection.acknowledge(message) }
            await bob.connection.close()
            try await waitUntil { try await stack.pendingDepth(bobFirst.whisperId) == 0 }
            try await waitUntil { await alice.events.all(.messageDelivered).count == 20 }
        }
    }

    @Test func aPageWalkWhileMessagesKeepArrivingSeesEachMessageOnce() async throws {
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bobFirst = try await stack.offlineUser(on: 1)
            let before = try await alice.send(60, to: bobFirst, labelled: "before")

            // Alice keeps sending while Bob walks the queue, 20 a page, acknowledging each.
            let bob = try await stack.reconnect(bobFirst, on: 0)
            let sender = Task {
                var during: Set<String> = []
                for index in 0..<60 {
                    let message = alice.message("during \(index)", to: bobFirst)
                    try await alice.connection.send(message)
                    during.insert(message.messageId)
                }
                return during
            }
            var walk: [String] = []
            var cursor: String?
            repeat {
                let page = try await bob.connection.fetchPending(cursor: cursor, limit: 20)
                for message in page.messages {
                    walk.append(message.messageId)
                    try await bob.connection.acknowledge(message)
                }
                cursor = page.nextCursor
            } while cursor != nil
            let during = try await sender.value

            #expect(walk.count == Set(walk).count, "a message came twice in one walk")
            #expect(before.isSubset(of: Set(walk)), "\(before.subtracting(walk).count) earlier messages missing from the walk")
            #expect(Set(walk).isSubset(of: before.union(during)))
            // The earlier messages come first, in the order they were sent.
            let earlier = walk.filter { before.contains($0) }
            #expect(Array(walk.prefix(earlier.count)) == earlier)
            // Whatever the walk did not include came live; after acknowledging it too the queue is empty.
            let missed = during.subtracting(walk)
            try await waitUntil(timeout: .seconds(10)) {
                let live = await bob.events.all(.messageReceived).compactMap { try? $0.payload(as: MessageReceived.self) }
                return missed.isSubset(of: Set(live.map(\.messageId)))
            }
            for frame in await bob.events.all(.messageReceived) {
                let message = try #require(try frame.payload(as: MessageReceived.self))
                if missed.contains(message.messageId) { try await bob.connection.acknowledge(message) }
            }
            try await waitUntil { try await stack.pendingDepth(bob.whisperId) == 0 }
        }
    }

    @Test func routingIsCountedAndTimed() async throws {
        // Messages through the router stream (group copies): the routers count them.
        // DirectSendTests counts 1:1 messages at the gateways.
        try await MessagingStack.start().running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let groupId = try await stack.streamGroup(alice, [bob])
            for index in 0..<3 {
                _ = try await alice.connection.send(alice.copy("counted \(index)", to: bob, in: groupId))
            }
            let frames = try await bob.events(.messageReceived, count: 3)
            for frame in frames {
                try await bob.connection.acknowledge(try #require(try frame.payload(as: MessageReceived.self)))
            }
            try await alice.events(.messageDelivered, count: 3)
            // Refused by a router: over the size limit, a stale timestamp (against the
            // router's clock), a forged signature.
            _ = try? await alice.connection.send(alice.copy(String(repeating: "x", count: Limits.MAX_TEXT_BYTES + 1), to: bob, in: groupId))
            _ = try? await alice.connection.send(alice.copy("late", to: bob, in: groupId, timestamp: Clock.millisecondsNow() - 11 * 60_000))
            var forged = alice.copy("forged", to: bob, in: groupId)
            forged.sig = alice.copy("another text", to: bob, in: groupId, messageId: forged.messageId, timestamp: forged.timestamp).sig
            _ = try? await alice.connection.send(forged)
            // Refused by a gateway: a frame that is not JSON.
            try await WebSocketTest.connect("ws://127.0.0.1:\(stack.gateways[1].port)/ws") { session in
                try await session.send("not json")
                _ = try await session.receive()
            }

            let gateways = try await stack.metricsText(of: stack.gateways)
            let routers = try await stack.metricsText(of: stack.routers)
            // Accept -> written to the recipient's socket, measured by the recipient's gateway.
            #expect(Metrics.value(in: gateways, "whisper_routing_latency_seconds_count") == 3, "\(gateways)")
            #expect(Metrics.value(in: routers, "whisper_messages_routed_total", ["outcome": "delivered"]) == 3)
            // Receipts are served by the gateways.
            #expect(Metrics.value(in: gateways, "whisper_gateway_receipts_total", ["outcome": "passed"]) == 3)
            #expect(Metrics.value(in: routers, "whisper_pending_queue_depth_count") == 3)
            #expect(Metrics.value(in: gateways, "whisper_errors_total", ["code": "INVALID_PAYLOAD"]) == 1)
            #expect(Metrics.value(in: routers, "whisper_errors_total", ["code": "INVALID_PAYLOAD"]) == 1)
            #expect(Metrics.value(in: routers, "whisper_errors_total", ["code": "INVALID_TIMESTAMP"]) == 1)
            #expect(Metrics.value(in: routers, "whisper_errors_total", ["code": "AUTH_FAILED"]) == 1)
            #expect(Metrics.value(in: routers, "whisper_messages_routed_total", ["outcome": "refused"]) == 3)
        }
    }
}

/// Reads Prometheus text exposition.
enum Metrics {
    /// The sum of every sample of `name` whose labels include `labels`.
    static func value(in text: String, _ name: String, _ labels: [String: String] = [:]) -> Double {
        var sum = 0.0
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            let parts = line.split(separator: " ")
            guard parts.count >= 2, let value = Double(parts[parts.count - 1]) else { continue }
            let series = String(parts[0])
            let metric = series.split(separator: "{", maxSplits: 1).first.map(String.init) ?? series
            guard metric == name else { continue }
            if labels.allSatisfy({ series.contains("\($0.key)=\"\($0.value)\"") }) { sum += value }
        }
        return sum
    }
}
