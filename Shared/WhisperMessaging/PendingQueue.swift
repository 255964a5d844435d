import Foundation
import WhisperShared

/// A recipient's pending queue (docs/protocol.md section 5): `pending:{whisperId}`, a Redis
/// Stream kept until the `delivered` receipt or 72 h, and `pending:{whisperId}:msg:<id>`,
/// each message's entry, sender and state, which makes sends idempotent and receipts
/// checkable. One recipient's keys share a slot, so each step is one script.
public struct PendingQueue: Sendable {
    public static let ttl: Duration = .seconds(Limits.PENDING_TTL_HOURS * 3600)
    let redis: RedisClient
    /// How much one recipient's queue may hold; a message past either cap is refused
    /// (`StoreResult.full`) until the recipient takes some.
    public let capacity: Capacity

    public struct Capacity: Sendable, Equatable {
        public var messages: Int
        /// The sum of the stored `message_received` payloads.
        public var bytes: Int
        /// The share of both (percent) that strangers together may fill: senders that are
        /// not the recipient's direct peers (`Peers.exchanged`). The rest is kept for the
        /// recipient's contacts, so strangers cannot silence a queue.
        public var strangersPercent: Int
        /// The share of both (percent) that one stranger may fill.
        public var perStrangerPercent: Int

        public init(messages: Int, bytes: Int, strangersPercent: Int = 20, perStrangerPercent: Int = 2) {
            self.messages = messages
            self.bytes = bytes
            self.strangersPercent = strangersPercent
            self.perStrangerPercent = perStrangerPercent
        }

        public static let standard = Capacity(messages: 5_000, bytes: 16 * 1_048_576)

        /// What strangers together, and each stranger, may hold: messages and bytes (one
        /// message at least, and one message of the largest size).
        var strangers: (messages: Int, bytes: Int) { share(strangersPercent) }
        var perStranger: (messages: Int, bytes: Int) { share(perStrangerPercent) }

        private func share(_ percent: Int) -> (messages: Int, bytes: Int) {
            (max(1, messages * percent / 100), max(Limits.MAX_STORED_MESSAGE_BYTES, bytes / 100 * percent))
        }
    }

    public init(redis: RedisClient, capacity: Capacity = .standard) {
        self.redis = redis
        self.capacity = capacity
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
        /// The recipient's queue is at its cap in messages or bytes: nothing was stored.
        case full
        /// The sender is a stranger to the recipient, and strangers together, or this
        /// one, hold their share of the queue: nothing was stored.
        case strangersFull
        /// A group copy whose recipient is not a member of the group (any more).
        case notMember
        /// A group copy checked against a membership version that is no longer the
        /// recipient's record (`current`): the group changed; check again and retry.
        case stale(current: Int64)
    }

    /// The refusal a sender gets for a message the store turned away: a conflict, a pair
    /// over its limit, a full queue (counted in `metrics`). Any other result is not a
    /// refusal of the sender's doing and comes back as `INTERNAL_ERROR` (retry).
    public static func refusal(for result: StoreResult, metrics: RoutingMetrics) -> WhisperError {
        switch result {
        case .conflict:
            return WhisperError(.invalidPayload, "messageId is already used by another message")
        case .limited(let retry):
            return WhisperError(.rateLimited, "too many messages to this recipient; retry in \(retry) ms")
        case .full:
            metrics.queueFull()
            return WhisperError(.rateLimited, "the recipient's pending queue is full; retry later")
        case .strangersFull:
            metrics.queueFull()
            return WhisperError(.rateLimited, "the recipient's pending queue holds all it takes from senders it has not written to; retry later")
        case .stored, .duplicate, .notMember, .stale:
            return WhisperError(.internalError, "unexpected answer from the message store")
        }
    }

    /// The group a copy belongs to and the membership version its checks used.
    public struct GroupCheck: Sendable, Equatable {
        public var groupId: String
        public var epoch: Int64

        public init(groupId: String, epoch: Int64) {
            self.groupId = groupId
            self.epoch = epoch
        }
    }

    /// What `store` did, and where the recipient's live socket is.
    public struct StoreOutcome: Sendable, Equatable {
        public var result: StoreResult
        /// Where the recipient was connected when the message was stored (its presence
        /// record, as the store read it), for the caller to deliver the message to; nil
        /// when nobody is connected, or for a duplicate that is not to be delivered again.
        public var recipientSocket: PresenceRecord?
        /// The replies of the commands sent `alongside` the store, in their order.
        public var alongside: [RESPValue] = []
        /// The timestamp of the recipient's `delivered` receipt recorded with the message
        /// (it rode with this store, or with the stored one this resends: `ReceiptRide`),
        /// for the sender's `message_delivered`; nil when none was.
        public var receipt: Int64?

