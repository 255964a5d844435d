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

    public init(kind: Kind, connId: String, reason: SessionRevoked.Reason? = nil, frame: String? = nil) {
        self.kind = kind
        self.connId = connId
        self.reason = reason
        self.frame = frame
    }

    public func publish(to gateway: String, on redis: RedisClient) async throws {
        let bytes = Array((try? JSONEncoder().encode(self)) ?? Data())
        try await redis.send("PUBLISH", RedisKeys.gatewayChannel(gateway), bytes)
    }

    public static func decode(_ bytes: [UInt8]) -> GatewayCommand? {
        try? JSONDecoder().decode(GatewayCommand.self, from: Data(bytes))
    }
}
