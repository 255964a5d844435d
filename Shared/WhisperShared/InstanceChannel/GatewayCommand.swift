/// What other services tell a gateway about its sockets, on `gateway:<instance>`. Wire
/// format, written only here: `<kind>\n<connId>\n<detail>\n<acceptedAt>\n<frame>`; `detail`
/// is a `revoke`'s reason, a `receipt`'s `<owner> <entryId>`, a `live_receipt`'s `<owner>
/// <recipient> <messageId> <status>`, a `deliver`'s `traceparent` then its origin.
public struct GatewayCommand: Sendable, Equatable {
    public enum Kind: String, Sendable {
        /// Send `session_revoked` with `reason`, then close the socket.
        case revoke
        /// Close the socket quietly: the same session continues on a newer socket.
        case supersede
        /// Write `frame` (a complete server frame) to the socket.
        case deliver
        /// Write `frame`, a stored receipt (`OwedFrames`), and once the socket has
        /// taken it, remove it from the store.
        case receipt
        /// Write `frame`, a receipt not stored anywhere (`LiveReceipt`), to its owner's
        /// socket; once the socket has taken it, apply it to the recipient's queue, and
        /// if the socket cannot take it, store it for the owner first. Until then the
        /// message stays pending, so a command that is lost loses nothing.
        case liveReceipt = "live_receipt"
        /// Write `frame` (live text) to each socket of `connId` (comma-separated) that
        /// still has the place in the conversation `liveRoute` asks for.
        case live
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
    /// For `deliver` of a message a gateway stored: where it came from.
    public var origin: DeliveryOrigin?
    /// For `live`: the conversation and who among its sockets may take the frame.
    public var liveRoute: LiveRoute?

    public init(
        kind: Kind, connId: String, reason: SessionRevoked.Reason? = nil, frame: [UInt8]? = nil, acceptedAt: Int64? = nil,
        stored: StoredReceipt? = nil, traceparent: String? = nil, live: LiveReceipt? = nil, origin: DeliveryOrigin? = nil
    ) {
        self.traceparent = traceparent
        self.live = live
        self.origin = origin
        self.kind = kind
        self.connId = connId
        self.reason = reason
        self.frame = frame
        self.acceptedAt = acceptedAt
        self.stored = stored
    }

    public var encoded: [UInt8] {
        let detail = stored?.detail ?? live?.detail ?? liveRoute?.detail ?? reason?.rawValue
            ?? Self.deliverDetail(traceparent: traceparent, origin: origin)
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
        var traceparent: String?
        var origin: DeliveryOrigin?
        switch kind {
        case .receipt:
            guard let parsed = StoredReceipt(detail: fields[2]) else { return nil }
            stored = parsed
        case .liveReceipt:
            guard let parsed = LiveReceipt(detail: fields[2]), frame != nil else { return nil }
            live = parsed
        case .live:
            guard let route = LiveRoute(detail: fields[2]), let frame else { return nil }
            var command = GatewayCommand(kind: kind, connId: fields[1], frame: frame)
            command.liveRoute = route
            return command
        case .deliver:
            var tokens = fields[2].split(separator: " ")[...]
            if let first = tokens.first, WhisperTracing.isTraceparent(String(first)) {
                traceparent = String(first)
                tokens = tokens.dropFirst()
            }
            origin = DeliveryOrigin(tokens: Array(tokens))
        default:
            break
        }
        return GatewayCommand(
            kind: kind, connId: fields[1],
            reason: kind == .revoke ? SessionRevoked.Reason(rawValue: fields[2]) : nil,
            frame: frame, acceptedAt: Int64(fields[3]), stored: stored,
            traceparent: traceparent, live: live, origin: origin
        )
    }

    /// The detail of a `deliver`: the trace (when traces are on), then the origin.
    public static func deliverDetail(traceparent: String?, origin: DeliveryOrigin?) -> String {
        [traceparent, origin?.detail].compactMap { $0 }.joined(separator: " ")
    }

    /// Publishes to the gateway's channel; returns how many subscribers got it (0 when
    /// that gateway is gone).
    @discardableResult
    public func publish(to gateway: String, on redis: RedisClient) async throws -> Int {
        Int(try await redis.send(publishing(to: gateway)).int ?? 0)
    }

