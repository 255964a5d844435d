import Crypto
import Foundation
import Logging
import PostgresNIO
import WhisperMessaging
import WhisperShared

/// Push-to-talk channels and their members, in Postgres (docs/protocol.md section 14):
/// made, joined by code or by a public channel's ID, left, members removed for good,
/// codes drawn again, deleted, listed, and kept active while members connect.
struct PTTChannelDesk: Sendable {
    let roster: PTTRoster
    let postgres: PostgresClient
    let floor: FloorDesk
    let nearby: NearbyDesk
    let maxMembers: Int
    /// Members that connected and whose channels are not marked active yet.
    let touches: ChannelTouches
    let logger: Logger

    static let columns = "c.channel_id, c.name, c.join_code, c.owner_id, c.is_public, (extract(epoch FROM c.created_at) * 1000)::bigint"

    func create(_ request: PTTChannelCreate, owner: String) async throws -> PTTChannel {
        let id = RandomID.uuid()
        return try await postgres.withTransaction(refusing: WhisperError.self, logger: logger) { connection -> PTTChannel in
            _ = try await connection.query("SELECT 1 FROM users WHERE whisper_id = \(owner) FOR UPDATE", logger: logger)
            guard try await connection.count("SELECT count(*)::bigint FROM ptt_members WHERE whisper_id = \(owner)", logger: logger)
                < Limits.MAX_PTT_CHANNELS_PER_IDENTITY else {
                throw WhisperError(.forbidden, "at most \(Limits.MAX_PTT_CHANNELS_PER_IDENTITY) channels per identity; leave one first")
            }
            let code = try await Self.drawingCode { code in
                try await Self.returnsRow(
                    """
                    INSERT INTO ptt_channels (channel_id, owner_id, name, join_code, is_public)
                    VALUES (\(id), \(owner), \(request.name), \(code), \(request.isPublic)) ON CONFLICT (join_code) DO NOTHING RETURNING channel_id
                    """,
                    on: connection, logger: logger
                )
            }
            _ = try await connection.query("INSERT INTO ptt_members (channel_id, whisper_id) VALUES (\(id), \(owner))", logger: logger)
            return PTTChannel(
                channelId: id, name: request.name, joinCode: code, ownerId: owner, isPublic: request.isPublic, members: [owner],
                createdAt: Clock.millisecondsNow()
            )
        }
    }

    /// A join code `use` could take (it answers false when the code is taken already,
    /// unlikely: 31^8): drawn again up to five times, then `INTERNAL_ERROR`, which
    /// clients retry.
    private static func drawingCode(_ use: (String) async throws -> Bool) async throws -> String {
        for _ in 0..<5 {
            let code = PTTJoinCode.make()
            if try await use(code) { return code }
        }
        throw WhisperError(.internalError, "no free join code was drawn; try again")
    }

    /// Whether `query` returned a row.
    private static func returnsRow(_ query: PostgresQuery, on connection: PostgresConnection, logger: Logger) async throws -> Bool {
        for try await _ in try await connection.query(query, logger: logger) { return true }
        return false
    }

    /// Joins by code, or by ID a public channel (or one the member is in already), under
    /// the channel's row lock (the member bound holds however many join at once). The
    /// other members are told of a new member; joining again changes nothing and tells
    /// nobody.
    func join(_ request: PTTChannelJoin, member: String) async throws -> PTTChannel {
        let (channel, isNew) = try await postgres.withTransaction(refusing: WhisperError.self, logger: logger) { connection -> (PTTChannel, Bool) in
            let found = if let id = request.channelId {
                try await connection.query("SELECT channel_id, is_public FROM ptt_channels WHERE channel_id = \(id) FOR UPDATE", logger: logger)
            } else {
                try await connection.query(
                    "SELECT channel_id, true FROM ptt_channels WHERE join_code = \(request.joinCode ?? "") FOR UPDATE", logger: logger
                )
            }
            var row: (channelId: String, open: Bool)?
            for try await (id, open) in found.decode((String, Bool).self) { row = (id, open) }
            guard let (channelId, open) = row else { throw WhisperError(.notFound, "no such channel") }
            let members = try await PTTRoster.members(channelId, on: connection, logger: logger)
            let isNew = !members.contains(member)
            // A private channel's ID does not let anyone in: only its code does.
            guard open || !isNew else { throw WhisperError(.notFound, "no such channel") }
            if isNew {
                guard try await !Self.returnsRow(
                    "SELECT 1 FROM ptt_removed WHERE channel_id = \(channelId) AND whisper_id = \(member)", on: connection, logger: logger
                ) else { throw WhisperError(.forbidden, "the owner removed you from this channel") }
                guard members.count < maxMembers else {
                    throw WhisperError(.forbidden, "the channel has its \(maxMembers) members")
                }
                guard try await connection.count("SELECT count(*)::bigint FROM ptt_members WHERE whisper_id = \(member)", logger: logger)
                    < Limits.MAX_PTT_CHANNELS_PER_IDENTITY else {
                    throw WhisperError(.forbidden, "at most \(Limits.MAX_PTT_CHANNELS_PER_IDENTITY) channels per identity; leave one first")
                }
                _ = try await connection.query("INSERT INTO ptt_members (channel_id, whisper_id) VALUES (\(channelId), \(member))", logger: logger)
            }
            _ = try await connection.query("UPDATE ptt_channels SET last_active_at = now() WHERE channel_id = \(channelId)", logger: logger)
            guard let channel = try await Self.channels(
                "SELECT \(unescaped: Self.columns) FROM ptt_channels c WHERE c.channel_id = \(channelId)", on: connection, logger: logger
            ).first else {
                throw WhisperError(.notFound, "no such channel")
            }
            return (channel, isNew)
        }
        if isNew {
            try await roster.tell(PTTMembership(channelId: channel.channelId, whisperId: member, change: .joined), to: channel.members.filter { $0 != member })
        }
        return channel
    }

