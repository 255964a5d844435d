/// What other services tell a gateway instance about its sockets, published on the
/// instance's channel (`gateway:<instance>`).
///
/// Wire format (cheap to build, also from Lua, and to read; the frame is carried as it is):
/// `<kind>\n<connId>\n<detail>\n<acceptedAt>\n<frame>`, empty where a field does not
/// apply. `detail` is the reason of a `revoke`, `<owner> <entryId>` of a `receipt`,
/// `<owner> <recipient> <messageId> delivered|read` of a `live_receipt`, and the W3C
/// `traceparent` of a `deliver` when traces are on.
public struct GatewayCommand: Sendable, Equatable {
    public enum Kind: String, Sendable {
        /// Send `session_revoked` with `reason`, then close the socket.
        case revoke
        /// Close the socket quietly: the same session continues on a newer socket.
        case supersede
        /// Write `frame` (a complete server frame) to the socket.
        case deliver
        /// Write `frame`, a stored receipt (`ReceiptQueue`), and once the socket has
        /// taken it, remove it from the store.
        case receipt
        /// Write `frame`, a receipt not stored anywhere (`LiveReceipt`), to its owner's
        /// socket; once the socket has taken it, apply it to the recipient's queue, and
        /// if the socket cannot take it, store it for the owner first. Until then the
        /// message stays pending, so a command that is lost loses nothing.
        case liveReceipt = "live_receipt"
    }

    public var kind: Kind
    public var connId: String
    public var reason: SessionRevoked.Reason?
    public var frame: [UInt8]?
    /// For `message_received`: when the sender's frame reached its gateway (ms), so the
    /// recipient's gateway can measure routing latency.
    public var acceptedAt: Int64?
    /// For `receipt`: where the frame is stored (the sender it is for, and its entry).
    public var stored: StoredReceipt?
    /// For `deliver`: the trace the frame belongs to (`WhisperTracing`).
    public var traceparent: String?
    /// For `liveReceipt`: whose receipt it is and what to apply once it is taken.
    public var live: LiveReceipt?

    public init(
        kind: Kind, connId: String, reason: SessionRevoked.Reason? = nil, frame: [UInt8]? = nil, acceptedAt: Int64? = nil,
        stored: StoredReceipt? = nil, traceparent: String? = nil, live: LiveReceipt? = nil
    ) {
        self.traceparent = traceparent
        self.live = live
        self.kind = kind
        self.connId = connId
        self.reason = reason
        self.frame = frame
        self.acceptedAt = acceptedAt
        self.stored = stored
    }

    public var encoded: [UInt8] {
        let detail = stored.map { "\($0.owner) \($0.entryId)" } ?? live?.detail ?? reason?.rawValue ?? traceparent ?? ""
        var bytes = Array("\(kind.rawValue)\n\(connId)\n\(detail)\n\(acceptedAt.map(String.init) ?? "")\n".utf8)
        if let frame { bytes += frame }
        return bytes
    }

    public static func decode(_ bytes: [UInt8]) -> GatewayCommand? {
        var fields: [String] = []
        var start = 0
        var index = 0
        while fields.count < 4, index < bytes.count {
            if bytes[index] == UInt8(ascii: "\n") {
                fields.append(String(decoding: bytes[start..<index], as: UTF8.self))
                start = index + 1
            }
            index += 1
        }
        guard fields.count == 4, let kind = Kind(rawValue: fields[0]), !fields[1].isEmpty else { return nil }
        let frame = start < bytes.count ? Array(bytes[start...]) : nil
        var stored: StoredReceipt?
        var live: LiveReceipt?
        switch kind {
        case .receipt:
            guard let parsed = StoredReceipt(detail: fields[2]) else { return nil }
            stored = parsed
        case .liveReceipt:
            guard let parsed = LiveReceipt(detail: fields[2]), frame != nil else { return nil }
            live = parsed
        default:
            break
        }
        return GatewayCommand(
            kind: kind, connId: fields[1],
            reason: kind == .revoke ? SessionRevoked.Reason(rawValue: fields[2]) : nil,
            frame: frame, acceptedAt: Int64(fields[3]), stored: stored,
            traceparent: kind == .deliver && WhisperTracing.isTraceparent(fields[2]) ? fields[2] : nil, live: live
        )
    }

    /// Publishes to the gateway's channel; returns how many subscribers got it (0 when
    /// that gateway is gone).
    @discardableResult
    public func publish(to gateway: String, on redis: RedisClient) async throws -> Int {
        Int(try await redis.send("PUBLISH", RedisKeys.gatewayChannel(gateway), encoded).int ?? 0)
    }
}

/// A receipt handed to the gateway of its owner's socket without being stored: whose it
/// is (`owner`, the message's sender) and the acknowledgement to apply once it is taken
/// (`recipient`'s queue, `messageId`, `delivered` or read).
public struct LiveReceipt: Sendable, Equatable {
    public var owner: String
    public var recipient: String
    public var messageId: String
    public var delivered: Bool

    public init(owner: String, recipient: String, messageId: String, delivered: Bool) {
        self.owner = owner
        self.recipient = recipient
        self.messageId = messageId
        self.delivered = delivered
    }

    var detail: String { "\(owner) \(recipient) \(messageId) \(delivered ? "delivered" : "read")" }

    init?(detail: String) {
        let parts = detail.split(separator: " ")
        guard parts.count == 4, parts[3] == "delivered" || parts[3] == "read" else { return nil }
        self.init(owner: String(parts[0]), recipient: String(parts[1]), messageId: String(parts[2]), delivered: parts[3] == "delivered")
    }
}

/// Where a receipt waits in `receipts:{owner}` until its owner's socket has taken it.
public struct StoredReceipt: Sendable, Equatable, Hashable {
    public var owner: String
    public var entryId: String

    public init(owner: String, entryId: String) {
        self.owner = owner
        self.entryId = entryId
    }

    init?(detail: String) {
        let parts = detail.split(separator: " ")
        guard parts.count == 2 else { return nil }
        self.init(owner: String(parts[0]), entryId: String(parts[1]))
    }
}
