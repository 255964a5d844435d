import Crypto
import Foundation
import Logging
import NIOCore
import PostgresNIO
import Prometheus
import Synchronization
import WhisperMessaging
import WhisperShared

/// `group_create` and `group_update` (docs/protocol.md section 6), and each group copy's
/// membership check. A change is one Postgres transaction holding the group's row (rows,
/// then the members' Redis records, then commit); members are told and the author answered
/// after it, and the entry acknowledged last, so a router that dies midway leaves the rest
/// to another (docs/architecture.md, "Groups").
struct GroupDesk: Sendable {
    let postgres: PostgresClient
    let redis: RedisClient
    let directory: GroupDirectory
    let identities: IdentityCache
    let events: OwedFrames
    /// Open invitations kept per invitee; past it the oldest are withdrawn.
    var invitationsPerIdentity = RouterSettings.defaultGroupInvitationsPerIdentity
    let logger: Logger

    /// How long an invitation stays open.
    static let invitationLifetime = "30 days"

    // MARK: - Membership of a copy

    /// Checks that `sender` and `recipient` are members of the group, as cached; the
    /// version checked goes with the copy to the store script. A refusal from memory
    /// stands only once the refused identity's record agrees with it: a record of another
    /// version says a change was answered since the view was read, so the group is read
    /// again (a member added or an invitation accepted is reachable through every router
    /// as soon as its author is answered).
    func admit(sender: String, recipient: String, groupId: String) async throws -> PendingQueue.GroupCheck {
        var (found, fromMemory) = try await directory.view(groupId)
        if fromMemory, let doubted = Self.refused(found, sender: sender, recipient: recipient),
           try await recordDisagrees(doubted, groupId: groupId, view: found) {
            directory.forget(groupId)
            found = try await directory.view(groupId).view
        }
        guard let view = found else { throw WhisperError(.notFound, "no such group") }
        guard view.isMember(sender) else { throw WhisperError(.forbidden, "the sender is not a member of this group") }
        guard view.isMember(recipient) else { throw WhisperError(.forbidden, "to is not a member of this group") }
        return PendingQueue.GroupCheck(groupId: groupId, epoch: view.epoch)
    }

    /// The identity whose membership `view` refuses the copy for (the sender when there
    /// is no group), or nil when it admits it.
    private static func refused(_ view: GroupView?, sender: String, recipient: String) -> String? {
        guard let view, view.isMember(sender) else { return sender }
        return view.isMember(recipient) ? nil : recipient
    }

    /// Whether `whisperId`'s record of the group names a version other than `view`'s
    /// (a record with no view, or a view with no record, agree that it is not a member).
    private func recordDisagrees(_ whisperId: String, groupId: String, view: GroupView?) async throws -> Bool {
        guard let recorded = try await redis.send("HGET", RedisKeys.groups(whisperId), groupId).string.flatMap({ Int64($0) }) else {
            return false
        }
        return recorded != view?.epoch
    }

    /// After the store script found no record of the group for `recipient`: reads the
    /// group again and, if Postgres still lists the recipient (the record was lost, for
    /// example with Redis data), writes the record back while holding the group's row,
    /// so no change can slip in between. Returns the check to retry with.
    func recheck(sender: String, recipient: String, groupId: String) async throws -> PendingQueue.GroupCheck {
        directory.forget(groupId)
        let check = try await admit(sender: sender, recipient: recipient, groupId: groupId)
        let repaired = try await transaction { connection -> Bool in
            guard let view = try await GroupView.load(groupId, lock: "SHARE", on: connection, logger: logger),
                  view.isMember(recipient), view.epoch == check.epoch else { return false }
            try await redis.send("HSETNX", RedisKeys.groups(recipient), groupId, view.epoch)
            return true
        }
        guard repaired else {
            directory.forget(groupId)
            throw WhisperError(.forbidden, "to is not a member of this group")
        }
        logger.warning("group_record_restored", metadata: ["groupId": "\(groupId)", "whisperId": "\(recipient)"])
        return check
    }

    // MARK: - group_create