        public init(result: StoreResult, recipientSocket: PresenceRecord? = nil, alongside: [RESPValue] = [], receipt: Int64? = nil) {
            self.result = result
            self.recipientSocket = recipientSocket
            self.alongside = alongside
            self.receipt = receipt
        }
    }

    /// Stores a message unless its messageId is already known for this recipient or the
    /// sender's bucket for this recipient (`pairLimit`, kept in the recipient's hash slot
    /// and charged only for a new message) is empty, and reads, in the same script, where
    /// the recipient is connected (`presence:{recipient}`). One round trip; nothing is
    /// published: the caller tells the sender and delivers the message (`MessageSending`),
    /// after the store, whose reply leaves Redis only after its write (under
    /// `appendfsync always`, after the fsync). For a duplicate the recipient's socket is
    /// returned only when `redeliver` is set and the message is still pending.
    /// `fromStranger`: the sender is not the recipient's direct peer, so the message
    /// counts against the strangers' share of the queue (`Capacity.strangersPercent`).
    /// `ride`: a `delivered` receipt that joins it before the write leaves is recorded
    /// with a new message, which is then not queued.
    public func store(
        recipient: String, messageId: String, sender: String, body: [UInt8], redeliver: Bool, pairLimit: RateLimitRule,
        fromStranger: Bool, group: GroupCheck? = nil, alongside: [RedisCommand] = [], written: (@Sendable () -> Void)? = nil,
        mayWait: Duration = .zero, ride: ReceiptRide? = nil
    ) async throws -> StoreOutcome {
        var keys = [
            RedisKeys.pending(recipient), Self.messageKey(recipient, messageId), RedisKeys.presence(recipient),
            Self.pairBucket(recipient: recipient, sender: sender), Self.bytesKey(recipient), RedisKeys.peers(recipient),
            Self.strangersKey(recipient), RedisKeys.unanswered(recipient), RedisKeys.wrote(recipient),
            Self.recordsKey(recipient, day: Self.day(of: Clock.millisecondsNow())),
        ]
        let strangers = capacity.strangers, perStranger = capacity.perStranger
        var arguments: [any RedisArgument] = [sender, body, Int(Self.ttl.milliseconds), messageId, redeliver ? 1 : 0]
            + RateLimiter.arguments(pairLimit) + [capacity.messages, capacity.bytes, Peers.capacity, Int(Peers.window.milliseconds)]
            + [fromStranger ? 1 : 0, strangers.messages, strangers.bytes, perStranger.messages, perStranger.bytes]
        if let group {
            keys.append(RedisKeys.groups(recipient))
            arguments += [group.groupId, group.epoch]
        }
        // The redeliver flag's place says whether a receipt rode (`ride.seal()`), decided
        // as late as the write allows.
        let fixed = arguments
        let (reply, others) = try await redis.evaluate(Self.storeScript, keys: keys, lateArguments: {
            guard let timestamp = ride?.seal() else { return fixed }
            var arguments = fixed
            arguments[4] = "d\(timestamp)"
            return arguments
        }, alongside: alongside, written: written, mayWait: mayWait)
        guard let parts = reply.array, let status = parts.first?.string else { throw RedisError.unexpectedReply("pending store") }
        // The fourth part of `stored` and `duplicate`: the recipient's presence record, or false.
        let socket = parts.count > 3 ? parts[3].string.flatMap(PresenceRecord.init(encoded:)) : nil
        let result: StoreResult
        switch status {
        case "stored":
            result = .stored(entryId: parts[1].string ?? "", depth: Int(parts[2].int ?? 0))
        case "duplicate":
            result = .duplicate
        case "limited":
            result = .limited(retryAfterMs: Int(parts.count > 1 ? parts[1].int ?? 0 : 0))
        case "full":
            result = .full
        case "strangers":
            result = .strangersFull
        case "not_member":
            result = .notMember
        case "stale":
            result = .stale(current: parts.count > 1 ? Int64(parts[1].string ?? "") ?? 0 : 0)
        default:
            result = .conflict
        }
        // The fifth: the timestamp of a `delivered` receipt recorded with the message, or false.
        let receipt = parts.count > 4 ? parts[4].string.flatMap { Int64($0) } : nil
        return StoreOutcome(result: result, recipientSocket: socket, alongside: others, receipt: receipt)
    }

    public struct Page: Sendable {
        public var messages: [[UInt8]]
        public var nextCursor: String?
    }

