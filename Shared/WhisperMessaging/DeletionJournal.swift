import Foundation
import Logging
import PostgresNIO
import WhisperShared

/// The deletion journal (docs/operations.md, "Deletions and restores"): every account
/// deletion, with the owner's signed request, copied out of PostgreSQL into the object
/// store, one object per identity (`deletions/<Whisper ID>`). A database restored from a
/// dump taken before a deletion would bring the identity back; the journal, which the
/// dump does not hold, gives the deletion back to it. gc-worker writes the journal
/// (``write()``) and applies it (``reapply()``).
public struct DeletionJournal: Sendable {
    public static let prefix = "deletions/"

    /// One journaled deletion, the object's JSON.
    public struct Record: Codable, Sendable, Equatable {
        public var whisperId: String
        /// When it was done (ms since 1970).
        public var deletedAt: Int64
        /// The owner's signed `account_delete` fields; absent only for a deletion made
        /// before requests were kept (such a record is applied to an identity that is gone,
        /// never to one that is there: nothing would show its owner asked).
        public var request: AccountDeleteFields?

        public init(whisperId: String, deletedAt: Int64, request: AccountDeleteFields?) {
            self.whisperId = whisperId
            self.deletedAt = deletedAt
            self.request = request
        }

        /// A record as the journal may hold it: a valid Whisper ID, and a request for that
        /// identity whose fields pass their schema.
        var isWellFormed: Bool {
            guard Format.isWhisperID(whisperId), deletedAt > 0 else { return false }
            guard let request else { return true }
            return request.whisperId == whisperId && (try? request.validate()) != nil
        }
    }

    /// What one ``reapply()`` found and did.
    public struct Reapplied: Sendable, Equatable {
        /// Journaled deletions read.
        public var checked = 0
        /// Identities the database holds again, deleted again through the router stream.
        public var routed = 0
        /// Identities the database does not hold, recorded as deleted again.
        public var recorded = 0
        /// Records left alone: malformed, or unsigned for an identity that is there.
        public var skipped = 0
    }

    let postgres: PostgresClient
    let redis: RedisClient
    let store: S3Client
    let deletion: AccountDeletion
    /// The instance writing to the router stream (its entries' `gw`: the router's answer
    /// goes to a channel nobody reads).
    let instanceID: String
    let batchSize: Int
    let logger: Logger

    public init(postgres: PostgresClient, redis: RedisClient, store: S3Client, instanceID: String, batchSize: Int = 100, logger: Logger) {
        self.postgres = postgres
        self.redis = redis
        self.store = store
        self.deletion = AccountDeletion(postgres: postgres, redis: redis, logger: logger)
        self.instanceID = instanceID
        self.batchSize = batchSize
        self.logger = logger
    }

    public static func key(_ whisperId: String) -> String { prefix + whisperId }

    /// Copies the deletions not yet journaled to the store, a batch per transaction (rows
    /// claimed with `SKIP LOCKED`, so several gc-workers share the work); returns how many.
    /// A copy the store refused stays waiting for the next pass.
    public func write() async throws -> Int {
        var written = 0
        while true {
            let (copied, claimed) = try await writeBatch()
            written += copied
            if claimed < batchSize || copied == 0 { return written }
        }
    }

    private func writeBatch() async throws -> (copied: Int, claimed: Int) {
        try await postgres.withTransaction(logger: logger) { connection in
            let rows = try await connection.query("""
                SELECT whisper_id, (extract(epoch FROM deleted_at) * 1000)::int8, request_timestamp, request_signature
                FROM deleted_identities WHERE journaled_at IS NULL
                ORDER BY deleted_at LIMIT \(batchSize) FOR UPDATE SKIP LOCKED
                """, logger: logger)
            var records: [Record] = []
            for try await (whisperId, deletedAt, timestamp, signature) in rows.decode((String, Int64, Int64?, String?).self) {
                let request = timestamp.flatMap { timestamp in signature.map { AccountDeleteFields(whisperId: whisperId, timestamp: timestamp, signature: $0) } }
                records.append(Record(whisperId: whisperId, deletedAt: deletedAt, request: request))
            }
            var copied: [String] = []
            for record in records {
                do {
                    try await store.put(Self.key(record.whisperId), body: Array(try JSONEncoder().encode(record)), contentType: "application/json")
                    copied.append(record.whisperId)
                } catch {
                    logger.warning("deletion_journal_write_failed", metadata: ["error": "\(error)"])
                    break
                }
            }
            if !copied.isEmpty {
                _ = try await connection.query(
                    "UPDATE deleted_identities SET journaled_at = now() WHERE whisper_id = ANY(\(copied)::text[])", logger: logger
                )
            }
            return (copied.count, records.count)
        }
    }

