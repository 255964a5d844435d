import Logging
import PostgresNIO

/// A group as one membership version left it.
struct GroupView: Sendable, Equatable {
    var groupId: String
    /// The membership version (`groups.epoch`): bumped by every change of members.
    var epoch: Int64
    var title: String
    /// Nil once the creator deleted its account.
    var createdBy: String?
    var createdAt: Int64
    /// Members in the order they joined (the owner of a new group first).
    var memberIds: [String]
    var roles: [String: String]

    var owner: String? { memberIds.first { roles[$0] == "owner" } }

    func isMember(_ whisperId: String) -> Bool { roles[whisperId] != nil }

    /// Reads a group and its members, locking the group's row when `lock` is given (an
    /// update takes `FOR UPDATE`, a record repair `FOR SHARE`). Nil when there is no such group.
    static func load(_ groupId: String, lock: String? = nil, on connection: PostgresConnection, logger: Logger) async throws -> GroupView? {
        let lockClause = lock.map { " FOR \($0) OF g" } ?? ""
        let rows = try await connection.query(
            PostgresQuery(unsafeSQL: """
                SELECT g.epoch, g.title, g.created_by, (extract(epoch FROM g.created_at) * 1000)::int8, m.whisper_id, m.role
                FROM groups g LEFT JOIN group_members m ON m.group_id = g.group_id
                WHERE g.group_id = $1 ORDER BY m.added_at, m.whisper_id\(lockClause)
                """, binds: binds(groupId)),
            logger: logger
        )
        return try await read(groupId, rows)
    }

    static func load(_ groupId: String, on client: PostgresClient, logger: Logger) async throws -> GroupView? {
        try await client.withConnection { try await load(groupId, on: $0, logger: logger) }
    }

    private static func binds(_ groupId: String) -> PostgresBindings {
        var binds = PostgresBindings()
        binds.append(groupId)
        return binds
    }

    private static func read(_ groupId: String, _ rows: PostgresRowSequence) async throws -> GroupView? {
        var view: GroupView?
        for try await (epoch, title, createdBy, createdAt, member, role) in rows.decode((Int64, String, String?, Int64, String?, String?).self) {
            if view == nil {
                view = GroupView(groupId: groupId, epoch: epoch, title: title, createdBy: createdBy, createdAt: createdAt, memberIds: [], roles: [:])
            }
            if let member, let role {
                view?.memberIds.append(member)
                view?.roles[member] = role
            }
        }
        return view
    }
}