    /// Creates the group; the answer and every member's `group_created`. A resend with
    /// the same `requestId` (an answer lost with its socket) finds the group it made and
    /// answers the same.
    func create(_ request: GroupCreate, entry: RouterStream.Entry) async throws -> [UInt8] {
        let creator = entry.whisperId
        try await checkAuthor(creator)
        var seen: Set<String> = [creator]
        let others = request.memberIds.filter { seen.insert($0).inserted }
        guard !others.isEmpty else {
            throw WhisperError(.invalidPayload, "memberIds must name at least one identity besides the creator")
        }
        try await checkNewMembers(others)
        // Only direct peers of the creator are added; anyone else is invited and becomes
        // a member only by accepting, so nobody can put a stranger into groups.
        let (direct, invitees) = try await partition(others, author: creator)
        let groupId = Self.groupId(creator: creator, requestId: entry.requestId)
        let (view, invited) = try await transaction { connection -> (GroupView, [String]) in
            let inserted = try await connection.query(
                """
                INSERT INTO groups (group_id, title, created_by) VALUES (\(groupId), \(request.title), \(creator))
                ON CONFLICT (group_id) DO NOTHING RETURNING group_id
                """,
                logger: logger
            ).decode(String.self).first { _ in true }
            if inserted != nil {
                _ = try await connection.query(
                    """
                    INSERT INTO group_members (group_id, whisper_id, role, added_by, added_at)
                    SELECT \(groupId), member, CASE WHEN member = \(creator) THEN 'owner' ELSE 'member' END, \(creator),
                           now() + (ordinality - 1) * interval '1 microsecond'
                    FROM unnest(\([creator] + direct)::text[]) WITH ORDINALITY AS m(member, ordinality)
                    """,
                    logger: logger
                )
                try await invite(invitees, to: groupId, by: creator, on: connection)
            }
            guard let view = try await GroupView.load(groupId, lock: "UPDATE", on: connection, logger: logger) else {
                throw WhisperError(.internalError, "the group was not stored; try again")
            }
            guard view.createdBy == creator else {
                throw WhisperError(.invalidPayload, "requestId names another group; use a new requestId")
            }
            try await writeRecords(groupId: groupId, epoch: view.epoch, members: view.memberIds, removed: [])
            return (view, try await Self.invitees(of: groupId, on: connection, logger: logger))
        }
        directory.remember(groupId, view)
        var created = GroupCreated(
            groupId: groupId, title: view.title, memberIds: view.memberIds, ownerId: view.owner ?? creator,
            createdBy: view.createdBy ?? creator, createdAt: view.createdAt
        )
        try await tell(ServerFrameCodec.encode(created), to: view.memberIds.filter { $0 != creator })
        try await notifyInvited(invited, group: view, by: creator)
        logger.info("group_created", metadata: [
            "groupId": "\(groupId)", "whisperId": "\(creator)", "members": "\(view.memberIds.count)", "invited": "\(invited.count)",
        ])
        created.invited = invited.isEmpty ? nil : invited
        return ServerFrameCodec.encode(created, requestId: entry.requestId)
    }

    /// A new group's ID: random, or, when the frame has a `requestId`, derived from the
    /// creator and that ID, so a resent `group_create` names the same group.
    static func groupId(creator: String, requestId: String?) -> String {
        guard let requestId else { return "grp-" + RandomID.uuid() }
        var generator = DigestWords(SHA256.hash(data: Array("whisper group v1\n\(creator)\n\(requestId)".utf8)))
        return "grp-" + RandomID.uuid(using: &generator)
    }

    // MARK: - group_update

    /// What an update changed.
    private struct Change: Sendable {
        var before: GroupView
        /// Nil when the last member left (the group is gone).
        var after: GroupView?
        var added: [String]
        var removed: [String]
        /// Identities of `addMembers` invited rather than added.
        var invited: [String] = []
    }

