/// The Redis key space of spec 12.2. Per-user keys put the Whisper ID in a hash tag
/// (`{...}`) so the key space can move to Redis Cluster unchanged.
public enum RedisKeys {
    public static func session(_ token: String) -> String { "session:{\(token)}" }
    public static func challenge(_ id: String) -> String { "challenge:{\(id)}" }
    public static func presence(_ whisperId: String) -> String { "presence:{\(whisperId)}" }
    public static func pending(_ whisperId: String) -> String { "pending:{\(whisperId)}" }
    public static func rateLimit(_ key: String, _ action: String) -> String { "ratelimit:{\(key)}:\(action)" }
    public static func call(_ callId: String) -> String { "call:{\(callId)}" }
    /// The pub/sub channel a gateway instance listens on for frames to its sockets.
    public static func gatewayChannel(_ instanceID: String) -> String { "gateway:\(instanceID)" }
}
