/// How many shards each work stream is split into (`WHISPER_STREAM_SHARDS`), each a stream
/// with its own consumer group and hash slot; an identity's work always goes to the same
/// shard, in order. Shard 0 is the plain name (`stream:router`), shard n `<name>:<n>`.
public struct StreamShards: Sendable, Equatable, CustomStringConvertible {
    public let count: Int

    /// At most this many shards.
    public static let maximum = 256

    public init(_ count: Int) {
        self.count = min(max(count, 1), Self.maximum)
    }

    public static let one = StreamShards(1)

    /// The default: one stream on a standalone Redis, 16 shards on a cluster (spread over
    /// its masters).
    public static func standard(cluster: Bool) -> StreamShards { cluster ? StreamShards(16) : .one }

    /// The shard an identity's work goes to (a hash of its Whisper ID: the same shard for
    /// as long as the count stays).
    public func shard(of whisperId: String) -> Int {
        count == 1 ? 0 : RedisClusterSlots.slot(of: whisperId) % count
    }

    /// The key of shard `shard` of the stream `base`.
    public func key(_ base: String, shard: Int) -> String {
        shard == 0 ? base : "\(base):\(shard)"
    }

    /// The key of the shard of `base` that `whisperId`'s work goes to.
    public func key(_ base: String, for whisperId: String) -> String {
        key(base, shard: shard(of: whisperId))
    }

    /// Every shard's key, shard 0 first.
    public func keys(_ base: String) -> [String] {
        (0..<count).map { key(base, shard: $0) }
    }

    public var description: String { "\(count)" }
}
