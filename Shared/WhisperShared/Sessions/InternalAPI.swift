import Foundation

/// Which socket a forwarded frame came from, as the gateway tells the service it calls.
public struct ConnectionContext: Codable, Sendable, Equatable {
    /// The gateway instance holding the socket (its pub/sub channel is `gateway:<instance>`).
    public var gateway: String
    public var connId: String
    /// The client's address, for per-IP rate limits.
    public var remoteAddress: String?
    /// The identity this socket is bound to, once it has one.
    public var whisperId: String?

    public init(gateway: String, connId: String, remoteAddress: String?, whisperId: String?) {
        self.gateway = gateway
        self.connId = connId
        self.remoteAddress = remoteAddress
        self.whisperId = whisperId
    }
}

/// The body of `POST /internal/v1/frames/<type>`: a client frame the gateway checked,
/// forwarded with its socket's context. The answer is the complete server frame to
/// write back (an `error` frame included), always with status 200.
public struct InternalFrameRequest<Payload: ClientPayload>: Codable, Sendable {
    public var requestId: String?
    public var context: ConnectionContext
    public var payload: Payload

    public init(requestId: String?, context: ConnectionContext, payload: Payload) {
        self.requestId = requestId
        self.context = context
        self.payload = payload
    }
}

public enum InternalAPI {
    public static func framePath(_ type: ClientFrameType) -> String { "/internal/v1/frames/\(type.rawValue)" }
    /// Header carrying the shared internal token (`WHISPER_INTERNAL_TOKEN`).
    public static let tokenHeader = "X-Whisper-Internal-Token"
}
