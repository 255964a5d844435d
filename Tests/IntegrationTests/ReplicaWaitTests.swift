import Foundation
import Testing
import WhisperClient
import WhisperShared

/// `WHISPER_REDIS_WAIT_REPLICAS`: a sender is told its message is stored once a replica
/// holds it too. When none does in time (`WHISPER_REDIS_WAIT_SHORTFALL`), the message is
/// accepted on its master's fsync and the master counts as unreplicated, or, by choice,
/// refused until a replica is back.
@Suite(.serialized) struct ReplicaWaitTests {
    /// A stack on a Redis that has no replica yet, requiring one.
    static func withPrimary(_ shortfall: ReplicaAcknowledgement.Shortfall, _ body: (RedisProcess, MessagingStack) async throws -> Void) async throws {
        let primary = try RedisProcess()
        try primary.start()
        defer { primary.kill() }
        var configuration = try #require(RedisConfiguration(url: primary.url))
        // Long enough for a replica on a busy 2-core machine to answer; a shortfall waits this long.
        configuration.replicaAcks = ReplicaAcknowledgement(replicas: 1, timeout: .seconds(2), shortfall: shortfall)
        configuration.replicaAcks.probeInterval = .seconds(3)
        try await MessagingStack.start(routers: 1, redis: configuration).running { stack in try await body(primary, stack) }
    }

    /// Starts a replica of `primary` and returns once it is in step.
    static func replica(of primary: RedisProcess) async throws -> RedisProcess {
        let replica = try RedisProcess(arguments: ["--replicaof", "127.0.0.1", "\(primary.port)"])
        try replica.start()
        let configuration = try #require(RedisConfiguration(url: replica.url))
        try await TestServers.withRedis(configuration) { redis in
            try await waitUntil(timeout: .seconds(20)) { (try await redis.send("INFO", "replication").string ?? "").contains("master_link_status:up") }
        }
        return replica
    }

    /// The message IDs in `recipient`'s queue as `replica` holds it.
    static func queued(for recipient: TestUser, on replica: RedisProcess) async throws -> [String] {
        let entries = try await TestServers.withRedis(try #require(RedisConfiguration(url: replica.url))) { redis in
            try await redis.send("XRANGE", RedisKeys.pending(recipient.whisperId), "-", "+").array ?? []
        }
        return entries.compactMap { entry -> String? in
            let fields = entry.array?.last?.array?.compactMap(\.string) ?? []
            return fields.firstIndex(of: "mid").flatMap { $0 + 1 < fields.count ? fields[$0 + 1] : nil }
        }
    }

    /// A gateway's figure for one metric line (`name{labels}`), nil when it has none.
    static func figure(_ name: String, containing label: String = "", in stack: MessagingStack) async throws -> Double? {
        let text = try await stack.metricsText(of: [stack.gateways[0]])
        let line = text.split(separator: "\n").first { $0.hasPrefix(name + "{") && (label.isEmpty || $0.contains(label)) }
        return line.flatMap { $0.split(separator: " ").last }.flatMap { Double($0) }
    }

    @Test func aShortfallIsAcceptedOnTheMastersFsyncAndTheMasterCountsAsUnreplicatedUntilAReplicaIsBack() async throws {
        try await Self.withPrimary(.accept) { primary, stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1)
            try await stack.makePeers([alice, bob])
            let node = "node=\"127.0.0.1:\(primary.port)\""

            // No replica: stored, and said so; the master counts as unreplicated.
            let first = alice.message("before the replica", to: bob)
            _ = try await alice.connection.send(first)
            try await waitUntil { await bob.events.all(.messageReceived).contains { $0.payload(as: MessageReceived.self)?.messageId == first.messageId } }
            #expect(try await Self.figure("whisper_redis_master_unreplicated", containing: node, in: stack) == 1)
            // Until the probe interval has passed its writes do not wait for a replica.
            let waits = try #require(try await Self.figure("whisper_redis_replica_waits_total", in: stack))
            _ = try await alice.connection.send(alice.message("still no replica", to: bob))
            #expect(try await Self.figure("whisper_redis_replica_waits_total", in: stack) == waits)
            #expect((try await Self.figure("whisper_redis_unreplicated_writes_total", in: stack) ?? 0) >= 2)
            // Past the probe interval, still without a replica: the probe asks the master for
            // its replicas (ROLE), which holds nobody, and writes go on without a WAIT.
            let since = ContinuousClock.now
            try await waitUntil(timeout: .seconds(20)) {
                _ = try await alice.connection.send(alice.message("no replica yet", to: bob))
                return ContinuousClock.now - since > .seconds(4)
            }
            #expect(try await Self.figure("whisper_redis_replica_waits_total", in: stack) == waits)
            #expect(try await Self.figure("whisper_redis_master_unreplicated", containing: node, in: stack) == 1)

            // A replica is back: the next probe finds it, and the master counts as replicated.
            let replica = try await Self.replica(of: primary)
            defer { replica.kill() }
            try await waitUntil(timeout: .seconds(20)) {
                _ = try await alice.connection.send(alice.message("probing", to: bob))
                return try await Self.figure("whisper_redis_master_unreplicated", containing: node, in: stack) == 0
            }
            // A new message is on the replica the moment its sender is told.
            let after = alice.message("after the replica", to: bob)
            _ = try await alice.connection.send(after)
            #expect(try await Self.queued(for: bob, on: replica).contains(after.messageId))
        }
    }

    @Test func aShortfallIsRefusedWhenTheOperatorChoseRefusal() async throws {
        try await Self.withPrimary(.refuse) { primary, stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1)

            // No replica: stored on the primary and passed on, but the sender is asked to
            // send again rather than told it is safe.
            let first = alice.message("before the replica", to: bob)
            await expectRefused(.internalError, "no replica acknowledged") { _ = try await alice.connection.send(first) }
            try await waitUntil { await bob.events.all(.messageReceived).contains { $0.payload(as: MessageReceived.self)?.messageId == first.messageId } }

            let replica = try await Self.replica(of: primary)
            defer { replica.kill() }
            // The resend is a duplicate, answered now that a replica has it; a new message
            // is on the replica the moment its sender is told.
            _ = try await alice.connection.send(first)
            let second = alice.message("after the replica", to: bob)
            _ = try await alice.connection.send(second)
            let ids = try await Self.queued(for: bob, on: replica)
            #expect(ids.contains(second.messageId) && ids.contains(first.messageId))
            #expect((try await Self.figure("whisper_redis_replica_shortfalls_total", in: stack) ?? 0) >= 1)
        }
    }
}
