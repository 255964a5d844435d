import Logging
import ServiceLifecycle
import WhisperShared

/// Looks once at start for entries in stream shards past this service's count (left by a
/// lowered `WHISPER_STREAM_SHARDS`), which nothing reads, and logs each such shard as
/// `stream_shards_unread` (docs/operations.md, "Stream shards").
public struct UnreadShards: Service {
    let redis: RedisClient
    /// The stream's name (`RouterStream.key`, `PushStream.key`).
    let base: String
    let logger: Logger

    public init(redis: RedisClient, base: String, logger: Logger) {
        self.redis = redis
        self.base = base
        self.logger = logger
    }

    /// The shards past the configured count that hold entries, with their lengths.
    public static func find(on redis: RedisClient, base: String) async throws -> [(key: String, entries: Int)] {
        let shards = redis.configuration.streamShards
        let all = StreamShards(StreamShards.maximum)
        let beyond = (shards.count..<all.count).map { all.key(base, shard: $0) }
        guard !beyond.isEmpty else { return [] }
        let lengths = try await redis.pipeline(beyond.map { RedisCommand("XLEN", $0) })
        return zip(beyond, lengths).compactMap { key, length in
            guard let entries = length.int, entries > 0 else { return nil }
            return (key, Int(entries))
        }
    }

    public func run() async throws {
        let redis = self.redis
        let base = self.base
        let found = await cancelWhenGracefulShutdown { () -> [(key: String, entries: Int)]? in
            for _ in 0..<600 where !Task.isCancelled {
                if let found = try? await Self.find(on: redis, base: base) { return found }
                // Not connected yet: the client reconnects with its backoff.
                try? await Task.sleep(for: .milliseconds(100))
            }
            return nil
        }
        for shard in found ?? [] {
            logger.error("stream_shards_unread", metadata: [
                "stream": "\(shard.key)", "entries": "\(shard.entries)", "shards": "\(redis.configuration.streamShards.count)",
                "reason": "this shard is past WHISPER_STREAM_SHARDS and nothing reads it; see docs/operations.md, Stream shards",
            ])
        }
        try? await gracefulShutdown()
    }
}
