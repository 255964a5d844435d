import Hummingbird
import NIOCore

/// The request context of the gateway's HTTP routes, with the peer's address for the
/// per-address limits.
public struct GatewayRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The client's address as every limit of the gateway keys it (`ClientAddress`).
    public let remoteAddress: String

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.remoteAddress = ClientAddress.of(source.channel)
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
