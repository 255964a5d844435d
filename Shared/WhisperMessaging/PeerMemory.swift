import Synchronization
import WhisperShared

/// Whether a sender is its recipient's direct peer (`Peers.exchanged`), as the store
/// needs it to tell a contact's message from a stranger's (strangers get a bounded share
/// of a queue: `PendingQueue.Capacity`).
///
/// In-process memory of shared state, and how stale it may be:
/// - a pair found to be peers is trusted for `peersTrusted` (5 minutes). Peers stay
///   peers for 30 days after their last exchange, so the answer can be stale only for a
///   pair whose 30 days ran out in those minutes; their messages then count as a
///   contact's for at most that long, which takes nothing from anyone;
/// - a pair found not to be peers is trusted for `strangersTrusted` (10 seconds), so that
///   a busy one-way sender costs one lookup per 10 s, not one per message. For that long
///   after a recipient's first reply, the sender's messages still count as a stranger's:
///   they are refused only while strangers hold their whole share, and the refusal says
///   to retry.
/// At most `capacity` pairs are held; past it, the memory starts again empty.
public final class PeerMemory: Sendable {
    public static let peersTrusted: Duration = .seconds(300)
    public static let strangersTrusted: Duration = .seconds(10)
    public static let capacity = 100_000

    private struct Pair: Hashable {
        let sender: String
        let recipient: String
    }

    private let known = Mutex<[Pair: (peers: Bool, until: ContinuousClock.Instant)]>([:])

    public init() {}

    /// Whether `sender`, who is writing to `recipient`, and `recipient` are direct peers:
    /// from memory, else asked of Redis (the two `ZSCORE`s of `Peers.exchanged`) in the
    /// round trip that also records, in the sender's slot, that it wrote to the recipient
    /// (`peer-wrote.lua`: `RedisKeys.wrote`, refreshed at least once per trust period
    /// while the sender writes, well within `Peers.window`).
    public func arePeers(_ sender: String, _ recipient: String, on redis: RedisClient) async throws -> Bool {
        let pair = Pair(sender: sender, recipient: recipient)
        let now = ContinuousClock.now
        if let remembered = known.withLock({ $0[pair] }), remembered.until > now {
            return remembered.peers
        }
        let (_, scores) = try await redis.evaluate(
            Self.wroteScript, keys: [RedisKeys.wrote(sender), RedisKeys.unanswered(sender)],
            arguments: [recipient, Peers.capacity, Int(Peers.window.milliseconds)],
            alongside: Peers.lookups(sender, recipient)
        )
        let peers = Peers.exchanged(scores, now: Clock.millisecondsNow())
        let trusted = peers ? Self.peersTrusted : Self.strangersTrusted
        known.withLock { memory in
            if memory.count >= Self.capacity { memory.removeAll(keepingCapacity: true) }
            memory[pair] = (peers, now + trusted)
        }
        return peers
    }

    /// `peer-wrote.lua` (its header says what it takes).
    static let wroteScript = RedisScript(RateLimiter.bucketLua + LuaSource.peerWrote)
}
