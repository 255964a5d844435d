import Logging
import NIOCore
import PostgresNIO
import Prometheus
import Synchronization
import WhisperShared

/// What routing needs to know of an identity: its signing key (immutable, so cached for
/// good) and whether it is banned (cached for a short while).
struct IdentityInfo: Sendable {
    var signPublicKey: [UInt8]
    var banned: Bool
}

/// Identities by Whisper ID, read from Postgres once and then kept in memory, so a
/// message never costs a database round trip for its sender's key. A Whisper ID that
/// names no identity is remembered too, for `unknownTTL`, so a sender trying random
/// recipients costs a memory lookup per message, not a query.
final class IdentityCache: Sendable {
    private struct Entry {
        var info: IdentityInfo
        var fetchedAt: ContinuousClock.Instant
    }

    private let postgres: PostgresClient
    private let logger: Logger
    private let ttl: Duration
    private let capacity: Int
    private let unknownTTL: Duration
    private let entries = Mutex<[String: Entry]>([:])
    private let unknown = Mutex<[String: ContinuousClock.Instant]>([:])

    init(
        postgres: PostgresClient, logger: Logger, metrics: ServiceMetrics, ttl: Duration, unknownTTL: Duration = .seconds(10),
        capacity: Int = 200_000
    ) {
        self.queries = metrics.counter("identity_queries", help: "Identities the router read from Postgres (cache misses).")
        self.postgres = postgres
        self.logger = logger
        self.ttl = ttl
        self.unknownTTL = unknownTTL
        self.capacity = capacity
    }

    private let queries: Counter

    /// The identity, or nil when there is none.
    func lookup(_ whisperId: String) async throws -> IdentityInfo? {
        let now = ContinuousClock.now
        if let entry = entries.withLock({ $0[whisperId] }), now - entry.fetchedAt < ttl {
            return entry.info
        }
        if let seen = unknown.withLock({ $0[whisperId] }), now - seen < unknownTTL {
            return nil
        }
        queries.increment()
        let rows = try await postgres.query(
            """
            SELECT u.sign_public_key,
                   (u.status = 'banned' OR EXISTS (
                       SELECT 1 FROM bans b WHERE b.whisper_id = u.whisper_id AND b.lifted_at IS NULL
                         AND (b.expires_at IS NULL OR b.expires_at > now())))
            FROM users u WHERE u.whisper_id = \(whisperId)
            """,
            logger: logger
        )
        for try await (key, banned) in rows.decode((ByteBuffer, Bool).self) {
            let info = IdentityInfo(signPublicKey: Array(key.readableBytesView), banned: banned)
            entries.withLock { entries in
                if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
                entries[whisperId] = Entry(info: info, fetchedAt: now)
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