    /// Applies a member's update as ``GroupChangePlan`` decides it; an invitee who is not a
    /// member may accept (`addMembers: [self]`) or decline (`removeMembers: [self]`), nothing else.
    func update(_ request: GroupUpdate, entry: RouterStream.Entry) async throws -> [UInt8] {
        let author = entry.whisperId
        try await checkAuthor(author)
        let adds = Self.unique(request.addMembers ?? [])
        let removes = Self.unique(request.removeMembers ?? [])
        guard Set(adds).isDisjoint(with: removes) else {
            throw WhisperError(.invalidPayload, "a Whisper ID is in both addMembers and removeMembers")
        }
        try await checkNewMembers(adds.filter { $0 != author })
        let (_, strangers) = try await partition(adds.filter { $0 != author }, author: author)
        let groupId = request.groupId
        let change = try await transaction { connection -> Change in
            guard let before = try await GroupView.load(groupId, lock: "UPDATE", on: connection, logger: logger) else {
                throw WhisperError(.notFound, "no such group")
            }
            guard let role = before.roles[author] else {
                return try await answerInvitation(request, by: author, group: before, adds: adds, removes: removes, on: connection)
            }
            let plan = try GroupChangePlan(
                before: before, role: role, author: author, adds: adds, removes: removes, strangers: strangers, title: request.title,
                invitees: try await Self.invitees(of: groupId, on: connection, logger: logger)
            )
            let (invited, added, removed, remaining) = (plan.invited, plan.added, plan.removed, plan.remaining)
            if !plan.withdrawn.isEmpty {
                _ = try await connection.query(
                    "DELETE FROM group_invitations WHERE group_id = \(groupId) AND whisper_id = ANY(\(plan.withdrawn)::text[])", logger: logger
                )
            }
            if !invited.isEmpty { try await invite(invited, to: groupId, by: author, on: connection) }
            guard plan.changesSomething else {
                return Change(before: before, after: before, added: [], removed: [], invited: invited)
            }
            guard !remaining.isEmpty else {
                _ = try await connection.query("DELETE FROM groups WHERE group_id = \(groupId)", logger: logger)
                try await writeRecords(groupId: groupId, epoch: before.epoch + 1, members: [], removed: removed)
                return Change(before: before, after: nil, added: [], removed: removed)
            }
            let (title, epoch) = (plan.title, plan.epoch)
            _ = try await connection.query(
                "UPDATE groups SET title = \(title), epoch = \(epoch), updated_at = now() WHERE group_id = \(groupId)", logger: logger
            )
            if !removed.isEmpty {
                _ = try await connection.query(
                    "DELETE FROM group_members WHERE group_id = \(groupId) AND whisper_id = ANY(\(removed)::text[])", logger: logger
                )
            }
            if !added.isEmpty {
                _ = try await connection.query(
                    """
                    INSERT INTO group_members (group_id, whisper_id, role, added_by, added_at)
                    SELECT \(groupId), member, 'member', \(author), now() + (ordinality - 1) * interval '1 microsecond'
                    FROM unnest(\(added)::text[]) WITH ORDINALITY AS m(member, ordinality)
                    """,
                    logger: logger
                )
            }
            if let heir = plan.heir {
                _ = try await connection.query(
                    "UPDATE group_members SET role = 'owner' WHERE group_id = \(groupId) AND whisper_id = \(heir)", logger: logger
                )
            }
            guard let after = try await GroupView.load(groupId, on: connection, logger: logger) else {
                throw WhisperError(.internalError, "the group was not stored; try again")
            }
            if plan.changesMembers {
                try await writeRecords(groupId: groupId, epoch: epoch, members: after.memberIds, removed: removed)
            }
            return Change(before: before, after: after, added: added, removed: removed, invited: invited)
        }
        directory.remember(groupId, change.after)
        let now = Clock.millisecondsNow()
        let updated = GroupUpdated(
            groupId: groupId, title: change.after?.title ?? change.before.title, memberIds: change.after?.memberIds ?? [],
            ownerId: change.after?.owner, added: change.added, removed: change.removed, updatedBy: author, updatedAt: now
        )
        if change.after != change.before {
            let members = (change.after?.memberIds ?? []).filter { $0 != author }
            try await tell(ServerFrameCodec.encode(updated), to: members)
            var farewell = updated
            farewell.memberIds = []
            farewell.added = []
            farewell.ownerId = nil
            try await tell(ServerFrameCodec.encode(farewell), to: change.removed.filter { $0 != author })
            logger.info("group_updated", metadata: [
                "groupId": "\(groupId)", "whisperId": "\(author)", "added": "\(change.added.count)", "removed": "\(change.removed.count)",
            ])
        }
        if let view = change.after { try await notifyInvited(change.invited, group: view, by: author) }
        var answer = updated
        if change.after == nil || change.removed.contains(author) {
            answer.memberIds = []
            answer.ownerId = nil
        }
        answer.invited = change.invited.isEmpty ? nil : change.invited
        return ServerFrameCodec.encode(answer, requestId: entry.requestId)
    }

