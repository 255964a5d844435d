import Crypto
import Foundation
import Logging
import PostgresNIO
import WhisperShared

/// The deletion journal (docs/operations.md, "Deletions and restores"): each account
/// deletion with its signed request, sealed in the object store under a keyed hash of the
/// Whisper ID (``JournalKeys``), so a database restored from an older dump gets its
/// deletions back. gc-worker writes it (``write()``) and applies it (``reapply()``).
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
        /// Objects rewritten under the first key (from the first format, or another key).
        public var rewritten = 0
        /// Objects nothing configured opens: under a key no longer configured, or not
        /// the journal's (`whisper_gc_deletion_journal_unreadable`).
        public var unreadable = 0
    }

    let postgres: PostgresClient
    let redis: RedisClient
    let store: S3Client
    let keys: JournalKeys
    let deletion: AccountDeletion
    /// The instance writing to the router stream (its entries' `gw`: the router's answer
    /// goes to a channel nobody reads).
    let instanceID: String
    let batchSize: Int
    let logger: Logger

    public init(
        postgres: PostgresClient, redis: RedisClient, store: S3Client, keys: JournalKeys, instanceID: String, batchSize: Int = 100, logger: Logger
    ) {
        self.postgres = postgres
        self.redis = redis
        self.store = store
        self.keys = keys
        self.deletion = AccountDeletion(postgres: postgres, redis: redis, logger: logger)
        self.instanceID = instanceID
        self.batchSize = batchSize
        self.logger = logger
    }

    /// An object's name in the first format, the Whisper ID in the clear (read, and
    /// rewritten, by ``reapply()``; never written).
    static func plainName(_ whisperId: String) -> String { prefix + whisperId }

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
            var copied: [(whisperId: String, name: String)] = []
            for record in records {
                do {
                    copied.append((record.whisperId, try await put(record)))
                } catch {
                    logger.warning("deletion_journal_write_failed", metadata: ["error": "\(error)"])
                    break
                }
            }
            if !copied.isEmpty {
                _ = try await connection.query("""
                    UPDATE deleted_identities d SET journaled_at = now(), journal_name = c.name
                    FROM unnest(\(copied.map(\.whisperId))::text[], \(copied.map(\.name))::text[]) AS c(id, name) WHERE d.whisper_id = c.id
                    """, logger: logger)
            }
            return (copied.count, records.count)
        }
    }

    /// Walks the whole journal and applies every deletion the database does not hold (it
    /// was restored from a dump taken before them): an identity that is there again is
    /// deleted again through the router stream, as its owner's request was (held to its
    /// signature and to the time it was first done; its groups are left as by a member
    /// leaving); one that is not (it registered after the dump) is recorded as deleted.
    /// On the way, an object of the first format or under a key other than the first is
    /// rewritten under the first key. A journal whose deletions the database holds under
    /// the first key costs one listing per 1,000 of them.
    public func reapply() async throws -> Reapplied {
        var result = Reapplied()
        var continuation: String?
        repeat {
            let page = try await store.list(prefix: Self.prefix, continuation: continuation)
            continuation = page.next
            var sealed: [(name: String, key: JournalKeys.Key)] = [], plain: [String] = []
            for name in page.keys {
                let rest = String(name.dropFirst(Self.prefix.count))
                if Format.isWhisperID(rest) {
                    plain.append(rest)
                } else if let key = keys.key(naming: name) {
                    sealed.append((name, key))
                } else {
                    // Under a key no longer configured, or not the journal's: nothing can open it.
                    result.unreadable += 1
                }
            }
            result.checked += sealed.count + plain.count
            let unknownNames = Set(try await notRecorded(names: sealed.map(\.name)))
            for (name, key) in sealed where unknownNames.contains(name) || key.id != keys.first.id {
                guard let body = try await store.get(name), let record = key.open(body, name: name) else {
                    result.unreadable += 1
                    continue
                }
                try await apply(record, from: name, to: &result)
            }
            for whisperId in plain {
                guard let body = try await store.get(Self.plainName(whisperId)),
                      let record = try? JSONDecoder().decode(Record.self, from: Data(body)), record.whisperId == whisperId else {
                    // Needs no key: not well formed (counted, not named, as every record).
                    result.skipped += 1
                    logger.warning("deletion_journal_record_malformed")
                    continue
                }
                try await apply(record, from: Self.plainName(whisperId), to: &result)
            }
        } while continuation != nil
        if result.routed + result.recorded + result.skipped + result.rewritten + result.unreadable > 0 {
            // Logs name no one deleted (docs/security.md): counted, not named.
            logger.notice("deletion_journal_reapplied", metadata: [
                "checked": "\(result.checked)", "routed": "\(result.routed)", "recorded": "\(result.recorded)", "skipped": "\(result.skipped)",
                "rewritten": "\(result.rewritten)", "unreadable": "\(result.unreadable)",
            ])
        }
        return result
    }

    /// One record met by the walk, read from the object `name`: applied unless the
    /// database holds the deletion, then kept under the first key alone.
    private func apply(_ record: Record, from name: String, to result: inout Reapplied) async throws {
        guard record.isWellFormed else {
            result.skipped += 1
            logger.warning("deletion_journal_record_malformed")
            return
        }
        if try await deletion.deletedAt(record.whisperId) == nil {
            switch (try await isRegistered(record.whisperId), record.request) {
            case (false, _):
                try await deletion.recordAgain(record)
                result.recorded += 1
            case (true, let request?):
                try await route(request, deletedAt: record.deletedAt)
                result.routed += 1
            case (true, nil):
                // Nothing shows its owner asked: left alone (and kept, sealed, below).
                result.skipped += 1
                logger.warning("deletion_journal_unsigned")
            }
        }
        // Under the first key: written there unless it is that object already, the row
        // told its name, then the other object deleted.
        let current = keys.first.name(of: record.whisperId)
        if current != name { try await put(record) }
        _ = try await postgres.query(
            "UPDATE deleted_identities SET journal_name = \(current), journaled_at = coalesce(journaled_at, now()) WHERE whisper_id = \(record.whisperId)",
            logger: logger
        )
        if current != name {
            try await store.delete(name)
            result.rewritten += 1
        }
    }

    /// Writes `record` under the first key; returns the object's name.
    @discardableResult
    private func put(_ record: Record) async throws -> String {
        let name = keys.first.name(of: record.whisperId)
        try await store.put(name, body: keys.first.seal(try JSONEncoder().encode(record), name: name), contentType: "application/octet-stream")
        return name
    }

    /// The names among `names` that no row of `deleted_identities` has.
    private func notRecorded(names: [String]) async throws -> [String] {
        guard !names.isEmpty else { return [] }
        let rows = try await postgres.query("""
            SELECT j.name FROM unnest(\(names)::text[]) AS j(name)
            WHERE NOT EXISTS (SELECT 1 FROM deleted_identities d WHERE d.journal_name = j.name) ORDER BY j.name
            """, logger: logger)
        var missing: [String] = []
        for try await name in rows.decode(String.self) { missing.append(name) }
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

/// The deletion journal's keys (`GC_WORKER_JOURNAL_KEYS`): the first seals every new
/// object, each opens its own. From each 32-byte secret HMAC-SHA-256 derives the key ID,
/// the naming key (a keyed hash of the Whisper ID) and the sealing key (AES-256-GCM with
/// the object's name as associated data).
public struct JournalKeys: Sendable {
    public struct Key: Sendable {
        public let id: String
        let naming: SymmetricKey
        let sealing: SymmetricKey

        public init(secret: [UInt8]) {
            let secret = SymmetricKey(data: secret)
            func derived(_ label: String) -> [UInt8] { Array(HMAC<SHA256>.authenticationCode(for: Array(label.utf8), using: secret)) }
            id = derived("whisper-deletion-journal-key-id-v1").prefix(8).hexString
            naming = SymmetricKey(data: derived("whisper-deletion-journal-name-v1"))
            sealing = SymmetricKey(data: derived("whisper-deletion-journal-seal-v1"))
        }

        /// `deletions/<key ID>/<HMAC-SHA-256 of the Whisper ID, hex>`.
        public func name(of whisperId: String) -> String {
            DeletionJournal.prefix + id + "/" + Array(HMAC<SHA256>.authenticationCode(for: Array(whisperId.utf8), using: naming)).hexString
        }

        /// The 12-byte nonce, the ciphertext and the 16-byte tag.
        func seal(_ record: Data, name: String) throws -> [UInt8] {
            guard let combined = try AES.GCM.seal(record, using: sealing, authenticating: Array(name.utf8)).combined else {
                throw JournalKeyError.sealFailed
            }
            return Array(combined)
        }

        /// The record sealed in `body`, if it opens under this key with `name` and is the
        /// record of the identity `name` names.
        public func open(_ body: [UInt8], name: String) -> DeletionJournal.Record? {
            guard let box = try? AES.GCM.SealedBox(combined: body), let plain = try? AES.GCM.open(box, using: sealing, authenticating: Array(name.utf8)),
                  let record = try? JSONDecoder().decode(DeletionJournal.Record.self, from: plain), self.name(of: record.whisperId) == name else { return nil }
            return record
        }
    }

    public let first: Key
    let all: [Key]

    /// `secrets`: 32 bytes each, the first the one that writes; at least one.
    public init(secrets: [[UInt8]]) {
        all = secrets.map(Key.init(secret:))
        first = all.first ?? Key(secret: [UInt8](repeating: 0, count: 32))
    }

    /// The configured key an object's name says it is under.
    func key(naming name: String) -> Key? {
        let parts = name.dropFirst(DeletionJournal.prefix.count).split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[1].count == 64 else { return nil }
        return all.first { $0.id == parts[0] }
    }
}

enum JournalKeyError: Error {
    case sealFailed
}
