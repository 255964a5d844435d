import Crypto
import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization
import WhisperMessaging
import WhisperShared

/// Push-to-talk (docs/protocol.md section 14): channels and their members in Postgres,
/// the floor in Redis, held by the server. Every change is told to every member's socket
/// (through its gateway's channel, found by presence); a floor grant is signed with the
/// gateways' floor key (`FloorKeys`, `GATEWAY_FLOOR_KEYS`), so receivers can check whose
/// audio may be played.
struct PTTDesk: Sendable {
    struct Settings: Sendable {
        var maxMembers: Int
        var maxTalk: Duration
        var maxQueue: Int
        /// How long an announcement lasts without the next heartbeat.
        var announceTTL: Duration = .seconds(30)
    }

    let redis: RedisClient
    let postgres: PostgresClient
    let settings: Settings
    let floorKeys: FloorKeys
    /// The channels announced nearby, as this gateway heard them.
    let nearbyBoard: NearbyBoard
    let holds: FloorHolds
    /// Members that connected and whose channels are not marked active yet.
    let touches: ChannelTouches
    /// The checks signed frames pass (author, timestamp, the sender's signature).
    let checks: MessageChecks
    let instanceID: String
    let logger: Logger


    static let columns = "c.channel_id, c.name, c.join_code, c.owner_id, c.is_public, (extract(epoch FROM c.created_at) * 1000)::bigint"
    static let notFound = WhisperError(.notFound, "no such channel of yours")

    // MARK: - Channels

