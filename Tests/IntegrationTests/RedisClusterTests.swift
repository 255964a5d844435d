import Foundation
import Testing
@testable import WhisperShared

/// The cluster client (`RedisCluster`) against a real six-node Redis Cluster on loopback,
/// and its slot hashing against the Redis Cluster specification's examples.
@Suite struct RedisClusterSlotTests {
    @Test func slotsAreTheSpecificationsCRC16WithHashTags() {
        #expect(RedisClusterSlots.crc16(Array("123456789".utf8)) == 0x31C3, "the specification's check value")
        #expect(RedisClusterSlots.slot(of: "foo") == 12_182)
        #expect(RedisClusterSlots.slot(of: "{user1000}.following") == RedisClusterSlots.slot(of: "{user1000}.followers"))
        #expect(RedisClusterSlots.slot(of: "foo{bar}{zap}") == RedisClusterSlots.slot(of: "bar"), "the first tag only")
        #expect(RedisClusterSlots.slot(of: "foo{{bar}}zap") == RedisClusterSlots.slot(of: "{bar"), "from the first { to the first } after it")
        #expect(
            RedisClusterSlots.slot(of: "foo{}{bar}") == Int(RedisClusterSlots.crc16(Array("foo{}{bar}".utf8)) & 0x3FFF),
            "an empty tag hashes the whole key"
        )
        // The project's keys: one identity's keys share its slot.
        let whisperId = "WSP-ABCD-EFGH-JKLM"
        #expect(RedisClusterSlots.slot(of: RedisKeys.pending(whisperId)) == RedisClusterSlots.slot(of: RedisKeys.presence(whisperId)))
    }

    @Test func commandsNameTheKeyThatRoutesThem() {
        #expect(RedisCommand("GET", "k1").routingKey == Array("k1".utf8))
        #expect(RedisCommand("EVALSHA", "sha", 2, "first", "second", "argument").routingKey == Array("first".utf8))
        #expect(RedisCommand("EVALSHA", "sha", 0, "argument").routingKey == nil)
        #expect(RedisCommand("XREADGROUP", "GROUP", "g", "c", "COUNT", 10, "STREAMS", "stream:a", ">").routingKey == Array("stream:a".utf8))
        #expect(RedisCommand("SPUBLISH", "gateway:g1", "frame").routingKey == Array("gateway:g1".utf8))
        #expect(RedisCommand("XGROUP", "CREATE", "stream:router", "routers", "$", "MKSTREAM").routingKey == Array("stream:router".utf8))
        #expect(RedisCommand("XINFO", "GROUPS", "stream:push").routingKey == Array("stream:push".utf8))
        #expect(RedisCommand("PING").routingKey == nil)
        #expect(RedisCommand("SCRIPT", "LOAD", "return 1").routingKey == nil)
    }

    @Test func redirectsAreRead() {
        #expect(Redirect(.error("MOVED 3999 127.0.0.1:6381")) == .moved(slot: 3999, .init(host: "127.0.0.1", port: 6381)))
        #expect(Redirect(.error("ASK 3999 127.0.0.1:6381")) == .ask(.init(host: "127.0.0.1", port: 6381)))
        #expect(Redirect(.error("TRYAGAIN Multiple keys request during rehashing of slot")) == .retry)
        #expect(Redirect(.error("CLUSTERDOWN The cluster is down")) == .retry)
        #expect(Redirect(.error("ERR wrong number of arguments")) == nil)
        #expect(Redirect(.error("MOVED x 127.0.0.1:6381")) == nil)
        #expect(Redirect(.bulkString(Array("MOVED 1 a:1".utf8))) == nil)
    }
}