    /// Walks the whole journal and applies every deletion the database does not hold (it
    /// was restored from a dump taken before them): an identity that is there again is
    /// deleted again through the router stream, as its owner's request was (held to its
    /// signature and to the time it was first done; its groups are left as by a member
    /// leaving); one that is not (it registered after the dump) is recorded as deleted.
    /// A journal whose deletions the database holds costs one listing per 1,000 of them.
    public func reapply() async throws -> Reapplied {
        var result = Reapplied()
        var continuation: String?
        repeat {
            let page = try await store.list(prefix: Self.prefix, continuation: continuation)
            continuation = page.next
            let ids = page.keys.map { String($0.dropFirst(Self.prefix.count)) }.filter(Format.isWhisperID)
            result.checked += ids.count
            result.skipped += page.keys.count - ids.count
            for whisperId in try await notRecorded(ids) {
                guard let body = try await store.get(Self.key(whisperId)),
                      let record = try? JSONDecoder().decode(Record.self, from: Data(body)), record.whisperId == whisperId, record.isWellFormed else {
                    result.skipped += 1
                    // Logs name no one deleted (docs/security.md): counted, not named.
                    logger.warning("deletion_journal_record_malformed")
                    continue
                }
                switch (try await isRegistered(whisperId), record.request) {
                case (false, _):
                    try await deletion.recordAgain(record)
                    result.recorded += 1
                case (true, let request?):
                    try await route(request, deletedAt: record.deletedAt)
                    result.routed += 1
                case (true, nil):
                    result.skipped += 1
                    logger.warning("deletion_journal_unsigned")
                }
            }
        } while continuation != nil
        if result.routed + result.recorded + result.skipped > 0 {
            logger.notice("deletion_journal_reapplied", metadata: [
                "checked": "\(result.checked)", "routed": "\(result.routed)", "recorded": "\(result.recorded)", "skipped": "\(result.skipped)",
            ])
        }
        return result
    }

    /// The IDs among `ids` that `deleted_identities` does not hold.
    private func notRecorded(_ ids: [String]) async throws -> [String] {
        guard !ids.isEmpty else { return [] }
        let rows = try await postgres.query("""
            SELECT j.id FROM unnest(\(ids)::text[]) AS j(id)
            WHERE NOT EXISTS (SELECT 1 FROM deleted_identities d WHERE d.whisper_id = j.id) ORDER BY j.id
            """, logger: logger)
        var missing: [String] = []
        for try await id in rows.decode(String.self) { missing.append(id) }
        return missing
    }

    private func isRegistered(_ whisperId: String) async throws -> Bool {
        let rows = try await postgres.query("SELECT 1 FROM users WHERE whisper_id = \(whisperId)", logger: logger)
        for try await _ in rows.decode(Int.self) { return true }
        return false
    }

    /// The owner's request, on the router stream as a gateway would have put it (without a
    /// socket or a session token), marked with when it was first done.
    private func route(_ request: AccountDeleteFields, deletedAt: Int64) async throws {
        let entry = RouterStream.Entry(
            gateway: instanceID, connId: "", whisperId: request.whisperId, type: .accountDelete, requestId: nil,
            payload: try RouterStream.storedPayload(AccountDelete(sessionToken: "", request)), receivedAt: Clock.millisecondsNow(),
            journaledAt: deletedAt
        )
        _ = try await redis.send(entry.addCommand(in: redis.configuration.streamShards))
    }
}
