import Foundation
import WhisperShared

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
    /// How much one recipient's queue may hold; a message past either cap is refused
    /// (`StoreResult.full`) until the recipient takes some.
    public let capacity: Capacity

    public struct Capacity: Sendable, Equatable {
        public var messages: Int
        /// The sum of the stored `message_received` payloads.
        public var bytes: Int

        public init(messages: Int, bytes: Int) {
            self.messages = messages
            self.bytes = bytes
        }

        public static let standard = Capacity(messages: 5_000, bytes: 16 * 1_048_576)
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

    /// How the sender hears that its message was accepted.
    public enum Acceptance: Sendable {
        /// The script publishes `command` (the sender's `message_accepted`) to the
        /// sender's gateway: a router storing a stream entry.
        case publish(gateway: String, command: GatewayCommand)
        /// The script's reply is the acceptance: the caller is `gateway`, the instance
        /// holding the sender's socket, and writes `message_accepted` itself. A recipient
        /// whose socket is on that same instance is not published to either: the reply
        /// names its connection (`StoreOutcome.localConnection`) and the caller writes
        /// the message there.
        case reply(gateway: String)
    }

    /// What `store` did, and where the message went live.
    public struct StoreOutcome: Sendable, Equatable {
        public var result: StoreResult
        /// A live socket was handed the message (published to its gateway, or named below).
        public var deliveredLive: Bool
        /// With `Acceptance.reply`: the recipient's connection on the caller's own
        /// instance, for the caller to write `message_received` to. Nothing was published.
        public var localConnection: String?
        /// The replies of the commands sent `alongside` the store, in their order.
        public var alongside: [RESPValue] = []
    }

    /// Stores a message unless its messageId is already known for this recipient or the
    /// sender's bucket for this recipient (`pairLimit`, kept in the recipient's hash slot
    /// and charged only for a new message) is empty, then, in the same script, tells the
    /// sender (`acceptance`) and passes `message_received` to the gateway named in
    /// `presence:{recipient}`, if any (published, or left to the caller when that is the
    /// caller's own instance). One round trip; the store always comes first, and the
    /// script's reply and messages leave Redis only after its write (under
    /// `appendfsync always`, after the fsync). For a duplicate the sender is told again,
    /// and the message is delivered again only when `redeliver` is set and it is still
    /// pending.
    public func store(
        recipient: String, messageId: String, sender: String, body: [UInt8],
        acceptance: Acceptance, acceptedAt: Int64, redeliver: Bool, pairLimit: RateLimitRule,
        group: GroupCheck? = nil, traceparent: String? = nil, origin: DeliveryOrigin? = nil, alongside: [RedisCommand] = []
    ) async throws -> StoreOutcome {
        var keys = [
            RedisKeys.pending(recipient), Self.messageKey(recipient, messageId), RedisKeys.presence(recipient),
            Self.pairBucket(recipient: recipient, sender: sender), Self.bytesKey(recipient), RedisKeys.peers(recipient),
        ]
        let channel: String
        let command: [UInt8]
        switch acceptance {
        case .publish(let gateway, let accepted):
            channel = RedisKeys.gatewayChannel(gateway)
            command = accepted.encoded
        case .reply(let gateway):
            channel = RedisKeys.gatewayChannel(gateway)
            command = []
        }
        var arguments: [any RedisArgument] = [
            sender, body, Int(Self.ttl.milliseconds), messageId, channel,
            // The deliver command's detail (the trace, when traces are on, and the origin) and acceptedAt.
            command, "\(GatewayCommand.deliverDetail(traceparent: traceparent, origin: origin))\n\(acceptedAt)", redeliver ? 1 : 0,
        ] + RateLimiter.arguments(pairLimit) + [capacity.messages, capacity.bytes, Peers.capacity, Int(Peers.window.milliseconds)]
        if let group {
            keys.append(RedisKeys.groups(recipient))
            arguments += [group.groupId, group.epoch]
        }
        let (reply, others) = try await redis.evaluate(Self.storeScript, keys: keys, arguments: arguments, alongside: alongside)
        guard let parts = reply.array, let status = parts.first?.string else { throw RedisError.unexpectedReply("pending store") }
        // The fourth part: 1 (published to a live socket), 0 (none), or the connection
        // on the caller's instance.
        var live = false
        var local: String?
        if parts.count > 3 {
            switch parts[3] {
            case .integer(let count):
                live = count > 0
            case .bulkString(let connection) where !connection.isEmpty:
                live = true
                local = String(decoding: connection, as: UTF8.self)
            default:
                break
            }
        }
        var outcome: StoreOutcome
        switch status {
        case "stored":
            outcome = StoreOutcome(result: .stored(entryId: parts[1].string ?? "", depth: Int(parts[2].int ?? 0)), deliveredLive: live, localConnection: local)
        case "duplicate":
            outcome = StoreOutcome(result: .duplicate, deliveredLive: live, localConnection: local)
        case "limited":
            outcome = StoreOutcome(result: .limited(retryAfterMs: Int(parts.count > 1 ? parts[1].int ?? 0 : 0)), deliveredLive: false)
        case "full":
            outcome = StoreOutcome(result: .full, deliveredLive: false)
        case "not_member":
            outcome = StoreOutcome(result: .notMember, deliveredLive: false)
        case "stale":
            outcome = StoreOutcome(result: .stale(current: parts.count > 1 ? Int64(parts[1].string ?? "") ?? 0 : 0), deliveredLive: false)
        default:
            outcome = StoreOutcome(result: .conflict, deliveredLive: false)
        }
        outcome.alongside = others
        return outcome
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
            Self.pageScript, keys: [RedisKeys.pending(recipient), Self.bytesKey(recipient)],
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

    public enum ReceiptResult: Sendable, Equatable {
        /// The message was the recipient's, from `sender`; removed from the queue when delivered.
        case acknowledged(sender: String)
        /// No such message for this recipient (never sent to it, or older than 72 h).
        case unknown
    }

    /// Applies the recipient's receipt (`delivered` removes the message from the queue)
    /// and, in the same round trip, finds where `sender` (the sender the receipt names,
    /// who is told if the message turns out to be theirs) is connected.
    /// Each status counts once per message: a repeat (`delivered` for a message no longer
    /// pending, a second `read`) is `.unknown`, so it is not passed on again, unless
    /// `repeated` says this is a stream entry handled a second time (its router died
    /// between this step and the next), when it is passed on again.
    public func acknowledge(
        recipient: String, messageId: String, delivered: Bool, locating sender: String, repeated: Bool = false
    ) async throws -> (result: ReceiptResult, senderSocket: PresenceRecord?) {
        let (reply, others) = try await redis.evaluate(
            Self.ackScript, keys: [RedisKeys.pending(recipient), Self.messageKey(recipient, messageId), Self.bytesKey(recipient)],
            arguments: [delivered ? 1 : 0, repeated ? 1 : 0],
            alongside: [RedisCommand("GET", RedisKeys.presence(sender))]
        )
        let socket = others.first?.string.flatMap(PresenceRecord.init(encoded:))
        if let sender = reply.string, !sender.isEmpty { return (.acknowledged(sender: sender), socket) }
        return (.unknown, nil)
    }

    /// What a receipt's first step found (`checkReceipt`).
    public enum ReceiptCheck: Sendable, Equatable {
        /// The message is the recipient's, from `sender`, and this status was not yet
        /// passed on: keep the receipt for the sender, then apply it (`applyReceipt`).
        case pass(sender: String)
        /// No such message for this recipient, or this status was passed on before.
        case ignore
    }

    /// The first of a receipt's steps as a gateway serves it, once the recipient's bucket
    /// for receipts (`receiptBucket`) was charged (through the socket's lease): looks the
    /// message up and, in the same write, finds where `sender` (whom the receipt names)
    /// is connected. The ack script only asked (its rule is the one `applyReceipt`
    /// applies) and a plain read: nothing is written, so nothing goes to the append-only
    /// file (Redis 7 propagates a script's effects, and this one has none).
    /// The receipt is then kept for its sender (`OwedFrames.keep`) and only after
    /// that applied (`applyReceipt`): a gateway that dies in between leaves the message as it was,
    /// and the recipient acknowledges it again when it fetches it again.
    public func checkReceipt(
        recipient: String, messageId: String, delivered: Bool, locating sender: String
    ) async throws -> (check: ReceiptCheck, senderSocket: PresenceRecord?) {
        // The ack script asked, not applied: the rule is the script's alone.
        let (reply, others) = try await redis.evaluate(
            Self.ackScript, keys: Self.applyKeys(recipient, messageId), arguments: [delivered ? 1 : 0, 0, 1],
            alongside: [RedisCommand("GET", RedisKeys.presence(sender))]
        )
        guard let from = reply.string, !from.isEmpty else { return (.ignore, nil) }
        return (.pass(sender: from), others.first?.string.flatMap(PresenceRecord.init(encoded:)))
    }

    /// The last step of a receipt: `delivered` takes the message out of the queue,
    /// `read` marks it (each once). Returns whether this call changed the message.
    @discardableResult
    public func applyReceipt(recipient: String, messageId: String, delivered: Bool) async throws -> Bool {
        let reply = try await redis.evaluate(Self.ackScript, keys: Self.applyKeys(recipient, messageId), arguments: [delivered ? 1 : 0, 0])
        return !(reply.string ?? "").isEmpty
    }

    /// A receipt's last step, to be run later and many at once (`applyReceipts`, or
    /// `applyCommand` in the same write as other work).
    public struct ReceiptApplication: Sendable, Equatable {
        public var recipient: String
        public var messageId: String
        public var delivered: Bool

        public init(recipient: String, messageId: String, delivered: Bool) {
            self.recipient = recipient
            self.messageId = messageId
            self.delivered = delivered
        }

        /// One string per recipient, message (whatever its case) and status, for sets
        /// of applications waiting or done.
        public var key: String {
            recipient + "/" + Format.lowercased(messageId) + (delivered ? "/d" : "/r")
        }
    }

    /// `applyReceipt` as a command to send with others (`EVALSHA`: a caller that gets
    /// `NOSCRIPT` back runs it again through `applyReceipts`, which teaches the script).
    /// Running it twice changes nothing more than once.
    public static func applyCommand(_ application: ReceiptApplication) -> RedisCommand {
        let keys = applyKeys(application.recipient, application.messageId)
        var command = RedisCommand("EVALSHA", [ackScript.sha1, keys.count])
        for key in keys {
            command.append(key)
        }
        command.append(application.delivered ? 1 : 0)
        command.append(0)
        return command
    }

    /// Whether `applyCommand` may go in another write: this client has taught Redis the
    /// script (through `applyReceipts` or `applyReceipt`).
    public var appliesAlongside: Bool { redis.knows(Self.ackScript) }

    /// Applies receipts in one write (one round trip, one append-only-file write).
    public func applyReceipts(_ applications: [ReceiptApplication]) async throws {
        guard let first = applications.first else { return }
        let (_, others) = try await redis.evaluate(
            Self.ackScript, keys: Self.applyKeys(first.recipient, first.messageId), arguments: [first.delivered ? 1 : 0, 0],
            alongside: applications.dropFirst().map(Self.applyCommand)
        )
        for case .error(let message) in others {
            throw RedisError.server(message)
        }
    }

    private static func applyKeys(_ recipient: String, _ messageId: String) -> [String] {
        [RedisKeys.pending(recipient), messageKey(recipient, messageId), bytesKey(recipient)]
    }

    /// A recipient's bucket for the receipts it sends, in its own hash slot.
    public static func receiptBucket(_ recipient: String) -> String { RedisKeys.rateLimit(recipient, "receipt") }

    /// Messages waiting for a recipient (after dropping expired ones).
    public func depth(recipient: String) async throws -> Int {
        Int(try await redis.send("XLEN", RedisKeys.pending(recipient)).int ?? 0)
    }

    /// The bucket of messages from `sender` to `recipient`, in the recipient's hash slot.
    static func pairBucket(recipient: String, sender: String) -> String {
        RedisKeys.rateLimit(recipient, "from:\(sender)")
    }

    /// The total size of the bodies in the queue (kept with it, in its slot).
    static func bytesKey(_ recipient: String) -> String { "pending:{\(recipient)}:bytes" }

    /// Bytes the recipient's queue holds, as counted.
    public func bytes(recipient: String) async throws -> Int {
        Int(try await redis.send("GET", Self.bytesKey(recipient)).string.flatMap(Int.init) ?? 0)
    }

    public static func messageKey(_ recipient: String, _ messageId: String) -> String {
        "pending:{\(recipient)}:msg:\(Format.lowercased(messageId))"
    }

    /// Removes what is older than the TTL, a bounded batch per call, and takes its size
    /// off the byte count (KEYS[1] the queue, `bytes` its count key); returns how many
    /// messages the queue still holds. An empty queue's count is set to 0, which also
    /// heals a count left by an earlier version.
    static let expiryLua = """
        local function expire_old(queue, bytes, ttl, now)
            local old = redis.call('XRANGE', queue, '-', '(' .. tostring(now - ttl), 'COUNT', 256)
            local freed = 0
            for _, entry in ipairs(old) do
                local fields = entry[2]
                for i = 1, #fields, 2 do
                    if fields[i] == 'body' then freed = freed + #fields[i + 1] end
                end
                redis.call('XDEL', queue, entry[1])
            end
            local length = redis.call('XLEN', queue)
            if length == 0 then
                redis.call('DEL', bytes)
            elseif freed > 0 then
                redis.call('DECRBY', bytes, freed)
            end
            return length
        end

        """

    /// KEYS: queue, message key, presence key, the pair's bucket, byte count, the
    /// recipient's peers (all in the recipient's slot). ARGV: sender, body, ttl ms,
    /// messageId, sender's gateway channel, accepted command (empty: the reply is the
    /// acceptance, and a recipient on that same channel's instance is returned, not
    /// published to), `<traceparent>\n<acceptedAt>`
    /// (the deliver command's detail and time; the traceparent may be empty), redeliver flag,
    /// the bucket's capacity and refill per ms, the queue's cap in messages and in bytes,
    /// the peers' cap and their expiry ms; for a group copy also KEYS[7], the
    /// recipient's groups, and ARGV 15 and 16, the groupId and the membership version the
    /// router checked the sender against. The presence value is
    /// `<gateway> <connId>` (`PresenceRecord`); the command format is `GatewayCommand`'s.
    /// A resend of a stored copy is answered as a duplicate even if the recipient has
    /// left since (it was accepted before); a new copy is stored only while the
    /// recipient's record names the group at the version checked.
    static let storeScript = RedisScript(RateLimiter.bucketLua + expiryLua + """
        local function deliver()
            local holder = redis.call('GET', KEYS[3])
            if not holder then return 0 end
            local space = string.find(holder, ' ', 1, true)
            if not space then return 0 end
            local gateway = string.sub(holder, 1, space - 1)
            local conn = string.sub(holder, space + 1)
            if ARGV[6] == '' and 'gateway:' .. gateway == ARGV[5] then return conn end
            return redis.call('PUBLISH', 'gateway:' .. gateway,
                'deliver\\n' .. conn .. '\\n' .. ARGV[7] .. '\\n{"type":"message_received","payload":' .. ARGV[2] .. '}')
        end
        local known = redis.call('HGET', KEYS[2], 'from')
        if known then
            if known ~= ARGV[1] then return {'conflict'} end
            if ARGV[6] ~= '' then redis.call('PUBLISH', ARGV[5], ARGV[6]) end
            local delivered = 0
            if ARGV[8] == '1' and redis.call('HGET', KEYS[2], 'state') == 'pending' then
                delivered = deliver()
            end
            return {'duplicate', '', 0, delivered}
        end
        if ARGV[15] then
            local epoch = redis.call('HGET', KEYS[7], ARGV[15])
            if not epoch then return {'not_member'} end
            if epoch ~= ARGV[16] then return {'stale', epoch} end
        end
        local now = now_ms()
        local length = expire_old(KEYS[1], KEYS[5], tonumber(ARGV[3]), now)
        local size = #ARGV[2]
        local held = tonumber(redis.call('GET', KEYS[5]) or '0')
        if length >= tonumber(ARGV[11]) or held + size > tonumber(ARGV[12]) then
            return {'full'}
        end
        local retry = take_token(KEYS[4], tonumber(ARGV[9]), tonumber(ARGV[10]), now)
        if retry > 0 then return {'limited', retry} end
        local id = redis.call('XADD', KEYS[1], '*', 'mid', ARGV[4], 'body', ARGV[2])
        redis.call('PEXPIRE', KEYS[1], ARGV[3])
        redis.call('INCRBY', KEYS[5], size)
        redis.call('PEXPIRE', KEYS[5], ARGV[3])
        redis.call('HSET', KEYS[2], 'from', ARGV[1], 'entry', id, 'state', 'pending', 'size', size)
        redis.call('PEXPIRE', KEYS[2], ARGV[3])
        -- Only a sender new to the set can take it past its cap.
        if redis.call('ZADD', KEYS[6], now, ARGV[1]) == 1 and redis.call('ZCARD', KEYS[6]) > tonumber(ARGV[13]) then
            redis.call('ZREMRANGEBYRANK', KEYS[6], 0, -(tonumber(ARGV[13]) + 1))
        end
        redis.call('PEXPIRE', KEYS[6], ARGV[14])
        if ARGV[6] ~= '' then redis.call('PUBLISH', ARGV[5], ARGV[6]) end
        return {'stored', id, length + 1, deliver()}
        """)

    /// KEYS: queue, byte count. ARGV: start (exclusive "(id" or "-"), count, ttl ms.
    static let pageScript = RedisScript(RateLimiter.bucketLua + expiryLua + """
        expire_old(KEYS[1], KEYS[2], tonumber(ARGV[3]), now_ms())
        return redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])
        """)

    /// KEYS: queue, message key, byte count. ARGV: 1 when delivered (else read), 1 when
    /// the entry is handled again, and 1 to only ask (`checkReceipt`: nothing is written).
    /// Returns the sender when the receipt is to be passed on, else "". `delivered` takes
    /// the message out of the queue.
    ///
    /// The receipt-state rule lives here and nowhere else: a `delivered` receipt counts
    /// while its message is pending, a `read` receipt once.
    static let ackScript = RedisScript("""
        local message = redis.call('HMGET', KEYS[2], 'from', 'state', 'entry', 'size', 'read')
        local from = message[1]
        if not from then return '' end
        local counts
        if ARGV[1] == '1' then counts = (message[2] == 'pending') else counts = not message[5] end
        if not counts then
            if ARGV[2] == '1' then return from end
            return ''
        end
        if ARGV[3] == '1' then return from end
        if ARGV[1] == '1' then
            if redis.call('XDEL', KEYS[1], message[3]) == 1 and message[4] then
                redis.call('DECRBY', KEYS[3], tonumber(message[4]))
            end
            if redis.call('XLEN', KEYS[1]) == 0 then redis.call('DEL', KEYS[3]) end
            redis.call('HSET', KEYS[2], 'state', 'delivered')
            return from
        end
        redis.call('HSET', KEYS[2], 'read', '1')
        return from
        """)
}
