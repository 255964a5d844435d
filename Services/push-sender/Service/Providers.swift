import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOSSL
import WhisperMessaging
import WhisperShared

/// One wake-up on its way to a provider: the job, and the token it goes to.
struct Wakeup: Sendable {
    var job: PushStream.Job
    var token: String
    var tokenKind: DeviceDirectory.TokenKind
}

/// What a provider made of a wake-up.
enum ProviderAnswer: Sendable, Equatable {
    /// Accepted by the provider.
    case delivered
    /// Worth another attempt (429, 5xx, a connection that failed), no sooner than `after`
    /// when the provider said so (`Retry-After`).
    case retry(after: Duration?, reason: String)
    /// The provider says the token is no longer valid: it is removed.
    case deadToken(reason: String)
    /// Refused for a reason another attempt cannot change (a bad request, a wrong topic):
    /// the wake-up goes to the dead-letter stream.
    case failed(reason: String)
}

extension ProviderAnswer {
    /// The same answer with `token` replaced by `stand-in` in its reason.
    func redacting(_ token: String, as standIn: String) -> ProviderAnswer {
        guard !token.isEmpty else { return self }
        func clean(_ reason: String) -> String { reason.replacingOccurrences(of: token, with: "<token \(standIn)>") }
        switch self {
        case .delivered: return self
        case .retry(let after, let reason): return .retry(after: after, reason: clean(reason))
        case .deadToken(let reason): return .deadToken(reason: clean(reason))
        case .failed(let reason): return .failed(reason: clean(reason))
        }
    }
}

/// A push provider (APNs, FCM).
protocol PushProvider: Sendable {
    /// `apns` or `fcm`, for metrics and logs.
    var name: String { get }
    func send(_ wakeup: Wakeup, ttl: Duration) async -> ProviderAnswer
}

/// The HTTP client the providers share: HTTP/2 when the server offers it (APNs and FCM
/// do), one connection per host carrying many concurrent streams, and the system's
/// trust roots plus any the operator adds (`PUSH_TLS_EXTRA_ROOTS`). Certificate
/// verification is always on.
enum ProviderHTTP {
    static func makeClient(extraTrustRootsPath: String?, requestTimeout: Duration) -> HTTPClient {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let extraTrustRootsPath {
            tls.additionalTrustRoots = [.file(extraTrustRootsPath)]
        }
        var configuration = HTTPClient.Configuration(
            tlsConfiguration: tls,
            timeout: .init(connect: .seconds(10), read: .nanoseconds(requestTimeout.nanoseconds))
        )
        configuration.httpVersion = .automatic
        configuration.connectionPool = .init(idleTimeout: .seconds(600))
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// Sends a request and reads its answer (at most 64 KiB of body): `read` turns the
    /// status, headers and body into the provider's answer; a request that fails on the
    /// way (connection, TLS, timeout) is worth another attempt.
    static func exchange(
        _ request: HTTPClientRequest, on client: HTTPClient, timeout: TimeAmount,
        read: (UInt, HTTPHeaders, ByteBuffer) -> ProviderAnswer
    ) async -> ProviderAnswer {
        do {
            let response = try await client.execute(request, timeout: timeout)
            let body = try await response.body.collect(upTo: 64 * 1024)
            return read(response.status.code, response.headers, body)
        } catch {
            return .retry(after: nil, reason: "connection: \(error)")
        }
    }

    /// Seconds of a `Retry-After` header (the delay form; a date is read as no hint).
    static func retryAfter(_ headers: HTTPHeaders) -> Duration? {
        guard let value = headers.first(name: "retry-after"), let seconds = Int(value.trimmingCharacters(in: .whitespaces)),
              (0...86_400).contains(seconds) else { return nil }
        return .seconds(seconds)
    }

    /// A short, stable stand-in for a token in logs: never the token itself.
    static func tokenHash(_ token: String) -> String {
        String(SHA256.hash(data: Array(token.utf8)).hexString.prefix(12))
    }
}