    /// A member leaves; the owner cannot (it deletes the channel instead), so a channel
    /// always counts against its owner's bound of channels.
    func leave(_ request: PTTChannelLeave, member: String) async throws -> PTTMembership {
        let rows = try await postgres.query(
            """
            WITH gone AS (
                DELETE FROM ptt_members m WHERE m.channel_id = \(request.channelId) AND m.whisper_id = \(member)
                AND NOT EXISTS (SELECT 1 FROM ptt_channels c WHERE c.channel_id = m.channel_id AND c.owner_id = \(member))
                RETURNING m.channel_id
            )
            SELECT (SELECT count(*) FROM gone)::bigint,
                   EXISTS (SELECT 1 FROM ptt_channels WHERE channel_id = \(request.channelId) AND owner_id = \(member))
            """,
            logger: logger
        )
        var left = false, owns = false
        for try await (count, owner) in rows.decode((Int64, Bool).self) { (left, owns) = (count > 0, owner) }
        guard !owns else { throw WhisperError(.forbidden, "the owner cannot leave its channel; it deletes it instead") }
        guard left else { throw PTTRoster.notFound }
        let gone = PTTMembership(channelId: request.channelId, whisperId: member, change: .left)
        let others = try await roster.members(request.channelId)
        try await roster.tell(gone, to: others)
        // A member who leaves holding the floor, or waiting for it, gives it up.
        try await floor.giveUp(request.channelId, member: member)
        return gone
    }

    /// The owner removes a member, for good: it joins the channel no more, by ID or by any
    /// code. Every member is told, the removed one too, and a floor the removed member
    /// held or waited for is given up. Anyone else, or a member that is
    /// not there, is answered `NOT_FOUND` like a channel that does not exist.
    func remove(_ request: PTTChannelRemove, owner: String) async throws -> PTTMembership {
        guard request.whisperId != owner else { throw WhisperError(.forbidden, "the owner cannot remove itself; it deletes the channel instead") }
        // Removed for good: the member joins this channel no more, by ID or by any code.
        let rows = try await postgres.query(
            """
            WITH gone AS (
                DELETE FROM ptt_members m WHERE m.channel_id = \(request.channelId) AND m.whisper_id = \(request.whisperId)
                AND EXISTS (SELECT 1 FROM ptt_channels c WHERE c.channel_id = m.channel_id AND c.owner_id = \(owner))
                RETURNING m.channel_id, m.whisper_id
            ), barred AS (
                INSERT INTO ptt_removed (channel_id, whisper_id) SELECT channel_id, whisper_id FROM gone ON CONFLICT DO NOTHING
            )
            SELECT channel_id FROM gone
            """,
            logger: logger
        )
        var removed = false
        for try await _ in rows.decode(String.self) { removed = true }
        guard removed else { throw PTTRoster.notFound }
        let gone = PTTMembership(channelId: request.channelId, whisperId: request.whisperId, change: .removed)
        try await roster.tell(gone, to: try await roster.members(request.channelId).filter { $0 != owner } + [request.whisperId])
        try await floor.giveUp(request.channelId, member: request.whisperId)
        return gone
    }

