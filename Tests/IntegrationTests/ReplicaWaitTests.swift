import Foundation
import Testing
import WhisperClient
import WhisperShared

/// `WHISPER_REDIS_WAIT_REPLICAS`: a sender is told its message is stored only once a
/// replica holds it too; when none does in time, it is asked to send it again.
@Suite(.serialized) struct ReplicaWaitTests {
    @Test func aSenderIsAnsweredOnceAReplicaHoldsItsMessage() async throws {
        let primary = try RedisProcess()
        try primary.start()
        defer { primary.kill() }
        var configuration = try #require(RedisConfiguration(url: primary.url))
        // Long enough for a replica on a busy 2-core machine to answer; the refusal without
        // one waits this long.
        configuration.replicaAcks = ReplicaAcknowledgement(replicas: 1, timeout: .seconds(2))
        try await MessagingStack.start(routers: 1, redis: configuration).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)

            // No replica: stored on the primary and passed on, but the sender is asked to
            // send again rather than told it is safe.
            let first = alice.message("before the replica", to: bob)
            await expectRefused(.internalError, "no replica acknowledged") { _ = try await alice.connection.send(first) }
            try await waitUntil { await bob.events.all(.messageReceived).contains { $0.payload(as: MessageReceived.self)?.messageId == first.messageId } }

            let replica = try RedisProcess(arguments: ["--replicaof", "127.0.0.1", "\(primary.port)"])
            try replica.start()
            defer { replica.kill() }
            let replicaConfiguration = try #require(RedisConfiguration(url: replica.url))
            try await TestServers.withRedis(replicaConfiguration) { redis in
                try await waitUntil(timeout: .seconds(20)) { (try await redis.send("INFO", "replication").string ?? "").contains("master_link_status:up") }
            }
            // The resend is a duplicate, answered now that a replica has it; a new message
            // is on the replica the moment its sender is told.
            _ = try await alice.connection.send(first)
            let second = alice.message("after the replica", to: bob)
            _ = try await alice.connection.send(second)
            let onReplica = try await TestServers.withRedis(replicaConfiguration) { redis in
                try await redis.send("XRANGE", RedisKeys.pending(bob.whisperId), "-", "+").array ?? []
            }
            let ids = onReplica.compactMap { entry -> String? in
                let fields = entry.array?.last?.array?.compactMap(\.string) ?? []
                return fields.firstIndex(of: "mid").flatMap { $0 + 1 < fields.count ? fields[$0 + 1] : nil }
            }
            #expect(ids.contains(second.messageId) && ids.contains(first.messageId))
            let metrics = try await stack.metricsText(of: stack.gateways)
            #expect(metrics.contains("whisper_redis_replica_shortfalls_total"))
        }
    }
}
