import AsyncHTTPClient
@testable import GatewayService
import NIOCore
import Testing
import WhisperShared

/// Item 1 of issue 34: behind the compose edge, the address the gateway limits is the
/// one the edge saw, not one a client writes into `X-Forwarded-For`.
@Suite struct EdgeProxyTests {
    @Test func aClientCannotPickItsAddressThroughTheEdgeAndClientsBehindItHaveTheirOwnBuckets() async throws {
        try await SocketHandlerTests().withGateway({
            $0.maxSocketsPerAddress = 1
            $0.common.trustedProxies = TrustedProxies("127.0.0.1/32")!
        }) { gatewayPort in
            let edge = try EdgeProxy(gatewayPort: gatewayPort)
            // A client at 127.0.0.2 holds its one socket.
            let held = try await RawHTTP.exchange(port: edge.port, head: RawHTTP.upgradeHead(), from: "127.0.0.2")
            #expect(held.status == 101)
            // The same client claiming other addresses is still 127.0.0.2: refused.
            for claimed in ["6.6.6.6", "198.51.100.9, 203.0.113.7", "127.0.0.3"] {
                let forged = try await RawHTTP.exchange(port: edge.port, head: RawHTTP.upgradeHead(forwardedFor: claimed), from: "127.0.0.2")
                #expect(forged.status == 429, "X-Forwarded-For: \(claimed) got \(forged.status)")
                try? await forged.channel.close().get()
            }
            // Another client behind the same edge, sending no header, has a bucket of its
            // own; and naming 127.0.0.2 (the first client) cannot lock that one out either.
            let other = try await RawHTTP.exchange(port: edge.port, head: RawHTTP.upgradeHead(), from: "127.0.0.3")
            #expect(other.status == 101)
            let framing = try await RawHTTP.exchange(port: edge.port, head: RawHTTP.upgradeHead(forwardedFor: "127.0.0.3"), from: "127.0.0.4")
            #expect(framing.status == 101)
            for answer in [held, other, framing] { try? await answer.channel.close().get() }
        }
    }

    /// The listener cookie is `Secure` whenever the browser reached the edge over TLS: a
    /// balancer that ends TLS in front of the edge says so in `X-Forwarded-Proto`, and
    /// the edge passes that on instead of its own plain `http`.
    @Test func theListenerCookieIsSecureWhenTheEdgeWasReachedOverTLS() async throws {
        try await SocketHandlerTests().withGateway({ $0.common.trustedProxies = TrustedProxies("127.0.0.1/32")! }) { gatewayPort in
            let edge = try EdgeProxy(gatewayPort: gatewayPort)
            func cookie(forwardedProto: String?) async throws -> String {
                var request = HTTPClientRequest(url: "http://127.0.0.1:\(edge.port)/listen/\(RandomID.uuid())")
                if let forwardedProto { request.headers.add(name: "X-Forwarded-Proto", value: forwardedProto) }
                let page = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
                #expect(page.status == .ok)
                return try #require(page.headers["Set-Cookie"].first)
            }
            #expect(try await cookie(forwardedProto: "https").hasSuffix("; Secure"))
            #expect(try await cookie(forwardedProto: "https, http").hasSuffix("; Secure"))
            #expect(try await !cookie(forwardedProto: nil).contains("Secure"))
        }
    }
}
