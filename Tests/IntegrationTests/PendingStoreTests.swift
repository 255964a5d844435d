import Foundation
import Testing
import WhisperMessaging
import WhisperShared

/// The store script's own answers, against a real redis-server: the depth it reports,
/// the queue's cap, and the bounded set of recent senders (`peers:{...}`).
@Suite struct PendingStoreTests {
    func withQueue<T: Sendable>(capacity: PendingQueue.Capacity = .standard, _ body: (PendingQueue, RedisClient) async throws -> T) async throws -> T {
        let client = RedisClient(configuration: TestServers.redis, logger: TestServers.logger)
        let task = Task { try await client.run() }
        defer { task.cancel() }
        try await waitUntil { client.isConnected }
        return try await body(PendingQueue(redis: client, capacity: capacity), client)
    }

    /// A message body as a router or gateway stores it (the script reads only its size).
    func store(
        _ queue: PendingQueue, to recipient: String, from sender: String, stranger: Bool = false, messageId: String = RandomID.uuid()
    ) async throws -> PendingQueue.StoreOutcome {
        try await queue.store(
            recipient: recipient, messageId: messageId, sender: sender, body: Array(#"{"text":"hi"}"#.utf8), redeliver: false,
            pairLimit: RateLimitRule(capacity: 10_000, period: .seconds(1)), fromStranger: stranger
        )
    }

    /// Strangers together hold at most their share (20 of 100 here) and each stranger 2
    /// (2 %); contacts then still fill the rest; a stranger's message that leaves the
    /// queue gives its place back.
    @Test func strangersFillOnlyTheirShareAndWhatLeavesIsGivenBack() async throws {
        try await withQueue(capacity: PendingQueue.Capacity(messages: 100, bytes: 1_048_576)) { queue, redis in
            let recipient = WhisperID.generate()
            let strangers = (0..<11).map { _ in WhisperID.generate() }
            var firstIds: [String] = []
            for (index, stranger) in strangers.prefix(10).enumerated() {
                for _ in 0..<2 {
                    let id = RandomID.uuid()
                    if index == 0 { firstIds.append(id) }
                    #expect(try await store(queue, to: recipient, from: stranger, stranger: true, messageId: id).result.isStored)
                }
            }
            #expect(try await store(queue, to: recipient, from: strangers[0], stranger: true).result == .strangersFull, "a third from one stranger")
            #expect(try await store(queue, to: recipient, from: strangers[10], stranger: true).result == .strangersFull, "a twenty-first from strangers")
            let contact = WhisperID.generate()
            for _ in 0..<80 { #expect(try await store(queue, to: recipient, from: contact).result.isStored) }
            #expect(try await store(queue, to: recipient, from: contact).result == .full)

            // One of the first stranger's leaves (delivered): the queue and the strangers'
            // count each give a place back, to that stranger or another.
            try await queue.applyReceipts([PendingQueue.ReceiptApplication(recipient: recipient, messageId: firstIds[0], delivered: true)])
            #expect(try await store(queue, to: recipient, from: strangers[10], stranger: true).result.isStored)
            let together = try await redis.send("HGET", "pending:{\(recipient)}:strangers", "n").string
            #expect(together == "20")
        }
    }

    @Test func eachStoreReportsTheQueuesDepthAndTheCapRefusesTheRest() async throws {
        try await withQueue(capacity: PendingQueue.Capacity(messages: 3, bytes: 1_048_576)) { queue, _ in
            let recipient = WhisperID.generate()
            var depths: [Int] = []
            for _ in 0..<3 {
                guard case .stored(_, let depth) = try await store(queue, to: recipient, from: WhisperID.generate()).result else {
                    Issue.record("not stored")
                    return
                }
                depths.append(depth)
            }
            #expect(depths == [1, 2, 3])
            #expect(try await queue.depth(recipient: recipient) == 3)
            guard case .full = try await store(queue, to: recipient, from: WhisperID.generate()).result else {
                Issue.record("a fourth message was not refused as full")
                return
            }
            #expect(try await queue.depth(recipient: recipient) == 3)
        }
    }

    @Test func recentSendersAreCappedOldestFirst() async throws {
        try await withQueue { queue, redis in
            let recipient = WhisperID.generate()
            let senders = (0...Peers.capacity).map { _ in WhisperID.generate() }
            for sender in senders {
                _ = try await store(queue, to: recipient, from: sender)
            }
            // A sender already in the set, again: the set neither grows nor loses anyone.
            _ = try await store(queue, to: recipient, from: senders[Peers.capacity])
            let members = try await redis.send("ZRANGE", RedisKeys.peers(recipient), 0, -1).array?.compactMap(\.string) ?? []
            // One of the earliest made room (senders stored in the same millisecond tie).
            #expect(members.count == Peers.capacity)
            #expect(Set(members).isSubset(of: Set(senders)))
            #expect(members.contains(senders[Peers.capacity]), "the newest sender is kept")
        }
    }
}

extension PendingQueue.StoreResult {
    var isStored: Bool {
        if case .stored = self { true } else { false }
    }
}
