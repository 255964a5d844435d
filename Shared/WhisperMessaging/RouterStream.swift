import Foundation
import WhisperShared

/// The work queue between gateways and routers: a Redis Stream read by the consumer
/// group `routers`. Each entry is one client frame that passed the gateway's checks,
/// with the socket it came from.
public enum RouterStream {
    public static let key = "stream:router"
    public static let group = "routers"
    /// Approximate cap on the stream's length; entries past it are trimmed oldest first.
    /// Routers delete what they have handled, so this bounds the backlog of unhandled
    /// entries. A trimmed entry was never acknowledged to its client, who sends it again.
    public static let maxLength = 1_000_000

    /// The frame types a router serves, the declared subset of `ClientFrameType` its
    /// entries may carry (a router's table of them has no `default:`).
    public enum Routed: String, CaseIterable, Sendable {
        case groupSendMessage = "group_send_message"
        case groupCreate = "group_create"
        case groupUpdate = "group_update"
        case groupInvitationsList = "group_invitations_list"
        case accountDelete = "account_delete"
        case callInitiate = "call_initiate"
        case callAnswer = "call_answer"
        case callIceCandidate = "call_ice_candidate"
        case callEnd = "call_end"
        case fetchPending = "fetch_pending"
    }

    /// One entry, as fields of the stream entry.
    public struct Entry: Sendable, Equatable {
        public var gateway: String
        public var connId: String
        /// The identity the socket is bound to (the session's).
        public var whisperId: String
        public var type: Routed
        public var requestId: String?
        /// The payload's JSON, as the gateway re-encoded it after checking.
        public var payload: [UInt8]
        /// When the gateway received the frame (ms since 1970).
        public var receivedAt: Int64
        /// The W3C trace context of the gateway's span, when traces are on (`tp`).
        public var traceparent: String?
        /// Set only on an `account_delete` applied again from the deletion journal after a
        /// restore (`DeletionJournal`): when it was first done (ms since 1970, `jat`), the
        /// time its signed request is held to.
        public var journaledAt: Int64?

        public init(
            gateway: String, connId: String, whisperId: String, type: Routed, requestId: String?, payload: [UInt8], receivedAt: Int64,
            traceparent: String? = nil, journaledAt: Int64? = nil
        ) {
            self.traceparent = traceparent
            self.journaledAt = journaledAt
            self.gateway = gateway
            self.connId = connId
            self.whisperId = whisperId
            self.type = type
            self.requestId = requestId
            self.payload = payload
            self.receivedAt = receivedAt
        }

        /// The entry's fields and values, in order.
        var fields: [any RedisArgument] {
            var fields: [any RedisArgument] = [
                "gw", gateway, "conn", connId, "wid", whisperId, "type", type.rawValue, "ts", receivedAt, "payload", payload,
            ]
            if let requestId { fields += ["rid", requestId] }
            if let traceparent { fields += ["tp", traceparent] }
            if let journaledAt { fields += ["jat", journaledAt] }
            return fields
        }

        /// `XADD <the sender's shard> MAXLEN ~ N * field value ...`
        public func addCommand(in shards: StreamShards) -> RedisCommand {
            RedisCommand("XADD", [RouterStream.key(for: whisperId, in: shards), "MAXLEN", "~", maxLength, "*"] + fields)
        }

        /// What became of an entry offered to the stream.
        public enum Admission: Sendable, Equatable {
            case added
            /// The identity's bucket for the frame's kind was empty.
            case limited(retryAfterMs: Int)
            /// The stream holds `backlog` entries not yet handled or more: the routers
            /// are behind, so nothing is added (backpressure).
            case busy
        }

        /// Adds the entry to its sender's shard after taking a token from the sender's
        /// bucket of `limit` (`RouterStream.bucket`), unless that shard already holds
        /// `backlogLimit` entries (0: no limit), in one script. The bucket is charged only
        /// for an entry that is added.
        public func add(charging limit: Limit, rules: LimitRules, backlogLimit: Int = 0, on redis: RedisClient) async throws -> Admission {
            let shards = redis.configuration.streamShards
            let reply = try await redis.evaluate(
                admitScript, keys: [RouterStream.key(for: whisperId, in: shards), RouterStream.bucket(limit, whisperId, in: shards)],
                arguments: RateLimiter.arguments(rules[limit]) + [maxLength, backlogLimit] + fields
            )
            guard let values = reply.array, values.count == 2, let outcome = values[0].int else {
                throw RedisError.unexpectedReply("router stream admission")
            }
            switch outcome {
            case 1: return .added
            case 2: return .busy
            default: return .limited(retryAfterMs: Int(values[1].int ?? 0))
            }
        }