    /// The owner draws a new join code: the old one joins nobody from then on (members
    /// stay). The members are told the channel as it is now (`ptt_channel`, unasked).
    func rotateCode(_ request: PTTChannelRotateCode, owner: String) async throws -> PTTChannel {
        let channel = try await postgres.withTransaction(refusing: WhisperError.self, logger: logger) { connection -> PTTChannel in
            // Not the owner's channel: answered like one that does not exist.
            guard try await Self.returnsRow(
                "SELECT 1 FROM ptt_channels WHERE channel_id = \(request.channelId) AND owner_id = \(owner) FOR UPDATE", on: connection, logger: logger
            ) else { throw PTTRoster.notFound }
            _ = try await Self.drawingCode { code in
                try await Self.returnsRow(
                    """
                    UPDATE ptt_channels SET join_code = \(code) WHERE channel_id = \(request.channelId)
                    AND NOT EXISTS (SELECT 1 FROM ptt_channels WHERE join_code = \(code)) RETURNING channel_id
                    """,
                    on: connection, logger: logger
                )
            }
            guard let channel = try await Self.channels(
                "SELECT \(unescaped: Self.columns) FROM ptt_channels c WHERE c.channel_id = \(request.channelId)", on: connection, logger: logger
            ).first else { throw PTTRoster.notFound }
            return channel
        }
        try await roster.tell(channel, to: channel.members.filter { $0 != owner })
        return channel
    }

    /// Deletes a channel (its owner only); every member is told.
    func delete(_ request: PTTChannelDelete, owner: String) async throws -> PTTMembership {
        let members = try await roster.members(request.channelId)
        let rows = try await postgres.query(
            "DELETE FROM ptt_channels WHERE channel_id = \(request.channelId) AND owner_id = \(owner) RETURNING channel_id", logger: logger
        )
        var deleted = false
        for try await _ in rows.decode(String.self) { deleted = true }
        guard deleted else { throw PTTRoster.notFound }
        try await floor.forget(request.channelId)
        try await nearby.withdraw(request.channelId, owner: owner)
        let gone = PTTMembership(channelId: request.channelId, whisperId: owner, change: .deleted)
        try await roster.tell(gone, to: members.filter { $0 != owner })
        return gone
    }

    func list(member: String) async throws -> PTTChannels {
        let channels = try await postgres.withConnection { connection in
            try await Self.channels(
                """
                SELECT \(unescaped: Self.columns) FROM ptt_channels c
                WHERE c.channel_id IN (SELECT channel_id FROM ptt_members WHERE whisper_id = \(member))
                ORDER BY c.created_at DESC, c.channel_id LIMIT \(Limits.MAX_PTT_CHANNELS_PER_IDENTITY)
                """,
                on: connection, logger: logger
            )
        }
        return PTTChannels(channels: channels)
    }

    /// Notes that a member connected: the channels it is a member of now are marked
    /// active with the next batch (`ChannelTouches`), not by a query of its own.
    func memberConnected(_ whisperId: String) {
        touches.note(whisperId, at: Clock.millisecondsNow())
    }

    /// Marks active (at most once an hour each) the channels that each member noted since
    /// the last call belonged to when it connected: a channel lapses when none of its
    /// members has connected for `GC_WORKER_PTT_IDLE_DAYS` (gc-worker). One statement per
    /// 1,000 members.
    func touchChannels() async throws {
        let noted = touches.take()
        for start in stride(from: 0, to: noted.count, by: 1_000) {
            let batch = noted[start..<min(start + 1_000, noted.count)]
            let members = batch.map(\.whisperId), times = batch.map(\.at)
            try await postgres.query(
                """
                UPDATE ptt_channels SET last_active_at = now()
                WHERE last_active_at < now() - interval '1 hour' AND channel_id IN (
                    SELECT m.channel_id FROM ptt_members m
                    JOIN unnest(\(members)::text[], \(times)::bigint[]) AS t(whisper_id, connected_ms) ON m.whisper_id = t.whisper_id
                    WHERE m.joined_at <= to_timestamp(t.connected_ms / 1000.0)
                )
                """,
                logger: logger
            )
        }
    }

    /// The channels a query of `columns` finds, with their members.
    private static func channels(_ query: PostgresQuery, on connection: PostgresConnection, logger: Logger) async throws -> [PTTChannel] {
        let rows = try await connection.query(query, logger: logger)
        var found: [PTTChannel] = []
        for try await (id, name, code, owner, isPublic, created) in rows.decode((String, String, String, String, Bool, Int64).self) {
            found.append(PTTChannel(channelId: id, name: name, joinCode: code, ownerId: owner, isPublic: isPublic, members: [], createdAt: created))
        }
        for index in found.indices {
            found[index].members = try await PTTRoster.members(found[index].channelId, on: connection, logger: logger)
        }
        return found
    }
}