    /// Up to `limit` messages after `cursor` (exclusive), oldest first, stopping before
    /// their bodies pass `maxBytes` (one message always fits: a page is never empty
    /// while messages wait). `nextCursor` is set whenever more may follow.
    public func page(recipient: String, after cursor: String?, limit: Int, maxBytes: Int = Limits.FETCH_PENDING_MAX_BYTES) async throws -> Page {
        let reply = try await redis.evaluate(
            Self.pageScript, keys: [RedisKeys.pending(recipient), Self.bytesKey(recipient), Self.strangersKey(recipient)],
            arguments: [cursor.map { "(" + $0 } ?? "-", limit + 1, Int(Self.ttl.milliseconds)]
        )
        guard let entries = reply.array else { throw RedisError.unexpectedReply("pending page") }
        var messages: [[UInt8]] = []
        var bytes = 0
        var lastId: String?
        var more = entries.count > limit
        for entry in entries.prefix(limit) {
            guard let parts = entry.array, parts.count == 2, let id = parts[0].string, let fields = parts[1].array else { continue }
            var body: [UInt8]?
            var index = 0
            while index + 1 < fields.count {
                if fields[index].string == "body" { body = fields[index + 1].bytes }
                index += 2
            }
            if let body {
                if !messages.isEmpty, bytes + body.count > maxBytes {
                    more = true
                    break
                }
                bytes += body.count
                messages.append(body)
            }
            lastId = id
        }
        return Page(messages: messages, nextCursor: more ? lastId : nil)
    }

    /// Messages waiting for a recipient (after dropping expired ones).
    public func depth(recipient: String) async throws -> Int {
        Int(try await redis.send("XLEN", RedisKeys.pending(recipient)).int ?? 0)
    }

    /// The bucket of messages from `sender` to `recipient`, in the recipient's hash slot.
    static func pairBucket(recipient: String, sender: String) -> String {
        RedisKeys.rateLimit(recipient, Limit.sendPerPair.pairAction(sender))
    }

    /// The total size of the bodies in the queue (kept with it, in its slot).
    static func bytesKey(_ recipient: String) -> String { "pending:{\(recipient)}:bytes" }

    /// What strangers' messages hold of the queue (kept with it, in its slot; the fields
    /// are in `pending-queue-expiry.lua`).
    static func strangersKey(_ recipient: String) -> String { "pending:{\(recipient)}:strangers" }

    /// Bytes the recipient's queue holds, as counted.
    public func bytes(recipient: String) async throws -> Int {
        Int(try await redis.send("GET", Self.bytesKey(recipient)).string.flatMap(Int.init) ?? 0)
    }

    /// The index of the recipient's message records stored on one day (the UTC day,
    /// counted from 1970, by the storing gateway's clock): a list of the records' keys
    /// (`messageKey`), appended to by the store script and expiring a day after the
    /// records' lifetime from its first one, so it outlives every record it names. An
    /// account deletion finds the records here (`records(of:)`); nothing else reads it.
    static func recordsKey(_ recipient: String, day: Int64) -> String { "pending:{\(recipient)}:records:\(day)" }

    static func day(of milliseconds: Int64) -> Int64 { milliseconds / 86_400_000 }

    /// The days whose index may still name a record: a record lives `ttl` from its day's
    /// end at the latest, and the clocks of the gateways that stored may be a day apart.
    static func recordDays(now: Int64) -> [Int64] {
        let today = day(of: now), back = Int64(ttl.milliseconds / 86_400_000) + 1
        return Array((today - back)...(today + 1))
    }

    /// The index keys of `recipient` that may exist (``recordsKey(_:day:)``).
    static func recordKeys(of recipient: String, now: Int64 = Clock.millisecondsNow()) -> [String] {
        recordDays(now: now).map { recordsKey(recipient, day: $0) }
    }

    /// The keys of the recipient's message records that may still exist (those the
    /// indexes name; any of them may have lapsed since).
    public func records(of recipient: String) async throws -> [String] {
        let days = try await redis.pipeline(Self.recordKeys(of: recipient).map { RedisCommand("LRANGE", $0, 0, -1) })
        let prefix = Self.messageKey(recipient, "")
        return days.flatMap { ($0.array ?? []).compactMap(\.string) }.filter { $0.hasPrefix(prefix) }
    }

    public static func messageKey(_ recipient: String, _ messageId: String) -> String {
        "pending:{\(recipient)}:msg:\(Format.lowercased(messageId))"
    }

    /// `pending-queue-expiry.lua` (its header says what it takes and answers).
    static let expiryLua = LuaSource.pendingQueueExpiry

    /// `pending-queue-store.lua` (its header says what it takes and answers).
    static let storeScript = RedisScript(RateLimiter.bucketLua + expiryLua + LuaSource.pendingQueueStore)

    /// `pending-queue-page.lua` (its header says what it takes and answers).
    static let pageScript = RedisScript(RateLimiter.bucketLua + expiryLua + LuaSource.pendingQueuePage)
}
