import Hummingbird
import NIOCore
import WhisperShared

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
/// limits, which get it with each forwarded frame). The peer's IP address, or, when the
/// peer is a trusted proxy (`WHISPER_TRUSTED_PROXIES`), the client it names in
/// `X-Forwarded-For` (docs/operations.md, "Client addresses behind a proxy").
enum ClientAddress {
    static func of(_ channel: any Channel) -> String {
        channel.remoteAddress?.ipAddress ?? "unknown"
    }

    static func of(_ channel: any Channel, forwardedFor: [String], trusted: TrustedProxies) -> String {
        trusted.clientAddress(peer: of(channel), forwardedFor: forwardedFor)
    }
}