        /// Reads an entry from its field list; nil for a malformed one.
        public init?(fields: [RESPValue]) {
            var values: [String: [UInt8]] = [:]
            var index = 0
            while index + 1 < fields.count {
                if let name = fields[index].string, let value = fields[index + 1].bytes { values[name] = value }
                index += 2
            }
            func text(_ name: String) -> String? { values[name].map { String(decoding: $0, as: UTF8.self) } }
            guard let gateway = text("gw"), let connId = text("conn"), let whisperId = text("wid"),
                  let type = text("type").flatMap(Routed.init(rawValue:)), let payload = values["payload"],
                  let receivedAt = text("ts").flatMap(Int64.init) else { return nil }
            self.init(
                gateway: gateway, connId: connId, whisperId: whisperId, type: type, requestId: text("rid"), payload: payload, receivedAt: receivedAt,
                traceparent: text("tp").flatMap { WhisperTracing.isTraceparent($0) ? $0 : nil },
                journaledAt: text("jat").flatMap(Int64.init)
            )
        }
    }

    // MARK: - Payloads without session tokens

    /// The payload as an entry keeps it: every field but `sessionToken`. The gateway
    /// checked the token before adding the entry, and the stream is persisted (the
    /// append-only file, replicas), so a token written here would be a credential at
    /// rest. The entry says which identity the frame acts for (`wid`).
    public static func storedPayload(_ payload: any ClientPayload) throws -> [UInt8] {
        switch payload {
        case let message as SendMessage:
            var writer = FastJSONWriter(capacity: 512 + message.ciphertext.utf8.count)
            message.write(to: &writer, withSessionToken: false)
            return writer.bytes
        case let copy as GroupSendMessage:
            var writer = FastJSONWriter(capacity: 560 + copy.ciphertext.utf8.count)
            copy.write(to: &writer, withSessionToken: false)
            return writer.bytes
        case let fetch as FetchPending:
            var writer = FastJSONWriter(capacity: 128)
            writer.beginObject()
            writer.field("protocolVersion", fetch.protocolVersion)
            writer.field("cryptoVersion", fetch.cryptoVersion)
            writer.field("cursor", fetch.cursor)
            if let limit = fetch.limit { writer.field("limit", limit) }
            writer.endObject()
            return writer.bytes
        default:
            // Any other payload: its JSON with the one member taken out.
            let encoded = try ProtocolJSON.encoder.encode(payload)
            guard var object = try JSONSerialization.jsonObject(with: encoded) as? [String: Any] else {
                throw WhisperError(.internalError, "payload did not encode as an object")
            }
            object["sessionToken"] = nil
            return Array(try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]))
        }
    }

    /// A stored payload made readable by the payload types again: their schema has a
    /// `sessionToken`, so an empty one is put back (the router never uses it: the entry's
    /// `wid` is the session's identity). An entry written by an earlier gateway still
    /// has its token and is read as it is.
    public static func decodablePayload(_ stored: [UInt8]) -> [UInt8] {
        guard !stored.containsSubsequence(Self.tokenKey) else { return stored }
        var index = 0
        while index < stored.count, [0x20, 0x0A, 0x0D, 0x09].contains(stored[index]) { index += 1 }
        guard index < stored.count, stored[index] == UInt8(ascii: "{") else { return stored }
        var next = index + 1
        while next < stored.count, [0x20, 0x0A, 0x0D, 0x09].contains(stored[next]) { next += 1 }
        let empty = next < stored.count && stored[next] == UInt8(ascii: "}")
        let member = Array(#""sessionToken":"""#.utf8) + (empty ? [] : [UInt8(ascii: ",")])
        var result: [UInt8] = []
        result.reserveCapacity(stored.count + member.count)
        result += stored[..<(index + 1)]
        result += member
        result += stored[(index + 1)...]
        return result
    }

    static let tokenKey = Array(#""sessionToken""#.utf8)

    /// The shard of the stream an identity's frames go to (`StreamShards`): all of them
    /// to the same one, so they keep their order.
    public static func key(for whisperId: String, in shards: StreamShards) -> String { shards.key(key, for: whisperId) }

    /// An identity's bucket of one limit charged for routed frames (`send`, `group`,
    /// `fetch`, ...: the limit's bucket name), in its shard's slot.
    /// Its hash tag is the whole key of the identity's shard, so it lives in that shard's
    /// hash slot and one script can charge it and add the entry (also under Redis Cluster).
    public static func bucket(_ limit: Limit, _ whisperId: String, in shards: StreamShards) -> String {
        "{\(key(for: whisperId, in: shards))}:\(limit.bucket):\(whisperId)"
    }

    /// `router-stream-admit.lua` (its header says what it takes and answers).
    static let admitScript = RedisScript(RateLimiter.bucketLua + LuaSource.routerStreamAdmit)
}

/// Wake-up jobs for push-sender: a Redis Stream read by the consumer group `push-senders`.
/// The job names who to wake and why, never message content.
public enum PushStream {
    public static let key = "stream:push"
    public static let group = "push-senders"
    public static let maxLength = 1_000_000

    public enum Kind: String, Sendable {
        /// A message waits in the pending queue.
        case message
        /// A call is ringing (VoIP push on iOS, high priority on Android).
        case call
    }

    /// `XADD <the recipient's shard> MAXLEN ~ N * to <whisperId> kind <kind> id <messageId|callId> at <ms>`:
    /// one identity's wake-ups all go to one shard (`StreamShards`).
    public static func job(to whisperId: String, kind: Kind, id: String, at timestamp: Int64, in shards: StreamShards) -> RedisCommand {
        RedisCommand("XADD", [shards.key(key, for: whisperId), "MAXLEN", "~", maxLength, "*"] + Job(to: whisperId, kind: kind, id: id, at: timestamp).fields)
    }

    /// Wake-ups of the shard `shardKey` waiting for their next attempt: a sorted set
    /// scored by when it is due, in the shard's hash slot (its tag is the shard's whole
    /// name), so one script moves due ones back.
    public static func retryKey(of shardKey: String) -> String { "{\(shardKey)}:retry" }
    /// Wake-ups of the shard `shardKey` that failed for good (attempts used up, a
    /// provider that refuses them): a stream an operator reads and replays
    /// (`push-sender replay-dead`).
    public static func deadKey(of shardKey: String) -> String { "{\(shardKey)}:dead" }
    /// The dead letters kept: the newest 100,000 at most, none older than 7 days (each
    /// names the identity it was to wake, so an account deletion's traces there lapse).
    public static let deadMaxLength = 100_000
    public static let deadMaxAge: Duration = .seconds(7 * 86_400)

    /// Adds a dead letter of the shard `shardKey` (its `fields`, at most 16, each cut to
    /// 256 bytes, then why and after how many attempts), and drops those past
    /// `deadMaxLength` or older than `deadMaxAge`.
    public static func deadLetter(_ fields: [String], reason: String, attempts: Int, of shardKey: String, now: Int64) -> [RedisCommand] {
        let key = deadKey(of: shardKey)
        let kept = fields.prefix(16 - fields.count % 2).map { String($0.prefix(256)) as any RedisArgument }
        return [
            RedisCommand("XADD", [key, "MAXLEN", "~", deadMaxLength, "*"] + kept + [
                "reason", String(reason.prefix(300)), "attempts", attempts, "failedAt", now,
            ]),
            RedisCommand("XTRIM", key, "MINID", "=", "\(max(0, now - Int64(deadMaxAge.milliseconds)))"),
        ]
    }

    /// The wake-up window's key (`RedisKeys.pushWoken`: presence deletes it too).
    public static func wokenKey(_ whisperId: String) -> String { RedisKeys.pushWoken(whisperId) }

    /// One wake-up job as the stream holds it.
    public struct Job: Sendable, Equatable {
        public var to: String
        public var kind: Kind
        /// The message ID (`kind message`) or call ID (`kind call`) it is about.
        public var id: String
        /// When the job was made (ms since 1970).
        public var at: Int64
        /// Attempts already made (0 for a new job).
        public var attempt: Int

        public init(to: String, kind: Kind, id: String, at: Int64, attempt: Int = 0) {
            self.to = to
            self.kind = kind
            self.id = id
            self.at = at
            self.attempt = attempt
        }

        public var fields: [any RedisArgument] {
            var fields: [any RedisArgument] = ["to", to, "kind", kind.rawValue, "id", id, "at", at]
            if attempt > 0 { fields += ["attempt", attempt] }
            return fields
        }

        /// Reads a job from an entry's field list; nil for a malformed one.
        public init?(fields: [RESPValue]) {
            var values: [String: String] = [:]
            var index = 0
            while index + 1 < fields.count {
                if let name = fields[index].string, let value = fields[index + 1].string { values[name] = value }
                index += 2
            }
            guard let to = values["to"], WhisperID.isValid(to), let kind = values["kind"].flatMap(Kind.init(rawValue:)),
                  let id = values["id"], !id.isEmpty, id.utf8.count <= 128,
                  let at = values["at"].flatMap(Int64.init) else { return nil }
            let attempt = values["attempt"].flatMap(Int.init) ?? 0
            guard (0...1_000).contains(attempt) else { return nil }
            self.init(to: to, kind: kind, id: id, at: at, attempt: attempt)
        }
    }
}

extension Array where Element == UInt8 {
    /// Whether `needle` occurs in these bytes (a plain scan; the needles are short).
    func containsSubsequence(_ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, needle.count <= count else { return needle.isEmpty }
        var start = 0
        while start + needle.count <= count {
            if self[start] == needle[0], self[start..<(start + needle.count)].elementsEqual(needle) { return true }
            start += 1
        }
        return false
    }
}