    /// An update from someone who is not a member: accepting (`addMembers: [self]`) or
    /// declining (`removeMembers: [self]`) an open invitation, and nothing else. Runs in
    /// the update's transaction, with the group's row held.
    private func answerInvitation(
        _ request: GroupUpdate, by invitee: String, group before: GroupView, adds: [String], removes: [String], on connection: PostgresConnection
    ) async throws -> Change {
        let accepting = adds == [invitee] && removes.isEmpty && request.title == nil
        let declining = removes == [invitee] && adds.isEmpty && request.title == nil
        guard accepting || declining else { throw WhisperError(.forbidden, "not a member of this group") }
        let invitation = try await connection.query(
            """
            DELETE FROM group_invitations WHERE group_id = \(before.groupId) AND whisper_id = \(invitee)
              AND invited_at > now() - \(Self.invitationLifetime)::interval
            RETURNING invited_by
            """,
            logger: logger
        ).decode(String.self).first { _ in true }
        guard let invitedBy = invitation else { throw WhisperError(.forbidden, "not a member of this group") }
        guard accepting else { return Change(before: before, after: before, added: [], removed: [invitee]) }
        guard before.memberIds.count < Limits.MAX_GROUP_MEMBERS else {
            throw WhisperError(.forbidden, "the group is full (\(Limits.MAX_GROUP_MEMBERS) members)")
        }
        let epoch = before.epoch + 1
        _ = try await connection.query(
            "UPDATE groups SET epoch = \(epoch), updated_at = now() WHERE group_id = \(before.groupId)", logger: logger
        )
        _ = try await connection.query(
            """
            INSERT INTO group_members (group_id, whisper_id, role, added_by, added_at)
            VALUES (\(before.groupId), \(invitee), 'member', \(invitedBy), now())
            """,
            logger: logger
        )
        guard let after = try await GroupView.load(before.groupId, on: connection, logger: logger) else {
            throw WhisperError(.internalError, "the group was not stored; try again")
        }
        try await writeRecords(groupId: before.groupId, epoch: epoch, members: after.memberIds, removed: [])
        return Change(before: before, after: after, added: [invitee], removed: [])
    }

    // MARK: - Invitations

    /// `group_invitations_list`: the identity's open invitations, newest first.
    func invitations(for whisperId: String, entry: RouterStream.Entry) async throws -> [UInt8] {
        let rows = try await postgres.query(
            """
            SELECT i.group_id, g.title, i.invited_by,
                   (SELECT count(*) FROM group_members m WHERE m.group_id = i.group_id)::int8,
                   (extract(epoch FROM i.invited_at) * 1000)::int8
            FROM group_invitations i JOIN groups g ON g.group_id = i.group_id
            WHERE i.whisper_id = \(whisperId) AND i.invited_at > now() - \(Self.invitationLifetime)::interval
            ORDER BY i.invited_at DESC, i.group_id LIMIT \(invitationsPerIdentity)
            """,
            logger: logger
        )
        var invitations: [GroupInvitation] = []
        for try await (groupId, title, invitedBy, members, at) in rows.decode((String, String, String, Int64, Int64).self) {
            invitations.append(GroupInvitation(groupId: groupId, title: title, invitedBy: invitedBy, memberCount: Int(clamping: members), invitedAt: at))
        }
        return ServerFrameCodec.encode(GroupInvitations(invitations: invitations), requestId: entry.requestId)
    }

    /// Splits identities named by `author` into its direct peers (added at once) and the
    /// others (invited): the rule of presence and typing (`Peers.exchanged`).
    private func partition(_ whisperIds: [String], author: String) async throws -> (direct: [String], invited: [String]) {
        let peers = try await Peers.exchanged(author, with: whisperIds, on: redis)
        let pairs = zip(whisperIds, peers)
        return (pairs.filter(\.1).map(\.0), pairs.filter { !$0.1 }.map(\.0))
    }

    /// Records invitations (a repeat renews one) and keeps each invitee's open ones at
    /// `invitationsPerIdentity`, withdrawing the oldest and any that lapsed.
    private func invite(_ invitees: [String], to groupId: String, by author: String, on connection: PostgresConnection) async throws {
        guard !invitees.isEmpty else { return }
        _ = try await connection.query(
            """
            INSERT INTO group_invitations (group_id, whisper_id, invited_by)
            SELECT \(groupId), invitee, \(author) FROM unnest(\(invitees)::text[]) AS i(invitee)
            ON CONFLICT (group_id, whisper_id) DO UPDATE SET invited_by = EXCLUDED.invited_by, invited_at = now()
            """,
            logger: logger
        )
        _ = try await connection.query(
            """
            DELETE FROM group_invitations d USING (
                SELECT group_id, whisper_id, invited_at,
                       row_number() OVER (PARTITION BY whisper_id ORDER BY invited_at DESC, group_id) AS rank
                FROM group_invitations WHERE whisper_id = ANY(\(invitees)::text[])
            ) r
            WHERE d.group_id = r.group_id AND d.whisper_id = r.whisper_id
              AND (r.rank > \(invitationsPerIdentity) OR r.invited_at <= now() - \(Self.invitationLifetime)::interval)
            """,
            logger: logger
        )
    }

