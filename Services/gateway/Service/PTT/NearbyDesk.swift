import Crypto
import Foundation
import Logging
import PostgresNIO
import WhisperMessaging
import WhisperShared

/// Public push-to-talk channels announced near a place (docs/protocol.md section 14):
/// each announcement goes to every gateway's memory (`NearbyBoard`), never into Redis's
/// keyspace, and lasts `announceTTL` without the next.
struct NearbyDesk: Sendable {
    let postgres: PostgresClient
    let redis: RedisClient
    /// The channels announced nearby, as this gateway heard them.
    let board: NearbyBoard
    let announceTTL: Duration
    let logger: Logger

    /// Announces a public channel in a cell (its owner only), or stops. The cell goes to
    /// every gateway's memory (`NearbyBoard`), never into Redis's keyspace.
    func announce(_ request: PTTAnnounce, owner: String) async throws -> PTTAnnounced {
        let rows = try await postgres.query(
            "SELECT is_public FROM ptt_channels WHERE channel_id = \(request.channelId) AND owner_id = \(owner)", logger: logger
        )
        var isPublic: Bool?
        for try await value in rows.decode(Bool.self) { isPublic = value }
        guard let isPublic else { throw PTTRoster.notFound }
        guard isPublic else { throw WhisperError(.forbidden, "only a public channel is announced to people nearby") }
        let until = request.cell == nil ? 0 : Clock.millisecondsNow() + Int64(announceTTL.milliseconds)
        try await post(request.channelId, cell: request.cell, until: until, owner: owner)
        return PTTAnnounced(channelId: request.channelId, until: request.cell == nil ? nil : until)
    }

    /// Puts the announcement on this gateway's board at once (so the owner's next
    /// `ptt_nearby` here sees it) and tells every gateway; one the board refuses (over the
    /// owner's share, or a new cell of a full board) is answered `RATE_LIMITED` with the
    /// reason, and no gateway hears of it.
    private func post(_ channelId: String, cell: String?, until: Int64, owner: String) async throws {
        if let refusal = board.record(channelId, cell: cell, until: until, owner: owner) {
            board.countRefused(refusal)
            throw WhisperError(.rateLimited, refusal.message)
        }
        _ = try await redis.send("PUBLISH", NearbyBoard.channel, NearbyBoard.encode(channelId: channelId, cell: cell, until: until, owner: owner))
    }

    /// The public channels announced in the cell and the eight around it.
    func nearby(_ request: PTTNearby) async throws -> PTTNearbyChannels {
        let ids = board.channels(in: Geohash.withNeighbours(request.cell))
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

    /// A deleted channel is announced no more, on every gateway.
    func withdraw(_ channelId: String, owner: String) async throws {
        try await post(channelId, cell: nil, until: 0, owner: owner)
    }
}
