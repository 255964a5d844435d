import Foundation

/// A recipient's pending queue (spec 5): messages stored before they are acknowledged
/// to the sender, kept until the recipient's `delivered` receipt or 72 hours.
///
/// `pending:{whisperId}` is a Redis Stream: entry IDs are arrival times, so paging with
/// an exclusive cursor is stable while new messages arrive, and `XTRIM MINID` drops
/// whatever is older than 72 hours. `pending:{whisperId}:msg:<messageId>` remembers each
/// message's entry, sender and state for 72 hours, which makes sends idempotent (a
/// repeat finds it) and receipts checkable (only the recipient's own messages). All
/// keys of one recipient share a hash slot, so each step is one atomic script.
public struct PendingQueue: Sendable {
    public static let ttl: Duration = .seconds(Limits.PENDING_TTL_HOURS * 3600)
    let redis: RedisClient

    public init(redis: RedisClient) {
        self.redis = redis
    }

    public enum StoreResult: Sendable, Equatable {
        /// Stored now, under this entry ID, with the queue this long afterwards.
        case stored(entryId: String, depth: Int)
        /// The same sender sent this messageId before: nothing was queued again.
        case duplicate
        /// Another sender used this messageId for this recipient.
        case conflict
        /// The sender's bucket for this recipient was empty: nothing was stored or published.
        case limited(retryAfterMs: Int)
    }

    /// Stores a message unless its messageId is already known for this recipient or the
    /// sender's bucket for this recipient (`pairLimit`, kept in the recipient's hash slot
    /// and charged only for a new message) is empty, then,
    /// in the same script: publishes `accepted` (the sender's `message_accepted`, a
    /// complete `GatewayCommand`) to the sender's gateway, and `message_received` to the
    /// gateway named in `presence:{recipient}`, if any. One round trip; the store always
    /// comes first. For a duplicate, `accepted` is published again, and the message is
    /// delivered again only when `redeliver` is set and it is still pending.
    /// Returns what happened and whether a live socket was handed the message.
    public func store(
        recipient: String, messageId: String, sender: String, body: [UInt8],
        accepted: (gateway: String, command: GatewayCommand), acceptedAt: Int64, redeliver: Bool, pairLimit: RateLimitRule
    ) async throws -> (result: StoreResult, deliveredLive: Bool) {
        let reply = try await redis.evaluate(
            Self.storeScript,
            keys: [
                RedisKeys.pending(recipient), Self.messageKey(recipient, messageId), RedisKeys.presence(recipient),
                Self.pairBucket(recipient: recipient, sender: sender),
            ],
            arguments: [
                sender, body, Int(Self.ttl.milliseconds), messageId, RedisKeys.gatewayChannel(accepted.gateway),
                accepted.command.encoded, acceptedAt, redeliver ? 1 : 0,
            ] + RateLimiter.arguments(pairLimit)
        )
        guard let parts = reply.array, let status = parts.first?.string else { throw RedisError.unexpectedReply("pending store") }
        let live = parts.count > 3 && (parts[3].int ?? 0) > 0
        switch status {
        case "stored":
            return (.stored(entryId: parts[1].string ?? "", depth: Int(parts[2].int ?? 0)), live)
        case "duplicate":
            return (.duplicate, live)
        case "limited":
            return (.limited(retryAfterMs: Int(parts.count > 1 ? parts[1].int ?? 0 : 0)), false)
        default:
            return (.conflict, false)
        }
    }

    public struct Page: Sendable {
        public var messages: [[UInt8]]
        public var nextCursor: String?
    }

    /// Up to `limit` messages after `cursor` (exclusive), oldest first.
    public func page(recipient: String, after cursor: String?, limit: Int) async throws -> Page {
        let reply = try await redis.evaluate(
            Self.pageScript, keys: [RedisKeys.pending(recipient)],
            arguments: [cursor.map { "(" + $0 } ?? "-", limit + 1, Int(Self.ttl.milliseconds)]
        )
        guard let entries = reply.array else { throw RedisError.unexpectedReply("pending page") }
        var messages: [[UInt8]] = []
        var lastId: String?
        for entry in entries.prefix(limit) {
            guard let parts = entry.array, parts.count == 2, let id = parts[0].string, let fields = parts[1].array else { continue }
            var index = 0
            while index + 1 < fields.count {
                if fields[index].string == "body", let body = fields[index + 1].bytes { messages.append(body) }
                index += 2
            }
            lastId = id
        }
        return Page(messages: messages, nextCursor: entries.count > limit ? lastId : nil)
    }

    public enum ReceiptResult: Sendable, Equatable {
        /// The message was the recipient's, from `sender`; removed from the queue when delivered.
        case acknowledged(sender: String)
        /// No such message for this recipient (never sent to it, or older than 72 h).
        case unknown
    }