@Suite(.serialized) struct RedisClusterTests {
    private func withCluster<T: Sendable>(_ body: (RedisClusterProcess, RedisCluster) async throws -> T) async throws -> T {
        let nodes = try RedisClusterProcess()
        defer { nodes.stop() }
        try await nodes.start()
        let cluster = RedisCluster(
            seeds: [nodes.seeds[0]], configuration: RedisConfiguration(host: "127.0.0.1", port: nodes.ports[0]),
            eventLoopGroup: .singletonMultiThreadedEventLoopGroup, logger: TestServers.logger
        )
        try await cluster.refresh()
        let result = try await body(nodes, cluster)
        await cluster.close()
        return result
    }

    @Test func aPipelineAcrossEveryMasterAnswersInOrder() async throws {
        try await withCluster { nodes, cluster in
            #expect(cluster.masters.count == 3)
            let keys = (0..<300).map { "key:\($0)" }
            let sets = try await cluster.pipeline(keys.map { RedisCommand("SET", $0, "value of \($0)") })
            #expect(sets.allSatisfy { $0 == .simpleString("OK") })
            let values = try await cluster.pipeline(keys.map { RedisCommand("GET", $0) } + [RedisCommand("PING")])
            #expect(values.dropLast().map(\.string) == keys.map { "value of \($0)" })
            #expect(values.last == .simpleString("PONG"))
            // Each master holds its share, and only keys of its own slots.
            var held = 0
            for master in cluster.masters {
                let size = Int(nodes.cli(master.port, "DBSIZE").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
                #expect(size > 0, "\(master) holds none")
                held += size
            }
            #expect(held == keys.count)
            // A script runs on its key's node.
            let sum = try await cluster.send(RedisCommand("EVAL", "return redis.call('GET', KEYS[1])", 1, "key:7"))
            #expect(sum.string == "value of key:7")
        }
    }

    @Test func aMovedSlotIsFollowedAskDuringTheMoveAndMovedAfter() async throws {
        try await withCluster { nodes, cluster in
            let key = "moving:key"
            let slot = RedisClusterSlots.slot(of: key)
            _ = try await cluster.send(RedisCommand("SET", key, "before the move"))
            let source = try #require(cluster.master(ofSlot: slot))
            let destination = try #require(cluster.masters.first { $0 != source })
            let (sourceID, destinationID) = (nodes.nodeID(source.port), nodes.nodeID(destination.port))

            // The move begins, and the key goes over: the source now answers ASK for it.
            nodes.cli(destination.port, "CLUSTER", "SETSLOT", "\(slot)", "IMPORTING", sourceID)
            nodes.cli(source.port, "CLUSTER", "SETSLOT", "\(slot)", "MIGRATING", destinationID)
            let migrated = nodes.cli(source.port, "MIGRATE", "127.0.0.1", "\(destination.port)", key, "0", "5000")
            #expect(migrated.contains("OK"))
            #expect(try await cluster.send(RedisCommand("GET", key)).string == "before the move", "ASK followed")
            #expect(cluster.master(ofSlot: slot) == source, "an ASK leaves the map as it was")

            // The move ends: every master learns the slot's new owner; the client, told
            // MOVED, learns it too.
            for master in cluster.masters {
                nodes.cli(master.port, "CLUSTER", "SETSLOT", "\(slot)", "NODE", destinationID)
            }
            _ = try await cluster.send(RedisCommand("SET", key, "after the move"))
            #expect(cluster.master(ofSlot: slot) == destination, "MOVED taught the map")
            #expect(nodes.cli(destination.port, "GET", key).contains("after the move"))
        }
    }
}

/// The services on a Redis Cluster (`WHISPER_REDIS_CLUSTER`): two gateways, a router and
/// auth, every Redis command routed to its slot's master: messages, receipts, groups,
/// calls and presence.
@Suite(.serialized) struct ClusterMessagingTests {
    @Test func messagesReceiptsAndGroupsOnACluster() async throws {
        let nodes = try RedisClusterProcess()
        defer { nodes.stop() }
        try await nodes.start()
        try await MessagingStack.start(routers: 1, redis: nodes.configuration).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let (message, received) = try await alice.sendAndWaitForArrival("across the cluster", to: bob)
            try await bob.connection.acknowledge(received)
            let receipt = try #require(try await alice.events(.messageDelivered).first?.payload(as: MessageDelivered.self))
            #expect(receipt.messageId == message.messageId)
            try await waitUntil { try await stack.pendingDepth(bob.whisperId) == 0 }

            // An offline recipient's queue, fetched later (the router serves the page).
            let carol = try await stack.user(on: 0)
            try await stack.makePeers([alice, bob, carol])
            let created = try await alice.connection.createGroup(title: "Clustered", memberIds: [bob.whisperId, carol.whisperId])
            let copies = alice.groupCopies("to the clustered group", groupId: created.groupId, to: [bob, carol])
            let outcomes = await alice.connection.sendGroup(copies)
            #expect(outcomes.values.allSatisfy { (try? $0.get()) != nil })
            for (member, count) in [(bob, 2), (carol, 1)] {
                let arrived = try await member.events(.messageReceived, count: count).compactMap { $0.payload(as: MessageReceived.self) }
                #expect(arrived.contains { $0.groupId == created.groupId })
            }

            // A call across the gateways: the router's call scripts on the cluster.
            try await CallTests.ringAnswerAndHangUp(from: alice, to: bob)

            // Presence: Bob watches Alice (peers), and hears her go.
            let snapshot = try await bob.connection.subscribePresence([alice.whisperId])
            #expect(snapshot.peers == [PresenceSnapshot.Peer(whisperId: alice.whisperId, status: .online)])
            await alice.connection.close()
            let offline = try #require(try await bob.events(.presence).first?.payload(as: PresenceUpdate.self))
            #expect(offline.whisperId == alice.whisperId && offline.status == .offline)
        }
    }
}

