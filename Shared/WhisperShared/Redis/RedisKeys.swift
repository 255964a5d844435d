/// The Redis key space (docs/architecture.md, "Keys, hash tags, and outgrowing one Redis"). Per-user keys put the Whisper ID in a hash tag
/// (`{...}`) so the key space can move to Redis Cluster unchanged.
public enum RedisKeys {
    /// A session record, by the SHA-256 (hex) of its token: the token itself is kept nowhere.
    public static func session(digest: String) -> String { "session:{\(digest)}" }
    public static func challenge(_ id: String) -> String { "challenge:{\(id)}" }
    public static func presence(_ whisperId: String) -> String { "presence:{\(whisperId)}" }
    /// Set when a message wake-up goes out, for the coalescing window; deleted when a
    /// socket of the identity signs in (the wake-up was answered). In the identity's slot.
    public static func pushWoken(_ whisperId: String) -> String { "push:{\(whisperId)}:woken" }
    public static func pending(_ whisperId: String) -> String { "pending:{\(whisperId)}" }
    public static func rateLimit(_ key: String, _ action: String) -> String { "ratelimit:{\(key)}:\(action)" }
    /// One call's state: a hash (parties, state, the offer, timestamps), in the call's slot.
    public static func call(_ callId: String) -> String { "call:{\(callId)}" }
    /// ICE candidates the caller sent while the call rang (a list, in the call's slot).
    public static func callCandidates(_ callId: String) -> String { "call:{\(callId)}:ice" }
    /// The call an identity is in (ringing or answered): its callId.
    public static func line(_ whisperId: String) -> String { "line:{\(whisperId)}" }
    /// Calls that are ringing, scored by when their ring timeout falls due (ms).
    public static let ringingCalls = "calls:ringing"
    /// Who sent this identity a message lately: a sorted set of Whisper IDs scored by
    /// the last message's time (ms), written with each stored message (`PendingQueue`).
    /// Two identities are direct peers when each is in the other's set within
    /// `Peers.window` (`Peers.exchanged`, docs/protocol.md section 8).
    public static func peers(_ whisperId: String) -> String { "peers:{\(whisperId)}" }
    /// The members of `peers:{W}` that W never wrote to (one-way senders: strangers, or
    /// contacts W has not answered yet), scored like `peers:{W}`. When `peers:{W}` is full,
    /// these go first, so strangers can only push out one another, never someone W
    /// writes to. Kept by the store script and by `peer-wrote.lua`.
    public static func unanswered(_ whisperId: String) -> String { "peers:{\(whisperId)}:unanswered" }
    /// Whom this identity wrote a 1:1 message to lately: a sorted set scored by time (ms),
    /// the newest `Peers.capacity`, kept `Peers.window`. Only the identity's own sends
    /// write it (`PeerMemory`), so nobody else can grow it.
    public static func wrote(_ whisperId: String) -> String { "wrote:{\(whisperId)}" }
    /// The groups an identity belongs to: a hash of groupId → the group's membership
    /// version (`groups.epoch`) as of the last change. Written by the router that
    /// changes a group, before the change is answered; read by the store script of each
    /// group copy, in the recipient's slot (docs/architecture.md, "Groups").
    public static func groups(_ whisperId: String) -> String { "groups:{\(whisperId)}" }
    /// Set by an account deletion for as long as others may still hold the deleted
    /// identity's messages (the pending queue's 72 hours): frames owed to it (receipts
    /// of those messages, group events, missed calls) are then not kept
    /// (`owed-frames-keep.lua`), so nothing of the identity comes back after it went.
    public static func deleted(_ whisperId: String) -> String { "deleted:{\(whisperId)}" }
    /// Who watches an identity's presence: a hash of watcher Whisper ID →
    /// `<expires ms> <gateway> <connId>` (the watcher's socket that subscribed).
    public static func watchers(_ whisperId: String) -> String { "watchers:{\(whisperId)}" }
    /// The sockets holding a place in a live-text conversation, all gateways: a hash of
    /// `<gateway> <connId>` → `<expires ms> <W|L> <Whisper ID or listener ID> <0|1 joined>`,
    /// each renewed by its gateway while the socket is open (`LiveRelay`).
    public static func liveSockets(_ conversationId: String) -> String { "live:{\(conversationId)}" }
    /// The typing throttle of one (sender, peer) pair, in the sender's slot: set for the
    /// throttle's interval when a `typing` frame to the peer is relayed.
    public static func typing(_ sender: String, _ peer: String) -> String { "typing:{\(sender)}:\(peer)" }
    /// The pub/sub channel a gateway instance listens on for frames to its sockets.
    public static func gatewayChannel(_ instanceID: String) -> String { "gateway:\(instanceID)" }
}

/// Direct peers: identities that each sent the other a message within `window`.
public enum Peers {
    public static let window: Duration = .seconds(30 * 86_400)
    /// Senders remembered per identity: the most recent ones, those the identity never
    /// wrote to leaving first (`RedisKeys.unanswered`).
    public static let capacity = 1_000

    /// The rule, in one place: A and B are direct peers when B is in `peers:{A}` and A
    /// in `peers:{B}`, both within the window. `scores` are the two `ZSCORE` replies;
    /// a message one side sent alone (a stranger's first message) is not enough.
    public static func exchanged(_ scores: [RESPValue], now: Int64) -> Bool {
        scores.count == 2 && scores.allSatisfy { wrote($0, now: now) }
    }

    /// One half of `exchanged`: a `ZSCORE` reply says the member wrote within the window.
    public static func wrote(_ score: RESPValue, now: Int64) -> Bool {
        guard let time = score.string.flatMap(Double.init) else { return false }
        return time >= Double(now &- Int64(window.milliseconds))
    }

    /// The two look-ups `exchanged` answers for `one` and `other`, in that order.
    public static func lookups(_ one: String, _ other: String) -> [RedisCommand] {
        [RedisCommand("ZSCORE", RedisKeys.peers(one), other), RedisCommand("ZSCORE", RedisKeys.peers(other), one)]
    }

    /// Whether `one` and each of `others` are direct peers: the two look-ups of each pair
    /// in one pipeline, answered by `exchanged`.
    public static func exchanged(_ one: String, with others: [String], on redis: RedisClient) async throws -> [Bool] {
        guard !others.isEmpty else { return [] }
        let scores = try await redis.pipeline(others.flatMap { lookups(one, $0) })
        let now = Clock.millisecondsNow()
        return others.indices.map { index in
            scores.count > 2 * index + 1 && exchanged([scores[2 * index], scores[2 * index + 1]], now: now)
        }
    }
}