    /// Applies the recipient's receipt (`delivered` removes the message from the queue)
    /// and, in the same round trip, finds where `sender` (the sender the receipt names,
    /// who is told if the message turns out to be theirs) is connected.
    public func acknowledge(
        recipient: String, messageId: String, delivered: Bool, locating sender: String
    ) async throws -> (result: ReceiptResult, senderSocket: PresenceRecord?) {
        let (reply, others) = try await redis.evaluate(
            Self.ackScript, keys: [RedisKeys.pending(recipient), Self.messageKey(recipient, messageId)],
            arguments: [delivered ? 1 : 0],
            alongside: [RedisCommand("GET", RedisKeys.presence(sender))]
        )
        let socket = others.first?.string.flatMap(PresenceRecord.init(encoded:))
        if let sender = reply.string, !sender.isEmpty { return (.acknowledged(sender: sender), socket) }
        return (.unknown, nil)
    }

    /// Messages waiting for a recipient (after dropping expired ones).
    public func depth(recipient: String) async throws -> Int {
        Int(try await redis.send("XLEN", RedisKeys.pending(recipient)).int ?? 0)
    }

    /// The bucket of messages from `sender` to `recipient`, in the recipient's hash slot.
    static func pairBucket(recipient: String, sender: String) -> String {
        RedisKeys.rateLimit(recipient, "from:\(sender)")
    }

    static func messageKey(_ recipient: String, _ messageId: String) -> String {
        "pending:{\(recipient)}:msg:\(messageId.lowercased())"
    }

    /// KEYS: queue, message key, presence key, the pair's bucket (all in the recipient's
    /// slot). ARGV: sender, body, ttl ms, messageId, sender's gateway channel, accepted
    /// command, acceptedAt, redeliver flag, the bucket's capacity and refill per ms. The
    /// presence value is `<gateway> <connId>` (`PresenceRecord`); the command format is
    /// `GatewayCommand`'s.
    static let storeScript = RedisScript(RateLimiter.bucketLua + """
        local function deliver()
            local holder = redis.call('GET', KEYS[3])
            if not holder then return 0 end
            local space = string.find(holder, ' ', 1, true)
            if not space then return 0 end
            local gateway = string.sub(holder, 1, space - 1)
            local conn = string.sub(holder, space + 1)
            return redis.call('PUBLISH', 'gateway:' .. gateway,
                'deliver\\n' .. conn .. '\\n\\n' .. ARGV[7] .. '\\n{"type":"message_received","payload":' .. ARGV[2] .. '}')
        end
        local known = redis.call('HGET', KEYS[2], 'from')
        if known then
            if known ~= ARGV[1] then return {'conflict'} end
            redis.call('PUBLISH', ARGV[5], ARGV[6])
            local delivered = 0
            if ARGV[8] == '1' and redis.call('HGET', KEYS[2], 'state') == 'pending' then
                delivered = deliver()
            end
            return {'duplicate', '', 0, delivered}
        end
        local now = now_ms()
        local retry = take_token(KEYS[4], tonumber(ARGV[9]), tonumber(ARGV[10]), now)
        if retry > 0 then return {'limited', retry} end
        redis.call('XTRIM', KEYS[1], 'MINID', tostring(now - tonumber(ARGV[3])))
        local id = redis.call('XADD', KEYS[1], '*', 'mid', ARGV[4], 'body', ARGV[2])
        redis.call('PEXPIRE', KEYS[1], ARGV[3])
        redis.call('HSET', KEYS[2], 'from', ARGV[1], 'entry', id, 'state', 'pending')
        redis.call('PEXPIRE', KEYS[2], ARGV[3])
        redis.call('PUBLISH', ARGV[5], ARGV[6])
        return {'stored', id, redis.call('XLEN', KEYS[1]), deliver()}
        """)

    /// KEYS: queue. ARGV: start (exclusive "(id" or "-"), count, ttl ms.
    static let pageScript = RedisScript("""
        local t = redis.call('TIME')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        redis.call('XTRIM', KEYS[1], 'MINID', tostring(now - tonumber(ARGV[3])))
        return redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])
        """)

    /// KEYS: queue, message key. ARGV: 1 when delivered. Returns the sender, or "".
    static let ackScript = RedisScript("""
        local message = redis.call('HMGET', KEYS[2], 'from', 'state', 'entry')
        local from = message[1]
        if not from then return '' end
        if ARGV[1] == '1' and message[2] == 'pending' then
            redis.call('XDEL', KEYS[1], message[3])
            redis.call('HSET', KEYS[2], 'state', 'delivered')
        end
        return from
        """)
}
