/// Receipts (`message_delivered` frames) for a sender who was offline when they came:
/// `receipts:{whisperId}`, a list kept 72 hours, handed over at the sender's next
/// `fetch_pending`.
public struct ReceiptQueue: Sendable {
    let redis: RedisClient

    public init(redis: RedisClient) {
        self.redis = redis
    }

    static func key(_ whisperId: String) -> String { "receipts:{\(whisperId)}" }

    public func keep(_ frame: [UInt8], for whisperId: String) async throws {
        _ = try await redis.pipeline([
            RedisCommand("RPUSH", Self.key(whisperId), frame),
            RedisCommand("PEXPIRE", Self.key(whisperId), Int(PendingQueue.ttl.milliseconds)),
        ])
    }

    /// Takes up to `limit` kept receipts, oldest first.
    public func take(for whisperId: String, limit: Int = 500) async throws -> [[UInt8]] {
        let reply = try await redis.send("LPOP", Self.key(whisperId), limit)
        return reply.array?.compactMap(\.bytes) ?? []
    }
}
