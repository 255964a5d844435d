import Foundation

/// The work queue between gateways and routers: a Redis Stream read by the consumer
/// group `routers`. Each entry is one client frame that passed the gateway's checks,
/// with the socket it came from.
public enum RouterStream {
    public static let key = "stream:router"
    public static let group = "routers"
    /// Approximate cap on the stream's length; entries past it are trimmed oldest first.
    /// A trimmed entry was never acknowledged to its client, who sends it again.
    public static let maxLength = 1_000_000

    /// The frame types the router serves.
    public static let frameTypes: Set<ClientFrameType> = [.sendMessage, .deliveryReceipt, .fetchPending]

    /// One entry, as fields of the stream entry.
    public struct Entry: Sendable, Equatable {
        public var gateway: String
        public var connId: String
        /// The identity the socket is bound to (the session's).
        public var whisperId: String
        public var type: ClientFrameType
        public var requestId: String?
        /// The payload's JSON, as the gateway re-encoded it after checking.
        public var payload: [UInt8]
        /// When the gateway received the frame (ms since 1970).
        public var receivedAt: Int64

        public init(gateway: String, connId: String, whisperId: String, type: ClientFrameType, requestId: String?, payload: [UInt8], receivedAt: Int64) {
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
            return fields
        }

        /// `XADD stream:router MAXLEN ~ N * field value ...`
        public var addCommand: RedisCommand {
            RedisCommand("XADD", [key, "MAXLEN", "~", maxLength, "*"] + fields)
        }

        /// Adds the entry after taking a token from its sender's bucket (`rule`), in one
        /// script; when the bucket is empty nothing is added. The gateway admits each
        /// `send_message` this way, so a sender over the limit is refused at the edge
        /// and never reaches a router.
        public func add(chargingSender rule: RateLimitRule, on redis: RedisClient) async throws -> RateLimiter.Decision {
            let reply = try await redis.evaluate(
                admitScript, keys: [key, senderBucket(whisperId)],
                arguments: RateLimiter.arguments(rule) + [maxLength] + fields
            )
            return try RateLimiter.decision(reply, "router stream admission")
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
                  let type = text("type").flatMap(ClientFrameType.init(rawValue:)), let payload = values["payload"],
                  let receivedAt = text("ts").flatMap(Int64.init) else { return nil }
            self.init(gateway: gateway, connId: connId, whisperId: whisperId, type: type, requestId: text("rid"), payload: payload, receivedAt: receivedAt)
        }
    }

    /// A sender's bucket for `send_message`. Its hash tag is the stream's whole key, so
    /// it lives in the stream's hash slot and one script can charge it and add the entry
    /// (also under Redis Cluster).
    public static func senderBucket(_ whisperId: String) -> String { "{\(key)}:send:\(whisperId)" }

    /// KEYS: stream, sender's bucket. ARGV: capacity, refill per ms, stream cap, then the
    /// entry's fields and values. Returns {1, entry id} or {0, retry after ms}.
    static let admitScript = RedisScript(RateLimiter.bucketLua + """
        local retry = take_token(KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]), now_ms())
        if retry > 0 then return {0, retry} end
        return {1, redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', unpack(ARGV, 4))}
        """)
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

    /// `XADD stream:push MAXLEN ~ N * to <whisperId> kind <kind> id <messageId|callId> at <ms>`
    public static func job(to whisperId: String, kind: Kind, id: String, at timestamp: Int64) -> RedisCommand {
        RedisCommand("XADD", [key, "MAXLEN", "~", maxLength, "*", "to", whisperId, "kind", kind.rawValue, "id", id, "at", timestamp])
    }
}
