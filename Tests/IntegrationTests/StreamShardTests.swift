import Foundation
import Testing
import WhisperClient
import WhisperMessaging
import WhisperShared

/// The work streams split into shards (`WHISPER_STREAM_SHARDS`): each identity's frames
/// go to its own shard, in order, and routers read every shard.
@Suite(.serialized) struct StreamShardTests {
    @Test func eachSendersFramesGoToItsShardInOrderAndEveryShardIsRead() async throws {
        let shards = StreamShards(4)
        // One router: with several, a shard's consumer group shares one sender's entries
        // among them, and only one router keeps a sender's lane in order.
        try await MessagingStack.start(routers: 1, streamShards: shards).running { stack in
            let bob = try await stack.user(on: 1)
            // Senders on three different shards.
            var senders: [TestUser] = []
            var used: Set<Int> = []
            for _ in 0..<60 where used.count < 3 {
                let sender = try await stack.user(on: 0)
                if used.insert(shards.shard(of: sender.whisperId)).inserted { senders.append(sender) }
            }
            try #require(used.count == 3)
            // Each sends ten in a row without waiting for the answers, as group copies
            // (the messages routers serve), each in a group of its own with bob.
            var groups: [String: String] = [:]
            for sender in senders { groups[sender.whisperId] = try await stack.streamGroup(sender, [bob]) }
            var sent: [String: [String]] = [:]
            for sender in senders {
                for index in 0..<10 {
                    let message = sender.copy("in order \(index)", to: bob, in: groups[sender.whisperId]!)
                    try await sender.connection.sendOnly(message)
                    sent[sender.whisperId, default: []].append(message.messageId)
                }
            }
            let received = try await bob.events(.messageReceived, count: 30, timeout: .seconds(30)).compactMap { $0.payload(as: MessageReceived.self) }
            for sender in senders {
                #expect(received.filter { $0.from == sender.whisperId }.map(\.messageId) == sent[sender.whisperId], "one sender's messages out of order")
            }
            // Each sender's entries went into its own shard.
            try await stack.withRedis { redis in
                for sender in senders {
                    let key = shards.key(RouterStream.key, for: sender.whisperId)
                    let fields = try await redis.send("XINFO", "STREAM", key).array ?? []
                    let added = stride(from: 0, to: fields.count - 1, by: 2).first { fields[$0].string == "entries-added" }.flatMap { fields[$0 + 1].int }
                    #expect((added ?? 0) >= 10, "\(key) holds \(added ?? 0) of its sender's entries")
                }
            }
            try await waitUntil { try await stack.routerStreamBacklog() == 0 }

            // A recipient with no socket: its wake-up goes to its own shard of the push stream.
            let carol = try await stack.user(on: 0)
            await carol.connection.close()
            try await stack.makePeers([senders[0], carol])
            _ = try await senders[0].connection.send(senders[0].message("for later", to: carol))
            try await waitUntil { try await stack.pushJobs().contains { $0["to"] == carol.whisperId } }
            try await stack.withRedis { redis in
                let key = shards.key(PushStream.key, for: carol.whisperId)
                let jobs = try await redis.send("XRANGE", key, "-", "+").array ?? []
                #expect(jobs.contains { ($0.array?.last?.array?.compactMap(\.string) ?? []).contains(carol.whisperId) })
            }
        }
    }

    /// Shards past the configured count are never read: entries found there at start are
    /// reported (`stream_shards_unread`), so a count lowered too early is seen.
    @Test func entriesInShardsPastTheCountAreFound() async throws {
        let server = try RedisProcess()
        try server.start()
        defer { server.kill() }
        var configuration = try #require(RedisConfiguration(url: server.url))
        configuration.streamShards = StreamShards(4)
        try await TestServers.withRedis(configuration) { redis in
            #expect(try await UnreadShards.find(on: redis, base: RouterStream.key).isEmpty)
            try await redis.send("XADD", "stream:router:2", "*", "f", "read")
            try await redis.send("XADD", "stream:router:6", "*", "f", "unread")
            try await redis.send("XADD", "stream:router:6", "*", "f", "unread")
            let found = try await UnreadShards.find(on: redis, base: RouterStream.key)
            #expect(found.map(\.key) == ["stream:router:6"])
            #expect(found.first?.entries == 2)
        }
        configuration.streamShards = StreamShards(8)
        let afterRaising = try await TestServers.withRedis(configuration) { redis in
            try await UnreadShards.find(on: redis, base: RouterStream.key)
        }
        #expect(afterRaising.isEmpty)
    }
}
