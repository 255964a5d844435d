import Foundation
import Logging
import NIOCore
import PostgresNIO
import WhisperShared

/// The end of deleting an identity (`account_delete`, docs/security.md "Deleting an
/// account"), after the gateway's and router's own parts: its Postgres rows in one
/// transaction (its Whisper ID stays in `deleted_identities`), its Redis keys, session and
/// sockets. Every step can run again, so a request that failed half-way is simply resent.
public struct AccountDeletion: Sendable {
    let postgres: PostgresClient
    let redis: RedisClient
    public let logger: Logger

    public init(postgres: PostgresClient, redis: RedisClient, logger: Logger) {
        self.postgres = postgres
        self.redis = redis
        self.logger = logger
    }

    /// Holds `request` to its rule (``check(_:session:signPublicKey:now:)``) with the
    /// identity's signing key as stored; wherever a request is served, this is the check.
    /// A deletion applied again from the journal (``DeletionJournal``) is held to the time
    /// it was first done (`journaledAt`), when it was served under the same rule.
    public func verify(_ request: AccountDeleteFields, session whisperId: String, journaledAt: Int64? = nil) async throws {
        try Self.check(request, session: whisperId, signPublicKey: try await signingKey(of: whisperId), now: journaledAt ?? Clock.millisecondsNow())
    }

    /// The rule: the session's own identity, signed within ``Limits/TIMESTAMP_SKEW_MS`` of
    /// `now` by the identity's signing key (none: it is deleted already).
    static func check(_ request: AccountDeleteFields, session whisperId: String, signPublicKey: [UInt8]?, now: Int64) throws(WhisperError) {
        guard request.whisperId == whisperId else { throw WhisperError(.forbidden, "an identity can delete only itself") }
        guard abs(now - request.timestamp) <= Int64(Limits.TIMESTAMP_SKEW_MS) else {
            throw WhisperError(.invalidTimestamp, "timestamp is more than \(Limits.TIMESTAMP_SKEW_MS / 60_000) minutes from the server's clock")
        }
        guard let signPublicKey, let signature = Data(base64Encoded: request.signature),
              Ed25519.verifyWithSodium(signature: Array(signature), message: request.signedBytes, publicKey: signPublicKey) else {
            throw WhisperError(.authFailed, "signature does not verify with the identity's signing key")
        }
    }

    /// The identity's signing key; nil when there is no such identity (any more).
    func signingKey(of whisperId: String) async throws -> [UInt8]? {
        let rows = try await postgres.query("SELECT sign_public_key FROM users WHERE whisper_id = \(whisperId)", logger: logger)
        for try await key in rows.decode(ByteBuffer.self) { return Array(key.readableBytesView) }
        return nil
    }

    /// What the operators' audit record says instead of a deleted identity's ID.
    public static let deletedTarget = "deleted identity"

    /// When the identity was deleted; nil while it is not.
    public func deletedAt(_ whisperId: String) async throws -> Int64? {
        try await Self.deletedAt(whisperId, on: postgres, logger: logger)
    }

    private static func deletedAt(_ whisperId: String, on client: some PostgresQueryRunner, logger: Logger) async throws -> Int64? {
        let rows = try await client.run(
            "SELECT (extract(epoch FROM deleted_at) * 1000)::int8 FROM deleted_identities WHERE whisper_id = \(whisperId)", logger: logger
        )
        for try await at in rows.decode(Int64.self) { return at }
        return nil
    }

    /// Deletes what is left of the identity once its groups, live conversations and
    /// channels are let go; returns when it was deleted (ms since 1970). Its sockets are
    /// closed by ``announce(_:)``, once the request is answered. The signed request is
    /// kept with the Whisper ID, for the deletion journal; one applied again from the
    /// journal keeps the time it was first done (`journaledAt`).
    public func erase(_ whisperId: String, request: AccountDeleteFields, journaledAt: Int64? = nil) async throws -> Int64 {
        let deletedAt = try await erasePostgres(whisperId, request: request, journaledAt: journaledAt)
        try await eraseRedis(whisperId)
        return deletedAt
    }

