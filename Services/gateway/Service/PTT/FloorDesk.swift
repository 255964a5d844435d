import Crypto
import Foundation
import Logging
import PostgresNIO
import WhisperMessaging
import WhisperShared

/// The floor of each push-to-talk channel, held in Redis by the server (docs/protocol.md
/// section 14): granted, queued, released, taken back when its holder's socket closes or
/// its time runs out. A grant is signed with the gateways' floor key (`FloorKeys`), so
/// receivers can check whose audio may be played.
struct FloorDesk: Sendable {
    let roster: PTTRoster
    let redis: RedisClient
    let floorKeys: FloorKeys
    /// The floors and queue places each of this gateway's sockets holds.
    let holds: FloorHolds
    let maxTalk: Duration
    let maxQueue: Int
    let instanceID: String
    let logger: Logger

    static func floorKey(_ channelId: String) -> String { "ptt:{\(channelId)}:floor" }
    static func queueKey(_ channelId: String) -> String { "ptt:{\(channelId)}:queue" }
    /// Floors by when their grant ends (ms): `<channelId> <grantId>`, swept by every gateway.
    static let dueKey = "ptt:floors"

    func talk(_ request: PTTTalkRequest, member: String, on connection: ClientConnection) async throws -> PTTFloor {
        let members = try await roster.membersIfMember(request.channelId, member)
        let now = Clock.millisecondsNow()
        let grantId = RandomID.uuid()
        let reply = try await redis.evaluate(
            Self.requestScript, keys: [Self.floorKey(request.channelId), Self.queueKey(request.channelId)],
            arguments: [
                member, instanceID, connection.id, String(now), String(Int64(maxTalk.milliseconds)), request.queue ? "1" : "0",
                String(maxQueue), grantId,
            ]
        )
        let parts = reply.array?.compactMap(\.string) ?? []
        switch parts.first {
        case "granted" where parts.count == 4:
            holds.hold(connection.id, request.channelId, for: member)
            let floor = try await granted(request.channelId, holder: member, grantId: parts[1], notBefore: Int64(parts[2]) ?? now, notAfter: Int64(parts[3]) ?? now, outcome: .granted)
            try await roster.tell(floor, to: members.filter { $0 != member })
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
        _ = try await roster.membersIfMember(request.channelId, member)
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
            arguments: [holder, conn, grantId, String(now), String(Int64(maxTalk.milliseconds)), next]
        )
        let parts = reply.array?.compactMap(\.string) ?? []
        // Members are read only when the floor changed (not for a place given up in the queue).
        switch parts.first {
        case "free":
            try await roster.tell(PTTFloor(channelId: channelId, outcome: outcome), to: try await roster.members(channelId) + tellingAlso)
        case "granted" where parts.count == 5:
            let members = try await roster.members(channelId) + tellingAlso
            // A floor taken back (the holder's socket closed, its time ran out) says so
            // before it goes to the next member waiting.
            if outcome != .released {
                try await roster.tell(PTTFloor(channelId: channelId, outcome: outcome), to: members)
            }
            let floor = try await granted(channelId, holder: parts[1], grantId: parts[2], notBefore: Int64(parts[3]) ?? now, notAfter: Int64(parts[4]) ?? now, outcome: .granted)
            try await roster.tell(floor, to: members)
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

    /// A member that leaves or is removed gives up the floor it holds or waits for
    /// (it is told too).
    func giveUp(_ channelId: String, member: String) async throws {
        try await release(channelId, holder: member, conn: "", outcome: .released, tellingAlso: [member])
    }

    /// A deleted channel's floor and queue.
    func forget(_ channelId: String) async throws {
        _ = try await redis.pipeline([RedisCommand("DEL", Self.floorKey(channelId)), RedisCommand("DEL", Self.queueKey(channelId))])
    }

    /// `floor-request.lua` (its header says what it takes and answers).
    static let requestScript = RedisScript(LuaSource.floorRequest)

    /// `floor-release.lua` (its header says what it takes and answers).
    static let releaseScript = RedisScript(LuaSource.floorRelease)
}
