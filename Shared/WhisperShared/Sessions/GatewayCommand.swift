import Foundation

/// What other services tell a gateway instance about its sockets, published on the
/// instance's channel (`gateway:<instance>`).
public struct GatewayCommand: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable {
        /// Send `session_revoked` with `reason`, then close the socket.
        case revoke
        /// Close the socket quietly: the same session continues on a newer socket.
        case supersede
        /// Write `frame` (a complete server frame) to the socket.
        case deliver
    }

    public var kind: Kind
    public var connId: String
    public var reason: SessionRevoked.Reason?
    public var frame: String?
    /// For `message_received`: when the sender's frame reached its gateway (ms), so the
    /// recipient's gateway can measure routing latency.
    public var acceptedAt: Int64?

    public init(kind: Kind, connId: String, reason: SessionRevoked.Reason? = nil, frame: String? = nil, acceptedAt: Int64? = nil) {
        self.kind = kind
        self.connId = connId
        self.reason = reason
        self.frame = frame
        self.acceptedAt = acceptedAt
    }

    /// Publishes to the gateway's channel; returns how many subscribers got it (0 when
    /// that gateway is gone).
    @discardableResult
    public func publish(to gateway: String, on redis: RedisClient) async throws -> Int {
        let bytes = Array((try? JSONEncoder().encode(self)) ?? Data())
        return Int(try await redis.send("PUBLISH", RedisKeys.gatewayChannel(gateway), bytes).int ?? 0)
    }

    public static func decode(_ bytes: [UInt8]) -> GatewayCommand? {
        try? JSONDecoder().decode(GatewayCommand.self, from: Data(bytes))
    }
}