    /// The command that publishes this one to the gateway's channel, to send with others
    /// (its reply: how many subscribers got it). The only place a command meets its channel.
    public func publishing(to gateway: String) -> RedisCommand {
        RedisCommand("PUBLISH", RedisKeys.gatewayChannel(gateway), encoded)
    }
}

/// Frames handed to sockets through their gateways' channels, kept nowhere: "tell
/// these sockets" and "tell these identities' live sockets" in one place.
public enum SocketFanOut {
    /// Hands `frame` to each socket: one `PUBLISH` to its gateway's channel each, all in
    /// one round trip.
    public static func deliver(_ frame: [UInt8], to sockets: [PresenceRecord], on redis: RedisClient) async throws {
        guard !sockets.isEmpty else { return }
        _ = try await redis.pipeline(sockets.map { GatewayCommand(kind: .deliver, connId: $0.connId, frame: frame).publishing(to: $0.gateway) })
    }

    /// Hands `frame` to the live socket of each identity that has one (its presence
    /// record), in two round trips; returns how many sockets it was handed to. An
    /// identity without a live socket is not told.
    @discardableResult
    public static func deliverToLive(_ frame: [UInt8], of whisperIds: [String], on redis: RedisClient) async throws -> Int {
        let sockets = try await PresenceStore(redis: redis).lookup(Array(Set(whisperIds))).compactMap { $0 }
        try await deliver(frame, to: sockets, on: redis)
        return sockets.count
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

/// Where a message a gateway stored itself came from: that gateway, the socket it was
/// read from, its sender and recipient, and its messageId. The recipient's gateway
/// keeps it for the message's receipt (`ReceiptMemory`), which it can then hand to
/// that gateway without looking the message up. Whisper IDs, connection IDs, instance
/// IDs and messageIds hold no spaces.
public struct DeliveryOrigin: Sendable, Equatable {
    public var gateway: String
    public var connId: String
    public var sender: String
    public var recipient: String
    public var messageId: String

    public init(gateway: String, connId: String, sender: String, recipient: String, messageId: String) {
        self.gateway = gateway
        self.connId = connId
        self.sender = sender
        self.recipient = recipient
        self.messageId = messageId
    }

    var detail: String { "\(gateway) \(connId) \(sender) \(recipient) \(messageId)" }

    init?(tokens: [Substring]) {
        guard tokens.count == 5 else { return nil }
        self.init(
            gateway: String(tokens[0]), connId: String(tokens[1]), sender: String(tokens[2]), recipient: String(tokens[3]),
            messageId: String(tokens[4])
        )
    }
}

/// The stores of frames owed to an identity (`OwedFrames`), each a stream with a bound
/// of its own, so one kind never pushes another out.
public enum OwedStore: String, Sendable, CaseIterable {
    /// `message_delivered` receipts for the messages the owner sent, and missed calls.
    case receipts
    /// `group_created` and `group_updated` of the groups the owner is in.
    case groupEvents = "groups"

    /// The stream's key.
    public func key(_ owner: String) -> String {
        switch self {
        case .receipts: "receipts:{\(owner)}:waiting"
        case .groupEvents: "owed:{\(owner)}:groups"
        }
    }
}

/// Where an owed frame waits (`OwedStore`) until its owner's socket has taken it.
/// Wire detail: `<owner> <entryId>`, then the store's name unless it is `receipts`.
public struct StoredReceipt: Sendable, Equatable, Hashable {
    public var owner: String
    public var entryId: String
    public var store: OwedStore

    public init(owner: String, entryId: String, store: OwedStore = .receipts) {
        self.owner = owner
        self.entryId = entryId
        self.store = store
    }

    var detail: String {
        store == .receipts ? "\(owner) \(entryId)" : "\(owner) \(entryId) \(store.rawValue)"
    }

    init?(detail: String) {
        let parts = detail.split(separator: " ")
        guard parts.count == 2 || parts.count == 3 else { return nil }
        guard let store = parts.count == 3 ? OwedStore(rawValue: String(parts[2])) : .receipts else { return nil }
        self.init(owner: String(parts[0]), entryId: String(parts[1]), store: store)
    }
}

/// Where a live-text frame may go on the gateway that receives it: the conversation, and
/// which of its sockets there may take it. Checked against that gateway's own record
/// of its sockets (`LiveRegistry`), so a socket that left or was let go in the meantime
/// gets nothing.
public struct LiveRoute: Sendable, Equatable {
    public enum Mode: String, Sendable {
        /// Content: joined listeners only.
        case content
        /// Control: any socket with a place in the conversation.
        case control
        /// A listener let go: written, then the socket loses its place.
        case detach
    }

    public var conversationId: String
    public var mode: Mode

    public init(conversationId: String, mode: Mode) {
        self.conversationId = conversationId
        self.mode = mode
    }

    var detail: String { "\(conversationId) \(mode.rawValue)" }

    init?(detail: String) {
        let parts = detail.split(separator: " ")
        guard parts.count == 2, let mode = Mode(rawValue: String(parts[1])) else { return nil }
        self.init(conversationId: String(parts[0]), mode: mode)
    }
}
