import Synchronization
import WhisperShared

/// Whether a sender is its recipient's direct peer (`Peers.exchanged`): a contact's
/// message is not counted against the strangers' share of a queue, and may be written
/// to its recipient while it is stored. An in-process memory of shared state: how stale
/// it may be and why that is safe is in docs/architecture.md, "In-process memories of
/// shared state".
public final class PeerMemory: Sendable {
    public static let peersTrusted: Duration = .seconds(300)
    public static let strangersTrusted: Duration = .seconds(10)
    public static let capacity = 100_000

    private struct Pair: Hashable {
        let sender: String
        let recipient: String
    }

    private struct Answer {
        var peers: Bool
        /// The look-up found that the recipient wrote to the sender (the half of
        /// `Peers.exchanged` a sender's own message cannot write).
        var recipientWrote: Bool
        var until: ContinuousClock.Instant
    }

    private let known = Mutex<[Pair: Answer]>([:])

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
        let at = Clock.millisecondsNow()
        let peers = Peers.exchanged(scores, now: at)
        let answer = Answer(
            peers: peers, recipientWrote: !scores.isEmpty && Peers.wrote(scores[0], now: at),
            until: now + (peers ? Self.peersTrusted : Self.strangersTrusted)
        )
        known.withLock { memory in
            if memory.count >= Self.capacity { memory.removeAll(keepingCapacity: true) }
            memory[pair] = answer
        }
        return peers
    }

    /// `sender`'s message to `recipient` was stored: when the look-up had found that the
    /// recipient wrote to the sender, the two have now exchanged, and are remembered so.
    public func stored(_ sender: String, _ recipient: String) {
        let pair = Pair(sender: sender, recipient: recipient)
        known.withLock { memory in
            guard let answer = memory[pair], !answer.peers, answer.recipientWrote else { return }
            memory[pair] = Answer(peers: true, recipientWrote: true, until: ContinuousClock.now + Self.peersTrusted)
        }
    }

    /// A message `sender` wrote reached `recipient`'s socket here: `recipient` writing
    /// back to `sender` is no longer a stranger's first message, so a remembered "not
    /// peers" for that direction is dropped.
    public func heard(from sender: String, by recipient: String) {
        let pair = Pair(sender: recipient, recipient: sender)
        known.withLock { memory in
            if let answer = memory[pair], !answer.peers { memory[pair] = nil }
        }
    }

    /// `peer-wrote.lua` (its header says what it takes).
    static let wroteScript = RedisScript(RateLimiter.bucketLua + LuaSource.peerWrote)
}
