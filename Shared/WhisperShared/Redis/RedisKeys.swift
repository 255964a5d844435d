/// The Redis key space of spec 12.2. Per-user keys put the Whisper ID in a hash tag
/// (`{...}`) so the key space can move to Redis Cluster unchanged.
public enum RedisKeys {
    public static func session(_ token: String) -> String { "session:{\(token)}" }
    public static func challenge(_ id: String) -> String { "challenge:{\(id)}" }
    public static func presence(_ whisperId: String) -> String { "presence:{\(whisperId)}" }
    public static func pending(_ whisperId: String) -> String { "pending:{\(whisperId)}" }
    public static func rateLimit(_ key: String, _ action: String) -> String { "ratelimit:{\(key)}:\(action)" }
    public static func call(_ callId: String) -> String { "call:{\(callId)}" }
    /// Who sent this identity a message lately: a sorted set of Whisper IDs scored by
    /// the last message's time (ms), written with each stored message (`PendingQueue`).
    /// Two identities are direct peers when either is in the other's set within
    /// `Peers.window` (docs/protocol.md section 8).
    public static func peers(_ whisperId: String) -> String { "peers:{\(whisperId)}" }
    /// The pub/sub channel a gateway instance listens on for frames to its sockets.
    public static func gatewayChannel(_ instanceID: String) -> String { "gateway:\(instanceID)" }
}

/// Direct peers: identities that exchanged a message within `window`.
public enum Peers {
    public static let window: Duration = .seconds(30 * 86_400)
    /// Senders remembered per identity (the most recent ones).
    public static let capacity = 1_000
}
