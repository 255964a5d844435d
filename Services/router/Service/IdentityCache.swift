import Logging
import NIOCore
import PostgresNIO
import Synchronization
import WhisperShared

/// What routing needs to know of an identity: its signing key (immutable, so cached for
/// good) and whether it is banned (cached for a short while).
struct IdentityInfo: Sendable {
    var signPublicKey: [UInt8]
    var banned: Bool
}

/// Identities by Whisper ID, read from Postgres once and then kept in memory, so a
/// message never costs a database round trip for its sender's key.
final class IdentityCache: Sendable {
    private struct Entry {
        var info: IdentityInfo
        var fetchedAt: ContinuousClock.Instant
    }

    private let postgres: PostgresClient
    private let logger: Logger
    private let ttl: Duration
    private let capacity: Int
    private let entries = Mutex<[String: Entry]>([:])

    init(postgres: PostgresClient, logger: Logger, ttl: Duration, capacity: Int = 200_000) {
        self.postgres = postgres
        self.logger = logger
        self.ttl = ttl
        self.capacity = capacity
    }

    /// The identity, or nil when there is none.
    func lookup(_ whisperId: String) async throws -> IdentityInfo? {
        let now = ContinuousClock.now
        if let entry = entries.withLock({ $0[whisperId] }), now - entry.fetchedAt < ttl {
            return entry.info
        }
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
        return nil
    }
}
