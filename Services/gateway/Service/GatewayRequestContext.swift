import Hummingbird
import HummingbirdWebSocket
import NIOCore

/// The request context of the gateway's routes: what hummingbird-websocket needs,
/// plus the peer's address for per-IP rate limits.
public struct GatewayRequestContext: RequestContext, WebSocketRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let webSocket: WebSocketHandlerReference<Self>
    public let remoteAddress: String?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.webSocket = .init()
        self.remoteAddress = source.channel.remoteAddress?.ipAddress
    }
}
