import Hummingbird
import HummingbirdWebSocket
import NIOCore

/// The request context of the gateway's routes: what hummingbird-websocket needs,
/// plus the peer's address for per-IP rate limits and the connection's channel (the
/// gateway writes its frames to it directly).
public struct GatewayRequestContext: RequestContext, WebSocketRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let webSocket: WebSocketHandlerReference<Self>
    public let remoteAddress: String?
    public let channel: any Channel

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.webSocket = .init()
        self.remoteAddress = source.channel.remoteAddress?.ipAddress
        self.channel = source.channel
    }
}
