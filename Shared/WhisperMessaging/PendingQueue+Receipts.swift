import WhisperShared

/// The receipt's side of a recipient's queue (`PendingQueue`): the receipt-state rule,
/// stated once, in the acknowledgement script (`ackScript`), which both asks
/// (`checkReceipt`) and applies (`applyReceipts`, `applyCommand`). Receipts are served
/// by gateways only (`ReceiptDesk`); nothing else changes a message's state.
extension PendingQueue {
    /// What a receipt's first step found (`checkReceipt`).
    public enum ReceiptCheck: Sendable, Equatable {
        /// The message is the recipient's, from `sender`, and this status was not yet
        /// passed on: keep the receipt for the sender, then apply it.
        case pass(sender: String)
        /// No such message for this recipient, or this status was passed on before.
        case ignore
    }

    /// The first of a receipt's steps as a gateway serves it, once the recipient's bucket
    /// for receipts (`receiptBucket`) was charged (through the socket's lease): looks the
    /// message up and, in the same write, finds where `sender` (whom the receipt names)
    /// is connected. The ack script only asks (ARGV[2]) and a plain read: nothing is
    /// written, so nothing goes to the append-only file (Redis 7 propagates a script's
    /// effects, and this one has none). The receipt is then kept for its sender
    /// (`OwedFrames.keep`) and only after that applied: a gateway that dies in between
    /// leaves the message as it was, and the recipient acknowledges it again when it
    /// fetches it again.
    public func checkReceipt(
        recipient: String, messageId: String, delivered: Bool, locating sender: String
    ) async throws -> (check: ReceiptCheck, senderSocket: PresenceRecord?) {
        let (reply, others) = try await redis.evaluate(
            Self.ackScript, keys: Self.applyKeys(recipient, messageId), arguments: [delivered ? 1 : 0, 1],
            alongside: [RedisCommand("GET", RedisKeys.presence(sender))]
        )
        guard let from = reply.string, !from.isEmpty else { return (.ignore, nil) }
        return (.pass(sender: from), others.first?.string.flatMap(PresenceRecord.init(encoded:)))
    }

    /// A receipt's last step (`delivered` takes the message out of the queue, `read`
    /// marks it; each once), to be run later and many at once (`applyReceipts`, or
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
    }

    /// An application as a command to send with others (`EVALSHA`: a caller that gets
    /// `NOSCRIPT` back runs it again through `applyReceipts`, which teaches the script).
    /// Running it twice changes nothing more than once.
    public static func applyCommand(_ application: ReceiptApplication) -> RedisCommand {
        ackScript.evalsha(keys: applyKeys(application.recipient, application.messageId), arguments: [application.delivered ? 1 : 0, 0])
    }

    /// Whether `applyCommand` may go in another write: this client has taught Redis the
    /// script (through `applyReceipts`).
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
        [RedisKeys.pending(recipient), messageKey(recipient, messageId), bytesKey(recipient), strangersKey(recipient)]
    }

    /// `message_delivered`, a receipt as its sender gets it.
    public static func deliveredFrame(messageId: String, status: ReceiptStatus, timestamp: Int64, from recipient: String) -> [UInt8] {
        ServerFrameCodec.encode(MessageDelivered(messageId: messageId, status: status, timestamp: timestamp, from: recipient))
    }

    /// A recipient's bucket for the receipts it sends, in its own hash slot.
    public static func receiptBucket(_ recipient: String) -> String { RedisKeys.rateLimit(recipient, Limit.receiptsPerIdentity.bucket) }

    /// `pending-queue-ack.lua` (its header says what it takes and answers).
    static let ackScript = RedisScript(expiryLua + LuaSource.pendingQueueAck)
}