extension ClusterMessagingTests {
    /// Bans (the change channel, the caches it clears, the session deleted) and wake-ups
    /// (push-sender reading its 16 shards) on a cluster, with the admin API's figures.
    @Test func bansAndWakeUpsOnACluster() async throws {
        let nodes = try RedisClusterProcess()
        defer { nodes.stop() }
        try await nodes.start()
        try await ModerationTests.start(redis: nodes.configuration).running { moderated in
            let (stack, admin) = (moderated.stack, moderated.admin)
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            _ = try await alice.sendAndWaitForArrival("before the ban", to: bob)
            #expect(try await admin.call(.POST, "/admin/ban", ["whisperId": bob.whisperId, "reason": "spam waves"]).status == 200)
            #expect(try await bob.events(.sessionRevoked).first?.payload(as: SessionRevoked.self) == SessionRevoked(reason: .banned))
            await expectRefused(.forbidden, "message to a banned identity") { _ = try await alice.connection.send(alice.message("hi", to: bob)) }

            try await PushTests.Providers().running { providers in
                try await stack.startPushSender(providers.settings(stack.database, redis: stack.redis)).running { _ in
                    let sleeper = try await stack.offlineUser(on: 1, platform: .ios, pushToken: PushTests.apnsToken)
                    for index in 0..<3 {
                        _ = try await alice.connection.send(alice.message("wake up \(index)", to: sleeper))
                    }
                    try await waitUntil(timeout: .seconds(20)) { providers.apnsPushes.count >= 1 }
                    try await waitUntil { try await stack.pushJobs().isEmpty }
                    #expect(providers.apnsPushes.count == 1, "three messages, one wake-up")
                    let stats = try await admin.call(.GET, "/admin/stats").json["streams"] as? [String: Any]
                    #expect(stats?["shards"] as? Int == 16)
                }
            }
        }
    }
}

