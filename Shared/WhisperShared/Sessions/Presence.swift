/// Where an identity's live socket is: `presence:{whisperId}` = `<gateway instance> <connId>`.
/// Gateways refresh the key while the socket is open; it expires on its own when a
/// gateway dies without cleaning up.
public struct PresenceRecord: Sendable, Equatable {
    public var gateway: String
    public var connId: String

    public init(gateway: String, connId: String) {
        self.gateway = gateway
        self.connId = connId
    }

    /// The record as Redis keeps it; the only place its format is written.
    public var encoded: String { "\(gateway) \(connId)" }

    public init?(encoded: String) {
        let parts = encoded.split(separator: " ", maxSplits: 1)
        guard parts.count == 2 else { return nil }
        self.init(gateway: String(parts[0]), connId: String(parts[1]))
    }
}

public struct PresenceStore: Sendable {
    /// How long a presence entry lives without a refresh.
    public static let ttl: Duration = .seconds(90)
    public let redis: RedisClient

    public init(redis: RedisClient) {
        self.redis = redis
    }

    public func lookup(_ whisperId: String) async throws -> PresenceRecord? {
        try await redis.send("GET", RedisKeys.presence(whisperId)).string.flatMap(PresenceRecord.init(encoded:))
    }

    /// The live socket of each identity (nil for one without), in the order given, in
    /// one round trip.
    public func lookup(_ whisperIds: [String]) async throws -> [PresenceRecord?] {
        guard !whisperIds.isEmpty else { return [] }
        let replies = try await redis.pipeline(whisperIds.map { RedisCommand("GET", RedisKeys.presence($0)) })
        return whisperIds.indices.map { index in
            index < replies.count ? replies[index].string.flatMap(PresenceRecord.init(encoded:)) : nil
        }
    }

    /// Records this socket as the identity's live one; returns the one it replaced. In
    /// the same write it ends the identity's wake-up window (`RedisKeys.pushWoken`):
    /// the device answered, so the next message that finds it offline wakes it again.
    @discardableResult
    public func set(_ whisperId: String, to record: PresenceRecord) async throws -> PresenceRecord? {
        let replies = try await redis.pipeline([
            RedisCommand("SET", RedisKeys.presence(whisperId), record.encoded, "PX", Int(Self.ttl.milliseconds), "GET"),
            RedisCommand("DEL", RedisKeys.pushWoken(whisperId)),
        ])
        if case .error(let message)? = replies.first { throw RedisError.server(message) }
        return replies.first?.string.flatMap(PresenceRecord.init(encoded:))
    }

    /// Extends the entries of sockets that are still open, in one round trip.
    public func refresh(_ entries: [(whisperId: String, record: PresenceRecord)]) async throws {
        guard !entries.isEmpty else { return }
        _ = try await redis.pipeline(entries.map {
            Self.refreshIfOwned.evalsha(keys: [RedisKeys.presence($0.whisperId)], arguments: [$0.record.encoded, Int(Self.ttl.milliseconds)])
        })
    }

    /// Loads the scripts this store runs with EVALSHA inside pipelines.
    public func prepare() async throws {
        try await redis.send("SCRIPT", "LOAD", Self.refreshIfOwned.source)
    }

    /// Removes the entry if it still names this socket (a newer socket may have taken
    /// over); true when it did (the identity has gone offline).
    @discardableResult
    public func clear(_ whisperId: String, ifOwnedBy record: PresenceRecord) async throws -> Bool {
        let reply = try await redis.evaluate(RedisScript.deleteIfEquals, keys: [RedisKeys.presence(whisperId)], arguments: [record.encoded])
        return (reply.int ?? 0) > 0
    }

    /// `presence-refresh-if-owned.lua` (its header says what it takes and answers).
    static let refreshIfOwned = RedisScript(LuaSource.presenceRefreshIfOwned)
}
