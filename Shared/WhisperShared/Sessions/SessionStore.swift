import Crypto
import Foundation

/// What a session token stands for (`session:{token}` in Redis, docs/protocol.md section 4).
public struct SessionRecord: Codable, Sendable, Equatable {
    public var whisperId: String
    public var deviceId: String
    public var platform: Platform
    public var createdAt: Int64
    public var expiresAt: Int64

    public init(whisperId: String, deviceId: String, platform: Platform, createdAt: Int64, expiresAt: Int64) {
        self.whisperId = whisperId
        self.deviceId = deviceId
        self.platform = platform
        self.createdAt = createdAt
        self.expiresAt = expiresAt
    }
}

/// Sessions in Redis, tokens stored nowhere: `session:{<SHA-256 of the token>}` holds the
/// record for 7 days and `user:{whisperId}:session` the digest of the one live token, so a
/// new login, ban or logout ends the old one and a copy of Redis holds no usable token.
/// Concurrent logins converge on the one the user key names last.
public struct SessionStore: Sendable {
    public static let ttl: Duration = .seconds(Limits.SESSION_TTL_DAYS * 86_400)
    let redis: RedisClient

    public init(redis: RedisClient) {
        self.redis = redis
    }

    public static func userKey(_ whisperId: String) -> String { "user:{\(whisperId)}:session" }

    /// The name a token's digest goes by: lower-case hex SHA-256 of its characters.
    public static func digest(_ token: String) -> String {
        Array(SHA256.hash(data: Array(token.utf8))).hexString
    }

    /// The record's key for a digest (`session:{<digest>}`).
    static func recordKey(digest: String) -> String { RedisKeys.session(digest: digest) }

    /// A new opaque token: 256 random bits, base64url without padding (43 characters).
    public static func newToken() -> String {
        Base64URL.encode(SecureBytes.random(32))
    }

    /// Starts a session, ending every earlier one of the identity. Returns the new
    /// token and whether it replaced a live one.
    public func create(for record: SessionRecord) async throws -> (token: String, replaced: Bool) {
        let token = Self.newToken()
        let digest = Self.digest(token)
        try await redis.send("SET", Self.recordKey(digest: digest), Self.encode(record), "PX", Int(Self.ttl.milliseconds))
        let previous = try await redis.send("SET", Self.userKey(record.whisperId), digest, "PX", Int(Self.ttl.milliseconds), "GET").string
        if let previous, previous != digest {
            try await redis.send("DEL", Self.recordKey(digest: previous))
        }
        return (token, previous != nil)
    }

    /// The session a token stands for, if it is live.
    public func lookup(_ token: String) async throws -> SessionRecord? {
        guard Format.isSessionToken(token), let bytes = try await redis.send("GET", Self.recordKey(digest: Self.digest(token))).bytes else {
            return nil
        }
        return try? JSONDecoder().decode(SessionRecord.self, from: Data(bytes))
    }

    /// Swaps a live token for a new one with a fresh 7-day expiry; the old token stops
    /// working. Nil when the old token is not live (or was replaced meanwhile).
    public func refresh(_ token: String, now: Int64) async throws -> (token: String, record: SessionRecord)? {
        guard var record = try await lookup(token) else { return nil }
        record.expiresAt = now + Int64(Self.ttl.milliseconds)
        let newToken = Self.newToken()
        let oldDigest = Self.digest(token), newDigest = Self.digest(newToken)
        try await redis.send("SET", Self.recordKey(digest: newDigest), Self.encode(record), "PX", Int(Self.ttl.milliseconds))
        let swapped = try await redis.evaluate(
            Self.compareAndSwap, keys: [Self.userKey(record.whisperId)], arguments: [oldDigest, newDigest, Int(Self.ttl.milliseconds)]
        )
        guard swapped == .integer(1) else {
            try await redis.send("DEL", Self.recordKey(digest: newDigest))
            return nil
        }
        try await redis.send("DEL", Self.recordKey(digest: oldDigest))
        return (newToken, record)
    }

    /// Ends a session. Returns the record it ended, if the token was live.
    @discardableResult
    public func revoke(_ token: String) async throws -> SessionRecord? {
        guard let record = try await lookup(token) else { return nil }
        let digest = Self.digest(token)
        try await redis.send("DEL", Self.recordKey(digest: digest))
        try await redis.evaluate(RedisScript.deleteIfEquals, keys: [Self.userKey(record.whisperId)], arguments: [digest])
        return record
    }

    /// Ends whatever session an identity has (bans). True when there was one.
    @discardableResult
    public func revokeAll(of whisperId: String) async throws -> Bool {
        guard let digest = try await redis.send("GETDEL", Self.userKey(whisperId)).string else { return false }
        try await redis.send("DEL", Self.recordKey(digest: digest))
        return true
    }

    static func encode(_ record: SessionRecord) -> [UInt8] {
        Array((try? JSONEncoder().encode(record)) ?? Data())
    }

    /// `session-compare-and-swap.lua` (its header says what it takes and answers).
    static let compareAndSwap = RedisScript(LuaSource.sessionCompareAndSwap)
}

/// base64url without padding (RFC 4648 section 5), for tokens.
public enum Base64URL {
    public static func encode(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
