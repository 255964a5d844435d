import Logging
import PostgresNIO
import WhisperShared

/// A Whisperer's live-text conversations (docs/protocol.md section 13), kept in Postgres
/// (`live_conversations`): created, renamed, deleted and listed by their owner only. A
/// conversation that is not the asker's is answered like one that does not exist
/// (`NOT_FOUND`), so IDs cannot be probed.
struct LiveConversationDesk: Sendable {
    let postgres: PostgresClient
    let logger: Logger

    /// What each query returns of a conversation, in `LiveConversation`'s order (times in ms).
    static let columns = "conversation_id, name, (extract(epoch FROM created_at) * 1000)::bigint, (extract(epoch FROM updated_at) * 1000)::bigint"

    /// A new conversation; refused with `FORBIDDEN` past `MAX_LIVE_CONVERSATIONS`. The
    /// owner's row is locked while counting, so two creates at once cannot both pass.
    func create(_ request: LiveConversationCreate, owner: String) async throws -> LiveConversation {
        let id = RandomID.uuid()
        let created = try await postgres.withTransaction(logger: logger) { connection -> LiveConversation? in
            _ = try await connection.query("SELECT 1 FROM users WHERE whisper_id = \(owner) FOR UPDATE", logger: logger)
            guard try await connection.count("SELECT count(*)::bigint FROM live_conversations WHERE owner_id = \(owner)", logger: logger)
                < Limits.MAX_LIVE_CONVERSATIONS else { return nil }
            let rows = try await connection.query(
                """
                INSERT INTO live_conversations (conversation_id, owner_id, name) VALUES (\(id), \(owner), \(request.name))
                RETURNING \(unescaped: Self.columns)
                """,
                logger: logger
            )
            return try await Self.first(rows)
        }
        guard let created else {
            throw WhisperError(.forbidden, "at most \(Limits.MAX_LIVE_CONVERSATIONS) conversations; delete one first")
        }
        return created
    }

    func rename(_ request: LiveConversationRename, owner: String) async throws -> LiveConversation {
        let rows = try await postgres.query(
            """
            UPDATE live_conversations SET name = \(request.name), updated_at = now()
            WHERE conversation_id = \(request.conversationId) AND owner_id = \(owner)
            RETURNING \(unescaped: Self.columns)
            """,
            logger: logger
        )
        guard let renamed = try await Self.first(rows) else { throw Self.notFound }
        return renamed
    }

    func delete(_ request: LiveConversationDelete, owner: String) async throws -> LiveConversationDeleted {
        let rows = try await postgres.query(
            "DELETE FROM live_conversations WHERE conversation_id = \(request.conversationId) AND owner_id = \(owner) RETURNING conversation_id",
            logger: logger
        )
        var deleted = false
        for try await _ in rows.decode(String.self) { deleted = true }
        guard deleted else { throw Self.notFound }
        return LiveConversationDeleted(conversationId: request.conversationId)
    }

    /// Every conversation of `owner`, newest first.
    /// `live_conversation_delete`: gone in Postgres, then whoever is in it live is let go
    /// (`live`). Should that fail (Redis unreachable), the deletion stands: no new place
    /// can be taken, and the sockets in it keep theirs until they leave.
    func delete(_ request: LiveConversationDelete, owner: String, releasing live: LiveRelay) async throws -> LiveConversationDeleted {
        let deleted = try await delete(request, owner: owner)
        do {
            try await live.deleted(request.conversationId)
        } catch {
            logger.warning("live_deleted_release_failed", metadata: ["error": "\(error)"])
        }
        return deleted
    }

    func list(owner: String) async throws -> LiveConversations {
        let rows = try await postgres.query(
            """
            SELECT \(unescaped: Self.columns)
            FROM live_conversations WHERE owner_id = \(owner) ORDER BY created_at DESC, conversation_id LIMIT \(Limits.MAX_LIVE_CONVERSATIONS)
            """,
            logger: logger
        )
        var conversations: [LiveConversation] = []
        for try await (id, name, created, updated) in rows.decode((String, String, Int64, Int64).self) {
            conversations.append(LiveConversation(conversationId: id, name: name, createdAt: created, updatedAt: updated))
        }
        return LiveConversations(conversations: conversations)
    }

    static let notFound = WhisperError(.notFound, "no such conversation of yours")

    private static func first(_ rows: PostgresRowSequence) async throws -> LiveConversation? {
        for try await (id, name, created, updated) in rows.decode((String, String, Int64, Int64).self) {
            return LiveConversation(conversationId: id, name: name, createdAt: created, updatedAt: updated)
        }
        return nil
    }
}
