import Foundation
import Logging
import ServiceLifecycle
import Testing
import WhisperShared

/// A service refuses to start on a Redis that would not keep what it promises
/// (`RedisServerCheck`), against a real redis-server whose settings each test changes.
@Suite struct RedisServerCheckTests {
    /// A redis-server of the test's own (durable and never evicting, as the services
    /// require), and a client on it.
    private func withServer<T: Sendable>(_ body: (RedisProcess, RedisClient) async throws -> T) async throws -> T {
        let server = try RedisProcess()
        try server.start()
        defer { server.kill() }
        let client = RedisClient(configuration: RedisConfiguration(url: server.url)!, logger: TestServers.logger)
        let task = Task { try await client.run() }
        defer { task.cancel() }
        try await waitUntil { client.isConnected }
        return try await body(server, client)
    }

    /// The clients and the check of a service on `redis`, run as a service runs them:
    /// the group's error (a refusal ends it), or nil once the check has let it start
    /// and it was told to stop.
    private func startClients(redis: RedisConfiguration) async throws -> (error: (any Error)?, verdict: RedisServerCheck.Verdict?) {
        let database = try await TestDatabases.shared.make()
        defer { TestDatabases.shared.release(database) }
        let environment = ServiceEnvironment(settings: TestServers.common(service: "auth", postgres: database, redis: redis), logger: TestServers.logger)
        let group = ServiceAssembly(services: environment.clientServices, logger: TestServers.logger, gracePeriod: .seconds(5))
            .makeGroup(handleSignals: false)
        let run = Task { () -> (any Error)? in
            do {
                try await group.run()
                return nil
            } catch {
                return error
            }
        }
        try await waitUntil { environment.redisCheck.verdict != nil }
        if case .refused = environment.redisCheck.verdict { return (await run.value, environment.redisCheck.verdict) }
        await group.triggerGracefulShutdown()
        return (await run.value, environment.redisCheck.verdict)
    }

    @Test func aDurableNeverEvictingRedisPassesAndEachWeakSettingIsNamed() async throws {
        try await withServer { _, redis in
            #expect(try await RedisServerCheck.problems(on: redis, required: .always) == [])

            try await redis.send("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
            let evicting = try #require(try await RedisServerCheck.problems(on: redis, required: .always))
            #expect(evicting.count == 1)
            #expect(evicting.first?.contains("maxmemory-policy allkeys-lru") == true)
            #expect(try await RedisServerCheck.problems(on: redis, required: .none)?.count == 1, "eviction is refused whatever the persistence")
            try await redis.send("CONFIG", "SET", "maxmemory-policy", "noeviction")

            try await redis.send("CONFIG", "SET", "appendfsync", "everysec")
            let weak = try #require(try await RedisServerCheck.problems(on: redis, required: .always))
            #expect(weak.count == 1 && weak.first?.contains("appendfsync everysec") == true)
            #expect(try await RedisServerCheck.problems(on: redis, required: .everysec) == [])

            try await redis.send("CONFIG", "SET", "appendonly", "no")
            #expect(try await RedisServerCheck.problems(on: redis, required: .everysec)?.first?.contains("appendonly no") == true)
            #expect(try await RedisServerCheck.problems(on: redis, required: .none) == [])
        }
    }

    @Test func aServiceRefusesToStartOnAnEvictingRedisAndStartsOnAGoodOne() async throws {
        try await withServer { server, redis in
            let configuration = RedisConfiguration(url: server.url)!
            let good = try await startClients(redis: configuration)
            #expect(good.error == nil, "a good Redis: started, then stopped")
            #expect(good.verdict == .passed)

            try await redis.send("CONFIG", "SET", "maxmemory-policy", "volatile-ttl")
            let refused = try await startClients(redis: configuration)
            let refusal = try #require(refused.error as? SettingsError)
            #expect(refusal.description.contains("maxmemory-policy volatile-ttl"))
            #expect(refusal.description.contains("noeviction"), "says what to set")
        }
    }

    @Test func aRedisThatRefusesConfigGetIsUsedUnchecked() async throws {
        try await withServer { server, redis in
            // A user that may do anything but CONFIG, as some managed services allow.
            try await redis.send("ACL", "SETUSER", "limited", "on", ">limited-password", "~*", "&*", "+@all", "-config")
            try await redis.send("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
            var configuration = RedisConfiguration(url: server.url)!
            configuration.username = "limited"
            configuration.password = "limited-password"
            let limited = RedisClient(configuration: configuration, logger: TestServers.logger)
            let task = Task { try await limited.run() }
            defer { task.cancel() }
            try await waitUntil { limited.isConnected }
            #expect(try await RedisServerCheck.problems(on: limited, required: .always) == nil, "not known: not refused")
            let started = try await startClients(redis: configuration)
            #expect(started.error == nil, "started, then stopped")
            #expect(started.verdict == .unchecked)
        }
    }
}
