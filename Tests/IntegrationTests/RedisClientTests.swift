import Foundation
import NIOPosix
import ServiceLifecycle
import Synchronization
import Testing
@testable import WhisperShared

/// The hiredis-based client against a real redis-server.
@Suite struct RedisClientTests {
    /// Runs a client for the duration of `body`.
    func withClient<T: Sendable>(_ configuration: RedisConfiguration = TestServers.redis, _ body: (RedisClient) async throws -> T) async throws -> T {
        let client = RedisClient(configuration: configuration, logger: TestServers.logger)
        let task = Task { try await client.run() }
        defer { task.cancel() }
        try await waitUntil { client.isConnected }
        return try await body(client)
    }

    @Test func commandsRoundTripBinarySafeValues() async throws {
        try await withClient { redis in
            let key = "test:\(UUID().uuidString)"
            let value: [UInt8] = [0, 1, 13, 10, 255, 36, 42]
            try await redis.send("SET", key, value, "EX", 60)
            #expect(try await redis.send("GET", key) == .bulkString(value))
            #expect(try await redis.send("GET", key + ":missing") == .null)
            #expect(try await redis.send("DEL", key) == .integer(1))
        }
    }

    /// A server that takes the connection and never answers (one starting or stalled)
    /// does not hold a connect for good: the handshake is bounded like the TCP connect,
    /// so the client's reconnect loop goes on.
    @Test func aHandshakeNobodyAnswersEndsAtTheConnectTimeout() async throws {
        // A listening socket nobody accepts from: the kernel completes the TCP handshake
        // and keeps what is sent.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(fd >= 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && listen(fd, 8) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        try #require(bound)
        let configuration = RedisConfiguration(port: Int(UInt16(bigEndian: address.sin_port)), clientName: "silent", connectTimeout: .milliseconds(300))
        let started = ContinuousClock.now
        let outcome = await withTaskGroup(of: String.self) { group in
            group.addTask {
                do {
                    _ = try await RedisConnection.connect(to: configuration, eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
                    return "connected"
                } catch {
                    return "failed"
                }
            }
            group.addTask {
                // Past any bound: closing the listener resets the connection, so a connect
                // that would wait for good ends too (and the test with it).
                try? await Task.sleep(for: .seconds(10))
                return "still waiting"
            }
            let first = await group.next() ?? ""
            close(fd)
            group.cancelAll()
            return first
        }
        #expect(outcome == "failed")
        #expect(ContinuousClock.now - started < .seconds(5))
    }

    /// A command written as its connection dies fails (the client then reconnects) instead
    /// of waiting for ever: once a closed channel's handlers are gone, nothing else would
    /// answer it.
    @Test func aCommandOnAConnectionThatHasClosedFails() async throws {
        let connection = try await RedisConnection.connect(to: TestServers.redis, eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        await connection.close()
        // A closed channel's handlers leave its pipeline on a later turn of its event loop.
        for _ in 0..<3 { try await connection.channel.eventLoop.submit {}.get() }
        let outcome = try await withTimeout("a command on a closed connection") {
            do {
                _ = try await connection.send(RedisCommand("PING"))
                return "answered"
            } catch {
                return "\(error)"
            }
        }
        #expect(outcome == "\(RedisError.connectionClosed)")
    }

    @Test func errorRepliesAreThrown() async throws {
        try await withClient { redis in
            let key = "test:\(UUID().uuidString)"
            try await redis.send("SET", key, "text")
            await #expect(throws: RedisError.self) { try await redis.send("INCR", key) }
            // The connection is still usable afterwards.
            #expect(try await redis.send("PING") == .simpleString("PONG"))
        }
    }

    @Test func aThousandPipelinedCommandsAnswerInOrder() async throws {
        try await withClient { redis in
            let key = "test:\(UUID().uuidString)"
            let replies = try await redis.pipeline((0..<1000).map { _ in RedisCommand("INCR", key) })
            #expect(replies == (1...1000).map { RESPValue.integer(Int64($0)) })
        }
    }

    /// Group commit (`RedisConnection.pipeline(mayWait:)`): a write that may wait leaves
    /// at its deadline when nothing else is written, and with the next write that may
    /// not wait, ahead of it, however long it might still have waited.
    @Test func aWriteThatMayWaitLeavesAtItsDeadlineOrWithTheNextWrite() async throws {
        let connection = try await RedisConnection.connect(to: TestServers.redis, eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        let other = try await RedisConnection.connect(to: TestServers.redis, eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        do {
            let key = "test:\(UUID().uuidString)"
            let started = ContinuousClock.now
            #expect(try await connection.pipeline([RedisCommand("INCR", key)], mayWait: .milliseconds(300)) == [.integer(1)])
            #expect(ContinuousClock.now - started >= .milliseconds(300), "a write alone leaves at its deadline, not before")

            let (written, handedOver) = AsyncStream.makeStream(of: Void.self)
            let held = Task {
                try await connection.pipeline([RedisCommand("INCR", key)], written: { handedOver.yield() }, mayWait: .seconds(600))
            }
            for await _ in written { break }
            #expect(try await other.send(RedisCommand("GET", key)) == .bulkString(Array("1".utf8)), "still held")
            let eager = try await withTimeout("a write that may not wait") { try await connection.send(RedisCommand("INCR", key)) }
            #expect(eager == .integer(3), "the held write went first")
            #expect(try await withTimeout("the held write") { try await held.value } == [.integer(2)])
        } catch {
            await connection.close()
            await other.close()
            throw error
        }
        await connection.close()
        await other.close()
    }

    /// A late request (`RedisConnection.pipeline(late:then:)`) is made as its write
    /// leaves, not when it is written: what it says may change while it is held, and it
    /// still goes ahead of what is written after it, with the commands given beside it.
    @Test func aLateRequestIsMadeAsItsWriteLeavesAndKeepsItsPlace() async throws {
        let connection = try await RedisConnection.connect(to: TestServers.redis, eventLoopGroup: MultiThreadedEventLoopGroup.singleton)
        do {
            let key = "test:\(UUID().uuidString)"
            let value = Mutex("before")
            let made = Atomic<Int>(0)
            let (written, handedOver) = AsyncStream.makeStream(of: Void.self)
            let held = Task {
                try await connection.pipeline(late: {
                    made.add(1, ordering: .relaxed)
                    return RedisCommand("SET", key, value.withLock { $0 })
                }, then: [RedisCommand("APPEND", key, "+")], written: { handedOver.yield() }, mayWait: .seconds(600))
            }
            for await _ in written { break }
            #expect(made.load(ordering: .relaxed) == 0, "not made while it waits")
            value.withLock { $0 = "after" }
            let eager = try await withTimeout("a write that may not wait") { try await connection.send(RedisCommand("GET", key)) }
            #expect(eager == .bulkString(Array("after+".utf8)), "the held request went first, made as it left")
            #expect(try await withTimeout("the held request") { try await held.value } == [.simpleString("OK"), .integer(6)])
            #expect(made.load(ordering: .relaxed) == 1)
            // With nothing to wait for, it is made at once.
            _ = try await connection.pipeline(late: { RedisCommand("SET", key, "now") }, then: [], mayWait: .zero)
            #expect(try await connection.send(RedisCommand("GET", key)) == .bulkString(Array("now".utf8)))
        } catch {
            await connection.close()
            throw error
        }
        await connection.close()
    }

    @Test func concurrentCallersEachGetTheirOwnReply() async throws {
        try await withClient { redis in
            let prefix = "test:\(UUID().uuidString)"
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<200 {
                    group.addTask {
                        try await redis.send("SET", "\(prefix):\(index)", "\(index)")
                        let value = try await redis.send("GET", "\(prefix):\(index)")
                        #expect(value.string == "\(index)")
                    }
                }
                try await group.waitForAll()
            }
        }
    }

    @Test func scriptsRunByHashAndReloadAfterAFlush() async throws {
        try await withClient { redis in
            let script = RedisScript("return redis.call('INCRBY', KEYS[1], ARGV[1])")
            let key = "test:\(UUID().uuidString)"
            #expect(try await redis.evaluate(script, keys: [key], arguments: [5]) == .integer(5))
            #expect(try await redis.evaluate(script, keys: [key], arguments: [5]) == .integer(10))
            // Redis forgets scripts on restart or SCRIPT FLUSH; the client must load it again.
            try await redis.send("SCRIPT", "FLUSH")
            #expect(try await redis.evaluate(script, keys: [key], arguments: [1]) == .integer(11))
        }
    }

    @Test func subscribersReceivePublishedMessages() async throws {
        try await withClient { redis in
            let channel = "test:channel:\(UUID().uuidString)"
            let subscriber = RedisSubscriber(configuration: TestServers.redis, channels: [channel], logger: TestServers.logger)
            let task = Task { try await subscriber.run() }
            defer { task.cancel() }
            try await waitUntil { subscriber.isSubscribed }
            let payload: [UInt8] = Array("hello\r\n\u{0}".utf8)
            #expect(try await redis.send("PUBLISH", channel, payload) == .integer(1))
            let messages = subscriber.messages
            let message = try await withTimeout("a published message") { await messages.first { _ in true } }
            #expect(message?.channel == channel)
            #expect(message?.payload == payload)
        }
    }

    @Test func aRedisRestartIsSurvivedByClientAndSubscriber() async throws {
        let server = try RedisProcess()
        try server.start()
        let configuration = RedisConfiguration(url: server.url)!
        let channel = "restart:\(UUID().uuidString)"
        let subscriber = RedisSubscriber(configuration: configuration, channels: [channel], logger: TestServers.logger)
        let subscriberTask = Task { try await subscriber.run() }
        defer { subscriberTask.cancel() }
        try await withClient(configuration) { redis in
            try await waitUntil { subscriber.isSubscribed }
            try await redis.send("SET", "k", "before")

            server.kill()
            try await waitUntil { !redis.isConnected }
            await #expect(throws: RedisError.self) { try await redis.send("GET", "k") }

            try server.start()
            try await waitUntil(timeout: .seconds(10)) { redis.isConnected }
            try await redis.send("SET", "k", "after")
            #expect(try await redis.send("GET", "k").string == "after")

            // The subscriber re-subscribed on its own and hears new messages.
            try await waitUntil(timeout: .seconds(10)) { subscriber.isSubscribed }
            try await redis.send("PUBLISH", channel, "again")
            let messages = subscriber.messages
            #expect(try await withTimeout("a message after the restart") { await messages.first { _ in true } }?.payload == Array("again".utf8))
        }
    }
}