    /// A journaled deletion of an identity the database does not hold (it registered after
    /// the dump the database was restored from): its Whisper ID is recorded as deleted
    /// again, so that it is never given out, and whatever Redis still holds of it goes.
    public func recordAgain(_ record: DeletionJournal.Record) async throws {
        _ = try await postgres.query("""
            INSERT INTO deleted_identities (whisper_id, deleted_at, request_timestamp, request_signature)
            VALUES (\(record.whisperId), to_timestamp(\(Double(record.deletedAt) / 1_000)), \(record.request?.timestamp), \(record.request?.signature))
            ON CONFLICT DO NOTHING
            """, logger: logger)
        try await eraseRedis(record.whisperId)
    }

    /// Every gateway closes the identity's sockets (`session_revoked`, `account_deleted`);
    /// routers and gateways forget what they cached of it (`IdentityChange`).
    public func announce(_ whisperId: String) async throws {
        try await IdentityChange(kind: .deleted, whisperId: whisperId).publish(on: redis)
    }

    /// One transaction: the users row goes (its devices and push tokens, bans, reports it
    /// filed or that name it, contacts backup, live conversations and push-to-talk
    /// channels and memberships go with it, by cascade), its Whisper ID is kept in
    /// `deleted_identities` for the key directory to publish, its attachments expire for
    /// gc-worker (which deletes the blobs), and rows of others that named it lose the name.
    private func erasePostgres(_ whisperId: String, request: AccountDeleteFields, journaledAt: Int64?) async throws -> Int64 {
        try await postgres.withTransaction(logger: logger) { connection in
            _ = try await connection.query(
                "UPDATE attachments SET expires_at = least(expires_at, now()) WHERE uploader_id = \(whisperId)", logger: logger
            )
            // Attachments sent to it wait for its receipt no more.
            _ = try await connection.query("DELETE FROM attachment_recipients WHERE recipient_id = \(whisperId)", logger: logger)
            // Its invitations, received and sent (those it sent are withdrawn).
            _ = try await connection.query(
                "DELETE FROM group_invitations WHERE whisper_id = \(whisperId) OR invited_by = \(whisperId)", logger: logger
            )
            // The operators' record keeps what they did (who, what, when, until when), not
            // whom it was done to, nor what they wrote about it.
            _ = try await connection.query(
                "UPDATE audit_events SET target = \(Self.deletedTarget), details = details - 'reason' - 'note' WHERE target = \(whisperId)",
                logger: logger
            )
            _ = try await connection.query(
                """
                UPDATE audit_events SET details = (details - 'note') || jsonb_build_object('reported', \(Self.deletedTarget)::text)
                WHERE details->>'reported' = \(whisperId)
                """,
                logger: logger
            )
            let removed = try await connection.query("DELETE FROM users WHERE whisper_id = \(whisperId) RETURNING whisper_id", logger: logger)
            var wasThere = false
            for try await _ in removed.decode(String.self) { wasThere = true }
            if wasThere {
                let firstDone = journaledAt.map { Double($0) / 1_000 }
                _ = try await connection.query("""
                    INSERT INTO deleted_identities (whisper_id, deleted_at, request_timestamp, request_signature)
                    VALUES (\(whisperId), coalesce(to_timestamp(\(firstDone)), now()), \(request.timestamp), \(request.signature))
                    ON CONFLICT DO NOTHING
                    """, logger: logger)
            }
            guard let deletedAt = try await Self.deletedAt(whisperId, on: connection, logger: logger) else {
                throw WhisperError(.notFound, "no such identity")
            }
            return deletedAt
        }
    }