    func create(_ request: PTTChannelCreate, owner: String) async throws -> PTTChannel {
        let id = RandomID.uuid()
        return try await postgres.withTransaction(refusing: WhisperError.self, logger: logger) { connection -> PTTChannel in
            _ = try await connection.query("SELECT 1 FROM users WHERE whisper_id = \(owner) FOR UPDATE", logger: logger)
            guard try await Self.count("SELECT count(*)::bigint FROM ptt_members WHERE whisper_id = \(owner)", on: connection, logger: logger)
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
            let members = try await Self.members(channelId, on: connection, logger: logger)
            let isNew = !members.contains(member)
            // A private channel's ID does not let anyone in: only its code does.
            guard open || !isNew else { throw WhisperError(.notFound, "no such channel") }
            if isNew {
                guard try await !Self.returnsRow(
                    "SELECT 1 FROM ptt_removed WHERE channel_id = \(channelId) AND whisper_id = \(member)", on: connection, logger: logger
                ) else { throw WhisperError(.forbidden, "the owner removed you from this channel") }
                guard members.count < settings.maxMembers else {
                    throw WhisperError(.forbidden, "the channel has its \(settings.maxMembers) members")
                }
                guard try await Self.count("SELECT count(*)::bigint FROM ptt_members WHERE whisper_id = \(member)", on: connection, logger: logger)
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
            try await tell(PTTMembership(channelId: channel.channelId, whisperId: member, change: .joined), to: channel.members.filter { $0 != member })
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
        guard left else { throw Self.notFound }
        let gone = PTTMembership(channelId: request.channelId, whisperId: member, change: .left)
        let others = try await members(request.channelId)
        try await tell(gone, to: others)
        // A member who leaves holding the floor, or waiting for it, gives it up.
        try await release(request.channelId, holder: member, conn: "", outcome: .released, tellingAlso: [member])
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
        guard removed else { throw Self.notFound }
        let gone = PTTMembership(channelId: request.channelId, whisperId: request.whisperId, change: .removed)
        try await tell(gone, to: try await members(request.channelId).filter { $0 != owner } + [request.whisperId])
        try await release(request.channelId, holder: request.whisperId, conn: "", outcome: .released, tellingAlso: [request.whisperId])
        return gone
    }

    /// The owner draws a new join code: the old one joins nobody from then on (members
    /// stay). The members are told the channel as it is now (`ptt_channel`, unasked).
    func rotateCode(_ request: PTTChannelRotateCode, owner: String) async throws -> PTTChannel {
        let channel = try await postgres.withTransaction(refusing: WhisperError.self, logger: logger) { connection -> PTTChannel in
            // Not the owner's channel: answered like one that does not exist.
            guard try await Self.returnsRow(
                "SELECT 1 FROM ptt_channels WHERE channel_id = \(request.channelId) AND owner_id = \(owner) FOR UPDATE", on: connection, logger: logger
            ) else { throw Self.notFound }
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
            ).first else { throw Self.notFound }
            return channel
        }
        try await tell(channel, to: channel.members.filter { $0 != owner })
        return channel
    }

    /// Deletes a channel (its owner only); every member is told.
    func delete(_ request: PTTChannelDelete, owner: String) async throws -> PTTMembership {
        let members = try await members(request.channelId)
        let rows = try await postgres.query(
            "DELETE FROM ptt_channels WHERE channel_id = \(request.channelId) AND owner_id = \(owner) RETURNING channel_id", logger: logger
        )
        var deleted = false
        for try await _ in rows.decode(String.self) { deleted = true }
        guard deleted else { throw Self.notFound }
        _ = try await redis.pipeline([RedisCommand("DEL", Self.floorKey(request.channelId)), RedisCommand("DEL", Self.queueKey(request.channelId))])
        try await post(request.channelId, cell: nil, until: 0, owner: owner)
        let gone = PTTMembership(channelId: request.channelId, whisperId: owner, change: .deleted)
        try await tell(gone, to: members.filter { $0 != owner })
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

    // MARK: - Media signaling

    /// Hands a signed signal to its recipient's socket: both must be members, the sender
    /// must be the session's identity and its signature must verify. Not stored: a
    /// recipient without a socket is `NOT_FOUND` (the sender tries again when it is back).
    func signal(_ signal: PTTSignal, sender: String) async throws {
        try MessageChecks.checkAuthor(signal.from, session: sender)
        guard signal.to != sender else { throw WhisperError(.forbidden, "a signal goes to another member") }
        try MessageChecks.checkTimestamp(signal.timestamp, now: Clock.millisecondsNow())
        let members = try await membersIfMember(signal.channelId, sender)
        guard members.contains(signal.to) else { throw WhisperError(.notFound, "\(signal.to) is not a member of that channel") }
        try await checks.verifySignature(from: sender, sig: signal.sig, over: signal.signedBytes)
        // The answer is the same whether the recipient has a socket or not (a signal to a
        // member who is away is dropped), so signals cannot probe who is online.
        try await tell(PTTSignalReceived(signal), to: [signal.to])
    }

    // MARK: - Nearby

    /// Announces a public channel in a cell (its owner only), or stops. The cell goes to
    /// every gateway's memory (`NearbyBoard`), never into Redis's keyspace.
    func announce(_ request: PTTAnnounce, owner: String) async throws -> PTTAnnounced {
        let rows = try await postgres.query(
            "SELECT is_public FROM ptt_channels WHERE channel_id = \(request.channelId) AND owner_id = \(owner)", logger: logger
        )
        var isPublic: Bool?
        for try await value in rows.decode(Bool.self) { isPublic = value }
        guard let isPublic else { throw Self.notFound }
        guard isPublic else { throw WhisperError(.forbidden, "only a public channel is announced to people nearby") }
        let until = request.cell == nil ? 0 : Clock.millisecondsNow() + Int64(settings.announceTTL.milliseconds)
        try await post(request.channelId, cell: request.cell, until: until, owner: owner)
        return PTTAnnounced(channelId: request.channelId, until: request.cell == nil ? nil : until)
    }

    /// Puts the announcement on this gateway's board at once (so the owner's next
    /// `ptt_nearby` here sees it) and tells every gateway; one the board refuses (over the
    /// owner's share, or a new cell of a full board) is answered `RATE_LIMITED` with the
    /// reason, and no gateway hears of it.
    private func post(_ channelId: String, cell: String?, until: Int64, owner: String) async throws {
        if let refusal = nearbyBoard.record(channelId, cell: cell, until: until, owner: owner) {
            nearbyBoard.countRefused(refusal)
            throw WhisperError(.rateLimited, refusal.message)
        }
        _ = try await redis.send("PUBLISH", NearbyBoard.channel, NearbyBoard.encode(channelId: channelId, cell: cell, until: until, owner: owner))
    }

    /// The public channels announced in the cell and the eight around it.
    func nearby(_ request: PTTNearby) async throws -> PTTNearbyChannels {
        let ids = nearbyBoard.channels(in: Geohash.withNeighbours(request.cell))
        guard !ids.isEmpty else { return PTTNearbyChannels(channels: []) }
        let rows = try await postgres.query(
            """
            SELECT c.channel_id, c.name, c.join_code, (SELECT count(*)::bigint FROM ptt_members m WHERE m.channel_id = c.channel_id)
            FROM ptt_channels c WHERE c.channel_id = ANY(\(ids)) AND c.is_public ORDER BY c.name, c.channel_id
            """,
            logger: logger
        )
        var channels: [PTTNearbyChannels.Channel] = []
        for try await (id, name, code, count) in rows.decode((String, String, String, Int64).self) {
            channels.append(PTTNearbyChannels.Channel(channelId: id, name: name, joinCode: code, memberCount: Int(count)))
        }
        return PTTNearbyChannels(channels: channels)
    }

    // MARK: - The floor

    static func floorKey(_ channelId: String) -> String { "ptt:{\(channelId)}:floor" }
    static func queueKey(_ channelId: String) -> String { "ptt:{\(channelId)}:queue" }
    /// Floors by when their grant ends (ms): `<channelId> <grantId>`, swept by every gateway.
    static let dueKey = "ptt:floors"

    func talk(_ request: PTTTalkRequest, member: String, on connection: ClientConnection) async throws -> PTTFloor {
        let members = try await membersIfMember(request.channelId, member)
        let now = Clock.millisecondsNow()
        let grantId = RandomID.uuid()
        let reply = try await redis.evaluate(
            Self.requestScript, keys: [Self.floorKey(request.channelId), Self.queueKey(request.channelId)],
            arguments: [
                member, instanceID, connection.id, String(now), String(Int64(settings.maxTalk.milliseconds)), request.queue ? "1" : "0",
                String(settings.maxQueue), grantId,
            ]
        )
        let parts = reply.array?.compactMap(\.string) ?? []
        switch parts.first {
        case "granted" where parts.count == 4:
            holds.hold(connection.id, request.channelId, for: member)
            let floor = try await granted(request.channelId, holder: member, grantId: parts[1], notBefore: Int64(parts[2]) ?? now, notAfter: Int64(parts[3]) ?? now, outcome: .granted)
            try await tell(floor, to: members.filter { $0 != member })
            return floor
        case "held" where parts.count == 4:
            return signed(request.channelId, holder: member, grantId: parts[1], notBefore: Int64(parts[2]) ?? now, notAfter: Int64(parts[3]) ?? now, outcome: .granted)
        case "queued" where parts.count == 2:
            holds.hold(connection.id, request.channelId, for: member)
            return PTTFloor(channelId: request.channelId, outcome: .queued, position: Int(parts[1]))
        default:
            return PTTFloor(channelId: request.channelId, outcome: .refused, holder: parts.count > 1 ? parts[1] : nil)
        }
    }

    func release(_ request: PTTTalkRelease, member: String, on connection: ClientConnection) async throws -> PTTFloor {
        _ = try await membersIfMember(request.channelId, member)
        holds.drop(connection.id, request.channelId)
        try await release(request.channelId, holder: member, conn: "", outcome: .released, tellingAlso: [])
        return PTTFloor(channelId: request.channelId, outcome: .released)
    }

    /// A socket went away: floors it held are taken back, its places in queues given up.
    func socketClosed(_ connection: ClientConnection) async {
        for (channelId, whisperId) in holds.dropAll(connection.id) {
            do {
                try await release(channelId, holder: whisperId, conn: connection.id, outcome: .disconnected, tellingAlso: [])
            } catch {
                logger.warning("ptt_release_failed", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Takes the floors whose grant ran out (any gateway may: a grant is released once).
    func sweep() async throws {
        let now = Clock.millisecondsNow()
        guard let due = try await redis.send("ZRANGEBYSCORE", Self.dueKey, "-inf", String(now), "LIMIT", "0", "100").array else { return }
        for entry in due.compactMap(\.string) {
            let parts = entry.split(separator: " ")
            guard parts.count == 2 else { continue }
            let removed = try await redis.send("ZREM", Self.dueKey, entry).int ?? 0
            guard removed == 1 else { continue }
            try await release(String(parts[0]), grantId: String(parts[1]), outcome: .timeout)
        }
    }

    /// Releases the floor held by `holder` (on `conn`, when given; else on any socket)
    /// or the asker's place in its queue; a member waiting is granted it next. Every
    /// member is told of a change.
    private func release(_ channelId: String, holder: String, conn: String, outcome: PTTFloor.Outcome, tellingAlso: [String]) async throws {
        try await release(channelId, holder: holder, conn: conn, grantId: "", outcome: outcome, tellingAlso: tellingAlso)
    }

    private func release(_ channelId: String, grantId: String, outcome: PTTFloor.Outcome) async throws {
        try await release(channelId, holder: "", conn: "", grantId: grantId, outcome: outcome, tellingAlso: [])
    }

    private func release(
        _ channelId: String, holder: String, conn: String, grantId: String, outcome: PTTFloor.Outcome, tellingAlso: [String]
    ) async throws {
        let now = Clock.millisecondsNow()
        let next = RandomID.uuid()
        let reply = try await redis.evaluate(
            Self.releaseScript, keys: [Self.floorKey(channelId), Self.queueKey(channelId)],
            arguments: [holder, conn, grantId, String(now), String(Int64(settings.maxTalk.milliseconds)), next]
        )
        let parts = reply.array?.compactMap(\.string) ?? []
        // Members are read only when the floor changed (not for a place given up in the queue).
        switch parts.first {
        case "free":
            try await tell(PTTFloor(channelId: channelId, outcome: outcome), to: try await members(channelId) + tellingAlso)
        case "granted" where parts.count == 5:
            let members = try await members(channelId) + tellingAlso
            // A floor taken back (the holder's socket closed, its time ran out) says so
            // before it goes to the next member waiting.
            if outcome != .released {
                try await tell(PTTFloor(channelId: channelId, outcome: outcome), to: members)
            }
            let floor = try await granted(channelId, holder: parts[1], grantId: parts[2], notBefore: Int64(parts[3]) ?? now, notAfter: Int64(parts[4]) ?? now, outcome: .granted)
            try await tell(floor, to: members)
        default:
            break
        }
    }

    /// A grant made: due for its end, signed.
    private func granted(_ channelId: String, holder: String, grantId: String, notBefore: Int64, notAfter: Int64, outcome: PTTFloor.Outcome) async throws -> PTTFloor {
        try await redis.send("ZADD", Self.dueKey, String(notAfter), "\(channelId) \(grantId)")
        return signed(channelId, holder: holder, grantId: grantId, notBefore: notBefore, notAfter: notAfter, outcome: outcome)
    }

    private func signed(_ channelId: String, holder: String, grantId: String, notBefore: Int64, notAfter: Int64, outcome: PTTFloor.Outcome) -> PTTFloor {
        let signature = floorKeys.signing.sign(PTTFloor.signedBytes(channelId: channelId, holder: holder, grantId: grantId, notBefore: notBefore, notAfter: notAfter))
        return PTTFloor(
            channelId: channelId, outcome: outcome, holder: holder, grantId: grantId, notBefore: notBefore, notAfter: notAfter,
            keyId: floorKeys.signingId, signature: Data(signature).base64EncodedString()
        )
    }

    // MARK: - Members

    func members(_ channelId: String) async throws -> [String] {
        try await postgres.withConnection { try await Self.members(channelId, on: $0, logger: logger) }
    }

    /// The channel's members, when `member` is one of them; else `NOT_FOUND` (a channel
    /// one is not in is answered like one that does not exist).
    private func membersIfMember(_ channelId: String, _ member: String) async throws -> [String] {
        let all = try await members(channelId)
        guard all.contains(member) else { throw Self.notFound }
        return all
    }

    /// Writes `payload` to each identity's live socket (presence); an identity without
    /// one is not told (it lists its channels when it comes back). Returns how many had one.
    @discardableResult
    private func tell<P: ServerPayload>(_ payload: P, to whisperIds: [String]) async throws -> Int {
        try await SocketFanOut.deliverToLive(ServerFrameCodec.encode(payload), of: whisperIds, on: redis)
    }

    private static func members(_ channelId: String, on connection: PostgresConnection, logger: Logger) async throws -> [String] {
        let rows = try await connection.query(
            "SELECT whisper_id FROM ptt_members WHERE channel_id = \(channelId) ORDER BY joined_at, whisper_id", logger: logger
        )
        var members: [String] = []
        for try await id in rows.decode(String.self) { members.append(id) }
        return members
    }

    /// The channels a query of `columns` finds, with their members.
    private static func channels(_ query: PostgresQuery, on connection: PostgresConnection, logger: Logger) async throws -> [PTTChannel] {
        let rows = try await connection.query(query, logger: logger)
        var found: [PTTChannel] = []
        for try await (id, name, code, owner, isPublic, created) in rows.decode((String, String, String, String, Bool, Int64).self) {
            found.append(PTTChannel(channelId: id, name: name, joinCode: code, ownerId: owner, isPublic: isPublic, members: [], createdAt: created))
        }
        for index in found.indices {
            found[index].members = try await members(found[index].channelId, on: connection, logger: logger)
        }
        return found
    }

    private static func count(_ query: PostgresQuery, on connection: PostgresConnection, logger: Logger) async throws -> Int {
        var count: Int64 = 0
        for try await row in try await connection.query(query, logger: logger).decode(Int64.self) { count = row }
        return Int(count)
    }

    // MARK: - Scripts

    /// `floor-request.lua` (its header says what it takes and answers).
    static let requestScript = RedisScript(LuaSource.floorRequest)

    /// `floor-release.lua` (its header says what it takes and answers).
    static let releaseScript = RedisScript(LuaSource.floorRelease)
}
