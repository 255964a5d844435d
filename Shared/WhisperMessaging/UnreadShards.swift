import Logging
import ServiceLifecycle
import WhisperShared

/// Looks once, at start, for entries in shards of a work stream past the count this
/// service reads (`StreamShards`): left there when `WHISPER_STREAM_SHARDS` was lowered
/// before those shards were drained, or by a writer configured with more shards than its
/// readers. Nothing reads them, so each such shard is logged as an error
/// (`stream_shards_unread`) with how many entries it holds (docs/operations.md, "Stream
/// shards").
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
