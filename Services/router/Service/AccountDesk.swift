import Logging
import PostgresNIO
import WhisperMessaging
import WhisperShared

/// `account_delete`, the router's part (docs/protocol.md section 4): the identity leaves
/// each group as a leaving member would (`GroupDesk.update`), then `AccountDeletion` ends
/// the rest. A deletion replayed from the journal after a restore takes the same path.
struct AccountDesk: Sendable {
    let groups: GroupDesk
    let deletion: AccountDeletion
    let postgres: PostgresClient
    let logger: Logger

    /// Deletes the identity and answers through `reply`; only then are its sockets closed
    /// (the answer must reach the socket that asked before its close).
    func delete(_ request: AccountDelete, entry: RouterStream.Entry, reply: (_ answer: [UInt8]) async throws -> Void) async throws {
        let whisperId = entry.whisperId
        // An entry handled again (its router died before acknowledging it) is answered again.
        if let deletedAt = try await deletion.deletedAt(whisperId) {
            try await reply(ServerFrameCodec.encode(AccountDeleted(whisperId: whisperId, deletedAt: deletedAt), requestId: entry.requestId))
            try await deletion.announce(whisperId)
            return
        }
        // Held to the rule again here, where the deletion happens: what is done cannot be
        // undone. One applied again from the journal after a restore (no gateway saw it)
        // is held to the time it was first done.
        try await deletion.verify(request.fields, session: whisperId, journaledAt: entry.journaledAt)
        for groupId in try await memberships(of: whisperId) {
            do {
                let leave = GroupUpdate(sessionToken: request.sessionToken, GroupUpdateFields(groupId: groupId, removeMembers: [whisperId]))
                _ = try await groups.update(leave, entry: entry)
            } catch let refusal as WhisperError where refusal.code == .notFound {
                continue  // deleted meanwhile
            }
        }
        let deletedAt = try await deletion.erase(whisperId, request: request.fields, journaledAt: entry.journaledAt)
        try await reply(ServerFrameCodec.encode(AccountDeleted(whisperId: whisperId, deletedAt: deletedAt), requestId: entry.requestId))
        try await deletion.announce(whisperId)
    }

    /// The groups the identity is a member of.
    private func memberships(of whisperId: String) async throws -> [String] {
        var ids: [String] = []
        let rows = try await postgres.query("SELECT group_id FROM group_members WHERE whisper_id = \(whisperId) ORDER BY group_id", logger: logger)
        for try await id in rows.decode(String.self) { ids.append(id) }
        return ids
    }
}
