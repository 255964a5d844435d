import Hummingbird
import HummingbirdWebSocket
import NIOCore

/// The request context of the gateway's routes: what hummingbird-websocket needs,
/// plus the peer's address for per-IP rate limits and the connection's channel (the
/// gateway writes its frames to it directly).
public struct GatewayRequestContext: RequestContext, WebSocketRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let webSocket: WebSocketHandlerReference<Self>
    /// The client's address as every limit of the gateway keys it (`ClientAddress`).
    public let remoteAddress: String
    public let channel: any Channel

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.webSocket = .init()
        self.remoteAddress = ClientAddress.of(source.channel)
        self.channel = source.channel
    }
}

/// Where a connection comes from, for per-address limits: one function, used by every
/// limit (socket caps, frame buckets, refusals, and auth's registration and token
/// limits, which get it with each forwarded frame). Today the peer's IP address; behind
/// a proxy that is the proxy's (see docs/operations.md, trusted proxies).
enum ClientAddress {
    static func of(_ channel: any Channel) -> String {
        channel.remoteAddress?.ipAddress ?? "unknown"
    }
}