/// Sharded pub/sub on a cluster: `PUBLISH` goes out as `SPUBLISH`, subscribers use
/// `SSUBSCRIBE` on the channel's master and follow the channel's slot when it moves.
@Suite(.serialized) struct ClusterPubSubTests {
    @Test func shardedChannelsAreHeardAndFollowedWhenTheirSlotMoves() async throws {
        let nodes = try RedisClusterProcess()
        defer { nodes.stop() }
        try await nodes.start()
        let configuration = nodes.configuration
        let subscriptions = LockedBox(0)
        let channel = "gateway:moving-\(UUID().uuidString.prefix(8))"
        let subscriber = RedisSubscriber(
            configuration: configuration, channels: [channel, IdentityChange.channel], logger: TestServers.logger,
            onSubscribed: { subscriptions.value += 1 }
        )
        let listening = Task { try await subscriber.run() }
        defer { listening.cancel() }
        let client = RedisClient(configuration: configuration, logger: TestServers.logger)
        let running = Task { try await client.run() }
        defer { running.cancel() }
        try await waitUntil { client.isConnected }
        try await waitUntil { subscriber.isSubscribed }
        let messages = subscriber.messages

        // One subscriber on the channel's shard hears it; the other channel's too.
        #expect(try await client.send("PUBLISH", channel, "first").int == 1)
        #expect(try await client.send("PUBLISH", IdentityChange.channel, "change").int == 1)
        var heard: [String] = []
        for await message in messages {
            heard.append(String(decoding: message.payload, as: UTF8.self))
            if heard.count == 2 { break }
        }
        #expect(Set(heard) == ["first", "change"])

        // The channel's slot moves to another master: the subscriber is told and
        // subscribes again there; the publisher is told MOVED and follows.
        let slot = RedisClusterSlots.slot(of: channel)
        let cluster = RedisCluster(seeds: nodes.seeds, configuration: configuration, eventLoopGroup: .singletonMultiThreadedEventLoopGroup, logger: TestServers.logger)
        try await cluster.refresh()
        let source = try #require(cluster.master(ofSlot: slot))
        let destination = try #require(cluster.masters.first { $0 != source })
        let before = subscriptions.value
        let destinationID = nodes.nodeID(destination.port)
        nodes.cli(destination.port, "CLUSTER", "SETSLOT", "\(slot)", "IMPORTING", nodes.nodeID(source.port))
        nodes.cli(source.port, "CLUSTER", "SETSLOT", "\(slot)", "MIGRATING", destinationID)
        for master in cluster.masters { nodes.cli(master.port, "CLUSTER", "SETSLOT", "\(slot)", "NODE", destinationID) }
        await cluster.close()
        try await waitUntil { subscriptions.value > before && subscriber.isSubscribed }
        #expect(try await client.send("PUBLISH", channel, "after the move").int == 1)
        for await message in messages {
            #expect(String(decoding: message.payload, as: UTF8.self) == "after the move")
            break
        }
    }
}

@Suite(.serialized) struct ClusterServerCheckTests {
    @Test func everyMasterIsCheckedAndTheWeakOneNamed() async throws {
        try await RedisClusterProcess.withClient { nodes, client in
            #expect(try await RedisServerCheck.problems(on: client, required: .always) == [])
            // One master, not the first one asked, evicts.
            let weak = try #require(client.cluster?.masters.last)
            nodes.cli(weak.port, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
            let problems = try #require(try await RedisServerCheck.problems(on: client, required: .always))
            #expect(problems.count == 1)
            #expect(problems.first?.hasPrefix("\(weak):") == true)
        }
    }
}

@Suite(.serialized) struct ClusterScanTests {
    @Test func theCensusCountsTheQueuesOfEveryMaster() async throws {
        try await RedisClusterProcess.withClient { nodes, client in
            // Thirty queues, one message each, spread by their hash tags over the masters.
            let recipients = (0..<30).map { _ in WhisperID.generate() }
            for recipient in recipients {
                _ = try await client.send("XADD", RedisKeys.pending(recipient), "*", "mid", "m", "body", "{}")
            }
            let masters = try #require(client.cluster?.masters)
            let holding = masters.filter { Int(nodes.cli($0.port, "DBSIZE").trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0 > 0 }
            #expect(holding.count > 1, "the queues live on more than one master")
            let sample = try await PendingCensus.sample(on: client, batch: 7)
            #expect(sample.queues == 30)
            #expect(sample.messages == 30)
        }
    }
}
