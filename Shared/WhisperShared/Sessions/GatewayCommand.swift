/// What other services tell a gateway instance about its sockets, published on the
/// instance's channel (`gateway:<instance>`).
///
/// Wire format (cheap to build, also from Lua, and to read; the frame is carried as it is):
/// `<kind>\n<connId>\n<detail>\n<acceptedAt>\n<frame>`, empty where a field does not
/// apply. `detail` is the reason of a `revoke`, `<owner> <entryId>` of a `receipt`, and
/// the W3C `traceparent` of a `deliver` when traces are on.
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

    public init(
        kind: Kind, connId: String, reason: SessionRevoked.Reason? = nil, frame: [UInt8]? = nil, acceptedAt: Int64? = nil,
        stored: StoredReceipt? = nil, traceparent: String? = nil
    ) {
        self.traceparent = traceparent
        self.kind = kind
        self.connId = connId
        self.reason = reason
        self.frame = frame
        self.acceptedAt = acceptedAt
        self.stored = stored
    }

    public var encoded: [UInt8] {
        let detail = stored.map { "\($0.owner) \($0.entryId)" } ?? reason?.rawValue ?? traceparent ?? ""
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
        if kind == .receipt {
            guard let parsed = StoredReceipt(detail: fields[2]) else { return nil }
            stored = parsed
        }
        return GatewayCommand(
            kind: kind, connId: fields[1],
            reason: kind == .revoke ? SessionRevoked.Reason(rawValue: fields[2]) : nil,
            frame: frame, acceptedAt: Int64(fields[3]), stored: stored,
            traceparent: kind == .deliver && WhisperTracing.isTraceparent(fields[2]) ? fields[2] : nil
        )
    }

    /// Publishes to the gateway's channel; returns how many subscribers got it (0 when
    /// that gateway is gone).
    @discardableResult
    public func publish(to gateway: String, on redis: RedisClient) async throws -> Int {
        Int(try await redis.send("PUBLISH", RedisKeys.gatewayChannel(gateway), encoded).int ?? 0)
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
