import HTTPTypes
import Hummingbird
import NIOCore

/// The request context of every service's public routes: Hummingbird's, with the
/// address of the peer the request came from, for the per-address limits.
public struct ClientRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The peer's IP address: the load balancer's when there is one in front.
    public let peerAddress: String

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.peerAddress = ClientAddress.of(source.channel)
    }

    /// The client's address as every per-address limit keys it (``ClientAddress``).
    public func clientAddress(of request: Request, trusted: TrustedProxies) -> String {
        trusted.clientAddress(peer: peerAddress, forwardedFor: request.headers[values: ClientAddress.forwardedFor])
    }
}

/// Where a connection comes from, for every per-address limit: the peer's IP address, or
/// the client a trusted proxy (`WHISPER_TRUSTED_PROXIES`) names in `X-Forwarded-For`
/// (docs/operations.md, "Client addresses behind a proxy").
public enum ClientAddress {
    public static let forwardedFor = HTTPField.Name("X-Forwarded-For")!

    public static func of(_ channel: any Channel) -> String {
        channel.remoteAddress?.ipAddress ?? "unknown"
    }

    public static func of(_ channel: any Channel, forwardedFor: [String], trusted: TrustedProxies) -> String {
        trusted.clientAddress(peer: of(channel), forwardedFor: forwardedFor)
    }
}
