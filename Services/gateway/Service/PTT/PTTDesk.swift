import Crypto
import Foundation
import Logging
import PostgresNIO
import WhisperMessaging
import WhisperShared

/// Push-to-talk (docs/protocol.md section 14), by concern: channels and their members in
/// Postgres (`PTTChannelDesk`), the floor in Redis (`FloorDesk`), channels announced
/// nearby (`NearbyDesk`), and media signals between members (here). Every change is told
/// to every member's socket, through `PTTRoster`.
struct PTTDesk: Sendable {
    struct Settings: Sendable {
        var maxMembers: Int
        var maxTalk: Duration
        var maxQueue: Int
        /// How long an announcement lasts without the next heartbeat.
        var announceTTL: Duration = .seconds(30)
    }

    let channels: PTTChannelDesk
    let floor: FloorDesk
    let nearby: NearbyDesk
    let roster: PTTRoster
    /// The checks signed frames pass (author, timestamp, the sender's signature).
    let checks: MessageChecks

    init(
        redis: RedisClient, postgres: PostgresClient, settings: Settings, floorKeys: FloorKeys, nearbyBoard: NearbyBoard,
        holds: FloorHolds, touches: ChannelTouches, checks: MessageChecks, instanceID: String, logger: Logger
    ) {
        let roster = PTTRoster(redis: redis, postgres: postgres, logger: logger)
        let floor = FloorDesk(
            roster: roster, redis: redis, floorKeys: floorKeys, holds: holds, maxTalk: settings.maxTalk, maxQueue: settings.maxQueue,
            instanceID: instanceID, logger: logger
        )
        let nearby = NearbyDesk(postgres: postgres, redis: redis, board: nearbyBoard, announceTTL: settings.announceTTL, logger: logger)
        self.roster = roster
        self.floor = floor
        self.nearby = nearby
        self.checks = checks
        channels = PTTChannelDesk(
            roster: roster, postgres: postgres, floor: floor, nearby: nearby, maxMembers: settings.maxMembers, touches: touches, logger: logger
        )
    }

    /// Hands a signed signal to its recipient's socket: both must be members, the sender
    /// must be the session's identity and its signature must verify. Not stored: a
    /// recipient without a socket is `NOT_FOUND` (the sender tries again when it is back).
    func signal(_ signal: PTTSignal, sender: String) async throws {
        try MessageChecks.checkAuthor(signal.from, session: sender)
        guard signal.to != sender else { throw WhisperError(.forbidden, "a signal goes to another member") }
        try MessageChecks.checkTimestamp(signal.timestamp, now: Clock.millisecondsNow())
        let members = try await roster.membersIfMember(signal.channelId, sender)
        guard members.contains(signal.to) else { throw WhisperError(.notFound, "\(signal.to) is not a member of that channel") }
        try await checks.verifySignature(from: sender, sig: signal.sig, over: signal.signedBytes)
        // The answer is the same whether the recipient has a socket or not (a signal to a
        // member who is away is dropped), so signals cannot probe who is online.
        try await roster.tell(PTTSignalReceived(signal), to: [signal.to])
    }

}

/// A channel's members, read from Postgres, and how they are told of a change: each
/// member's live socket, found by presence.
struct PTTRoster: Sendable {
    let redis: RedisClient
    let postgres: PostgresClient
    let logger: Logger

    /// A channel one is not in, or not the owner of, is answered like one that does not exist.
    static let notFound = WhisperError(.notFound, "no such channel of yours")

    func members(_ channelId: String) async throws -> [String] {
        try await postgres.withConnection { try await Self.members(channelId, on: $0, logger: logger) }
    }

    /// The channel's members, when `member` is one of them; else `NOT_FOUND`.
    func membersIfMember(_ channelId: String, _ member: String) async throws -> [String] {
        let all = try await members(channelId)
        guard all.contains(member) else { throw Self.notFound }
        return all
    }

    /// Writes `payload` to each identity's live socket (presence); an identity without
    /// one is not told (it lists its channels when it comes back). Returns how many had one.
    @discardableResult
    func tell<P: ServerPayload>(_ payload: P, to whisperIds: [String]) async throws -> Int {
        try await SocketFanOut.deliverToLive(ServerFrameCodec.encode(payload), of: whisperIds, on: redis)
    }

    static func members(_ channelId: String, on connection: PostgresConnection, logger: Logger) async throws -> [String] {
        let rows = try await connection.query(
            "SELECT whisper_id FROM ptt_members WHERE channel_id = \(channelId) ORDER BY joined_at, whisper_id", logger: logger
        )
        var members: [String] = []
        for try await id in rows.decode(String.self) { members.append(id) }
        return members
    }
}
