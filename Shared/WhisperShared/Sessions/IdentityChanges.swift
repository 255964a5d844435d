/// A change of an identity's standing every gateway and router must see (`banned`,
/// `unbanned`, `deleted`), published on `identities:changed` as `<kind> <whisperId>` after
/// the Postgres commit. Subscribers drop their caches when they (re)subscribe, since
/// pub/sub can lose a message; Postgres is the record.
public struct IdentityChange: Sendable, Equatable {
    public enum Kind: String, Sendable {
        case banned
        case unbanned
        /// The identity is gone (`AccountDeletion`): its sockets close, caches forget it.
        case deleted
    }

    public static let channel = "identities:changed"

    public var kind: Kind
    public var whisperId: String

    public init(kind: Kind, whisperId: String) {
        self.kind = kind
        self.whisperId = whisperId
    }

    public var encoded: String { "\(kind.rawValue) \(whisperId)" }

    public static func decode(_ bytes: [UInt8]) -> IdentityChange? {
        let parts = String(decoding: bytes, as: UTF8.self).split(separator: " ")
        guard parts.count == 2, let kind = Kind(rawValue: String(parts[0])), Format.isWhisperID(String(parts[1])) else { return nil }
        return IdentityChange(kind: kind, whisperId: String(parts[1]))
    }

    /// Publishes the change; returns how many subscribers got it.
    @discardableResult
    public func publish(on redis: RedisClient) async throws -> Int {
        Int(try await redis.send("PUBLISH", Self.channel, encoded).int ?? 0)
    }
}

/// What a ban does outside Postgres, once it committed there: the identity's session
/// ends (so no socket can sign in with it again), its live socket is told
/// `session_revoked` (`banned`) and closed wherever it is, and every gateway and router
/// hears of it (`IdentityChange`). Running it twice does no harm, so an operator can
/// repeat a ban whose enforcement failed half-way (Redis down).
public struct BanEnforcement: Sendable {
    let redis: RedisClient

    public init(redis: RedisClient) {
        self.redis = redis
    }

    public struct Outcome: Sendable, Equatable {
        /// A session was live and is gone.
        public var endedSession: Bool
        /// How many subscribers (gateways and routers) heard of it.
        public var notified: Int
    }

    public func ban(_ whisperId: String) async throws -> Outcome {
        let ended = try await SessionStore(redis: redis).revokeAll(of: whisperId)
        // The socket named by presence is told directly; every gateway also closes any
        // other socket bound to the identity when it hears the change.
        if let socket = try await PresenceStore(redis: redis).lookup(whisperId) {
            try await GatewayCommand(kind: .revoke, connId: socket.connId, reason: .banned).publish(to: socket.gateway, on: redis)
        }
        let notified = try await IdentityChange(kind: .banned, whisperId: whisperId).publish(on: redis)
        return Outcome(endedSession: ended, notified: notified)
    }

    /// After a ban was lifted: caches let go of it at once.
    public func unban(_ whisperId: String) async throws -> Outcome {
        let notified = try await IdentityChange(kind: .unbanned, whisperId: whisperId).publish(on: redis)
        return Outcome(endedSession: false, notified: notified)
    }
}