    /// The identities with an open invitation to `groupId`.
    private static func invitees(of groupId: String, on connection: PostgresConnection, logger: Logger) async throws -> [String] {
        var invitees: [String] = []
        let rows = try await connection.query(
            """
            SELECT whisper_id FROM group_invitations
            WHERE group_id = \(groupId) AND invited_at > now() - \(invitationLifetime)::interval ORDER BY invited_at, whisper_id
            """,
            logger: logger
        )
        for try await invitee in rows.decode(String.self) { invitees.append(invitee) }
        return invitees
    }

    /// Tells each invitee's live socket of its invitation (`group_invited`). Nothing is
    /// stored for an invitee: one who is away lists them with `group_invitations_list`,
    /// so invitations never take room from what an identity is owed.
    private func notifyInvited(_ invitees: [String], group: GroupView, by author: String) async throws {
        guard !invitees.isEmpty else { return }
        let frame = ServerFrameCodec.encode(GroupInvitation(
            groupId: group.groupId, title: group.title, invitedBy: author, memberCount: group.memberIds.count, invitedAt: Clock.millisecondsNow()
        ))
        try await SocketFanOut.deliverToLive(frame, of: invitees, on: redis)
    }

    // MARK: - Shared steps

    /// Runs `body` in a transaction. A refusal decided inside it (rolled back, nothing
    /// changed) reaches the client as it is; PostgresNIO wraps what the body throws.
    private func transaction<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await postgres.withTransaction(refusing: WhisperError.self, logger: logger) { connection -> T in try await body(connection) }
    }

    /// The author of a change must exist and not be banned.
    private func checkAuthor(_ whisperId: String) async throws {
        guard let author = try await identities.lookup(whisperId) else {
            throw WhisperError(.notRegistered, "the identity of this session does not exist")
        }
        guard !author.banned else { throw WhisperError(.userBanned, "this identity is banned") }
    }

    /// Identities joining a group must exist and not be banned.
    private func checkNewMembers(_ whisperIds: [String]) async throws {
        for whisperId in whisperIds {
            guard let member = try await identities.lookup(whisperId) else {
                throw WhisperError(.notFound, "no such identity: \(whisperId)")
            }
            guard !member.banned else { throw WhisperError(.forbidden, "\(whisperId) is banned") }
        }
    }

    /// The per-member records a copy's store script checks: every member gets the
    /// group's version, every removed member loses the group. One pipeline.
    private func writeRecords(groupId: String, epoch: Int64, members: [String], removed: [String]) async throws {
        let commands = members.map { RedisCommand("HSET", RedisKeys.groups($0), groupId, epoch) }
            + removed.map { RedisCommand("HDEL", RedisKeys.groups($0), groupId) }
        guard !commands.isEmpty else { return }
        for reply in try await redis.pipeline(commands) {
            if case .error(let message) = reply { throw RedisError.server(message) }
        }
    }

    /// Stores `frame` for each member and hands it to the live socket of each that has
    /// one (as receipts are: it leaves the store once a socket has taken it, else it
    /// comes before the next `fetch_pending` page).
    private func tell(_ frame: [UInt8], to members: [String]) async throws {
        guard !members.isEmpty else { return }
        let sockets = try await PresenceStore(redis: redis).lookup(members)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, member) in members.enumerated() {
                let socket = sockets[index]
                group.addTask { try await events.keep(frame, for: member, handingTo: socket) }
            }
            try await group.waitForAll()
        }
    }

    private static func unique(_ ids: [String]) -> [String] {
        var seen: Set<String> = []
        return ids.filter { seen.insert($0).inserted }
    }
}

/// Words of a digest, for `RandomID.uuid(using:)`: a UUID that a hash decides.
private struct DigestWords: RandomNumberGenerator {
    private var words: [UInt64]
    private var index = 0

    init(_ digest: SHA256.Digest) {
        let bytes = Array(digest)
        words = stride(from: 0, to: bytes.count, by: 8).map { start in
            bytes[start..<(start + 8)].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        }
    }

    mutating func next() -> UInt64 {
        defer { index = (index + 1) % words.count }
        return words[index]
    }
}
