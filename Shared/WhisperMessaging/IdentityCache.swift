import Logging
import NIOCore
import PostgresNIO
import Prometheus
import Synchronization
import WhisperShared

/// What routing needs to know of an identity: its signing key (immutable, so cached for
/// good) and whether it is banned (cached for a short while).
public struct IdentityInfo: Sendable {
    public var signPublicKey: [UInt8]
    public var banned: Bool

    public init(signPublicKey: [UInt8], banned: Bool) {
        self.signPublicKey = signPublicKey
        self.banned = banned
    }
}

/// Identities by Whisper ID (for routers, and gateways storing messages themselves),
/// read from Postgres once and then kept in memory, so a
/// message never costs a database round trip for its sender's key. A Whisper ID that
/// names no identity is remembered too, for `unknownTTL`, so a sender trying random
/// recipients costs a memory lookup per message, not a query.
public final class IdentityCache: Sendable {
    private struct Entry {
        var info: IdentityInfo
        /// Until when the entry is trusted: the TTL, or sooner when a ban ends then.
        var validUntil: ContinuousClock.Instant
    }

    private let postgres: PostgresClient
    private let logger: Logger
    private let ttl: Duration
    private let capacity: Int
    private let unknownTTL: Duration
    private let entries = Mutex<[String: Entry]>([:])
    private let unknown = Mutex<[String: ContinuousClock.Instant]>([:])

    public init(
        postgres: PostgresClient, logger: Logger, metrics: ServiceMetrics, ttl: Duration, unknownTTL: Duration = .seconds(10),
        capacity: Int = 200_000
    ) {
        self.queries = metrics.counter("identity_queries", help: "Identities read from Postgres to route messages (cache misses).")
        self.postgres = postgres
        self.logger = logger
        self.ttl = ttl
        self.unknownTTL = unknownTTL
        self.capacity = capacity
    }

    private let queries: Counter

    /// Drops what is known of one identity (its standing changed: `IdentityChange`).
    public func forget(_ whisperId: String) {
        _ = entries.withLock { $0.removeValue(forKey: whisperId) }
        _ = unknown.withLock { $0.removeValue(forKey: whisperId) }
    }

    /// Drops everything: after the change channel
    /// was (re)subscribed, since changes published meanwhile were missed.
    public func forgetAll() {
        entries.withLock { $0.removeAll() }
        unknown.withLock { $0.removeAll() }
    }

    /// The identity, or nil when there is none.
    public func lookup(_ whisperId: String) async throws -> IdentityInfo? {
        let now = ContinuousClock.now
        if let entry = entries.withLock({ $0[whisperId] }), now < entry.validUntil {
            return entry.info
        }
        if let seen = unknown.withLock({ $0[whisperId] }), now - seen < unknownTTL {
            return nil
        }
        queries.increment()
        let rows = try await postgres.query(
            """
            SELECT u.sign_public_key,
                   (u.status = 'banned' OR b.id IS NOT NULL),
                   COALESCE((extract(epoch FROM (b.expires_at - now())) * 1000)::bigint, -1)
            FROM users u
            LEFT JOIN bans b ON b.whisper_id = u.whisper_id AND b.lifted_at IS NULL
                AND (b.expires_at IS NULL OR b.expires_at > now())
            WHERE u.whisper_id = \(whisperId)
            """,
            logger: logger
        )
        for try await (key, banned, banEndsInMs) in rows.decode((ByteBuffer, Bool, Int64).self) {
            let info = IdentityInfo(signPublicKey: Array(key.readableBytesView), banned: banned)
            // A ban that ends on its own is not trusted past its end.
            let validFor = banEndsInMs >= 0 ? min(ttl, .milliseconds(banEndsInMs)) : ttl
            entries.withLock { entries in
                if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
                entries[whisperId] = Entry(info: info, validUntil: now + validFor)
            }
            return info
        }
        unknown.withLock { unknown in
            if unknown.count >= capacity { unknown.removeAll(keepingCapacity: true) }
            unknown[whisperId] = now
        }
        return nil
    }
}
