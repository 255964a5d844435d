/// Figures about the whole deployment that no one process sees, kept in Redis for
/// `GET /admin/stats` and the console: open sockets per gateway instance, written by
/// each gateway as it refreshes presence (`stats:gateways`, a hash of instance →
/// `<open> <signed in> <ms>`), and the size of every pending queue together, sampled by
/// gc-worker (`stats:pending`).
public enum GatewayCensus {
    public static let key = "stats:gateways"

    public struct Entry: Sendable, Equatable {
        public var instance: String
        public var open: Int
        public var signedIn: Int
        public var reportedAt: Int64
    }

    /// One gateway's counts, replacing what it reported before.
    public static func record(instance: String, open: Int, signedIn: Int, at now: Int64, on redis: RedisClient) async throws {
        try await redis.send("HSET", key, instance, "\(open) \(signedIn) \(now)")
    }

    /// A gateway that stops (drained, or at shutdown) takes itself out.
    public static func remove(instance: String, on redis: RedisClient) async throws {
        try await redis.send("HDEL", key, instance)
    }

    /// Every gateway that reported within `maxAge`; entries older than that (a gateway
    /// that died without taking itself out) are deleted on the way.
    public static func read(now: Int64, maxAge: Duration, on redis: RedisClient) async throws -> [Entry] {
        let fields = try await redis.send("HGETALL", key).array ?? []
        var live: [Entry] = []
        var stale: [String] = []
        var index = 0
        while index + 1 < fields.count {
            defer { index += 2 }
            guard let instance = fields[index].string else { continue }
            let parts = (fields[index + 1].string ?? "").split(separator: " ").compactMap { Int64($0) }
            // Redis is not trusted input: a time far from now is stale, never an overflow.
            guard parts.count == 3, case let (age, overflow) = now.subtractingReportingOverflow(parts[2]), !overflow,
                  age <= Int64(maxAge.milliseconds) else {
                stale.append(instance)
                continue
            }
            live.append(Entry(instance: instance, open: Int(parts[0]), signedIn: Int(parts[1]), reportedAt: parts[2]))
        }
        if !stale.isEmpty { try await redis.send(RedisCommand("HDEL", [key] + stale)) }
        return live.sorted { $0.instance < $1.instance }
    }
}

public enum PendingCensus {
    public static let key = "stats:pending"

    public struct Sample: Sendable, Equatable {
        /// Messages in all pending queues together.
        public var messages: Int
        /// Identities with at least one message waiting.
        public var queues: Int
        public var sampledAt: Int64
        /// How long the sample took (ms).
        public var tookMs: Int64
    }

    /// Walks the key space with `SCAN` (a page of `batch` keys at a time, their lengths in
    /// one pipelined round trip), so Redis is never blocked for long; the cost grows
    /// with the number of queues, which is why gc-worker does it on a timer and not
    /// every read of the figures.
    public static func sample(on redis: RedisClient, batch: Int = 1_000, now: () -> Int64 = Clock.millisecondsNow) async throws -> Sample {
        let started = now()
        var messages = 0, queues = 0
        try await redis.scan(matching: "pending:{*}", type: "stream", batch: batch) { keys in
            for length in try await redis.pipeline(keys.map { RedisCommand("XLEN", $0) }) {
                let count = Int(length.int ?? 0)
                messages += count
                if count > 0 { queues += 1 }
            }
        }
        let sample = Sample(messages: messages, queues: queues, sampledAt: now(), tookMs: now() - started)
        try await redis.send(
            "HSET", key, "messages", sample.messages, "queues", sample.queues, "sampledAt", sample.sampledAt, "tookMs", sample.tookMs
        )
        return sample
    }

    /// The last sample, if gc-worker has taken one.
    public static func latest(on redis: RedisClient) async throws -> Sample? {
        let values = try await redis.send("HMGET", key, "messages", "queues", "sampledAt", "tookMs").array ?? []
        let numbers = values.compactMap { $0.string.flatMap { Int64($0) } }
        guard numbers.count == 4 else { return nil }
        return Sample(messages: Int(numbers[0]), queues: Int(numbers[1]), sampledAt: numbers[2], tookMs: numbers[3])
    }
}