    /// The identity's own keys (``keys(of:records:others:shards:)``), its session, and its
    /// name in the records of everyone it wrote to or heard from. The keys are named from
    /// what the deletion knows, never looked for in the key space: its cost is the
    /// identity's own size, however many keys Redis holds.
    private func eraseRedis(_ whisperId: String) async throws {
        // Before its own records go: whom it heard from and whom it wrote to, and which
        // message records its queue's index names.
        let listed = try await redis.pipeline([
            RedisCommand("ZRANGE", RedisKeys.peers(whisperId), 0, -1), RedisCommand("ZRANGE", RedisKeys.wrote(whisperId), 0, -1),
        ])
        let others = Set(listed.flatMap { ($0.array ?? []).compactMap(\.string) }).filter(Format.isWhisperID).sorted()
        let records = try await PendingQueue(redis: redis).records(of: whisperId)
        _ = try await SessionStore(redis: redis).revokeAll(of: whisperId)
        let own = Self.keys(of: whisperId, records: records, others: others, shards: redis.configuration.streamShards)
        // Its name in the others' records, then its own keys (each pipeline's commands in
        // one slot or several: the client sends each to its node).
        let commands = others.flatMap { other in
            [RedisCommand("ZREM", RedisKeys.peers(other), whisperId), RedisCommand("ZREM", RedisKeys.unanswered(other), whisperId),
             RedisCommand("ZREM", RedisKeys.wrote(other), whisperId)]
        } + own.map { RedisCommand("DEL", $0) }
            // Last, once its own keys are gone: what others still owe it is not kept.
            + [RedisCommand("SET", RedisKeys.deleted(whisperId), "1", "PX", Int(PendingQueue.ttl.milliseconds))]
        for start in stride(from: 0, to: commands.count, by: 200) {
            _ = try await redis.pipeline(Array(commands[start..<min(start + 200, commands.count)]))
        }
        logger.info("account_deleted", metadata: ["redisKeys": "\(own.count)", "peers": "\(others.count)"])
    }

    /// Every key an account deletion deletes for `whisperId`: the families kept under its
    /// hash tag, its buckets of every identity-scoped limit (in its own slot, and in its
    /// router shard's for routed frames), its message records (`records`, from their
    /// index), and the keys of each pair it has with `others` (whom it heard from or wrote
    /// to: the pair's message and call buckets and typing throttles, both ways). A key
    /// family added without its line here is left behind by deletions, which
    /// `AccountDeletionTests` finds key by key.
    static func keys(of whisperId: String, records: [String], others: [String], shards: StreamShards) -> [String] {
        let families = [
            RedisKeys.pending(whisperId), PendingQueue.bytesKey(whisperId), PendingQueue.strangersKey(whisperId),
            RedisKeys.presence(whisperId), RedisKeys.pushWoken(whisperId),
            RedisKeys.line(whisperId), RedisKeys.peers(whisperId), RedisKeys.unanswered(whisperId), RedisKeys.wrote(whisperId),
            RedisKeys.groups(whisperId), RedisKeys.watchers(whisperId), SessionStore.userKey(whisperId),
        ] + OwedStore.allCases.map { $0.key(whisperId) } + PendingQueue.recordKeys(of: whisperId)
        let buckets = Limit.registry.filter { $0.scope == .identity }.flatMap {
            [RedisKeys.rateLimit(whisperId, $0.bucket), RouterStream.bucket($0, whisperId, in: shards)]
        }
        let pairs = others.flatMap { other in
            [Limit.sendPerPair, Limit.callsPerPair].flatMap {
                [RedisKeys.rateLimit(whisperId, $0.pairAction(other)), RedisKeys.rateLimit(other, $0.pairAction(whisperId))]
            } + [RedisKeys.typing(whisperId, other), RedisKeys.typing(other, whisperId)]
        }
        var seen = Set<String>()
        return (families + buckets + records + pairs).filter { seen.insert($0).inserted }
    }
}
