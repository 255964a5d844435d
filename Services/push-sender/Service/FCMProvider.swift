import AsyncHTTPClient
import Foundation
import JWTKit
import NIOCore
import NIOHTTP1
import Synchronization
import WhisperShared

/// FCM HTTP v1: high-priority data messages (no notification block: the app decides
/// what to show after it has fetched), authorised by an OAuth2 access token that the
/// service account's RS256 assertion buys at its token URI, kept until five minutes
/// before it expires. docs/protocol.md ("Wake-ups") has the message.
struct FCMProvider: PushProvider {
    let name = "fcm"
    let settings: PushSenderSettings.FCMSettings
    let client: HTTPClient
    let tokens: FCMAccessTokens

    /// The longest one request may take (`PUSH_REQUEST_TIMEOUT_SECONDS`).
    let timeout: TimeAmount

    init(settings: PushSenderSettings.FCMSettings, client: HTTPClient, timeout: Duration) throws {
        self.settings = settings
        self.client = client
        self.timeout = .nanoseconds(timeout.nanoseconds)
        tokens = try FCMAccessTokens(account: settings.serviceAccount, client: client)
    }

    static let collapseKey = "whisper-pending"

    func send(_ wakeup: Wakeup, ttl: Duration) async -> ProviderAnswer {
        let accessToken: String
        do {
            accessToken = try await tokens.current()
        } catch let error as FCMAccessTokens.Failure {
            switch error {
            case .retry(let reason): return .retry(after: nil, reason: reason)
            case .refused(let reason): return .failed(reason: reason)
            }
        } catch {
            return .retry(after: nil, reason: "token endpoint: \(error)")
        }
        var data: [String: String] = ["v": "1", "kind": wakeup.job.kind.rawValue]
        var android: [String: Any] = ["priority": "HIGH", "ttl": "\(ttl.components.seconds)s"]
        switch wakeup.job.kind {
        case .message:
            android["collapse_key"] = Self.collapseKey
        case .call:
            data["callId"] = wakeup.job.id
        }
        let message: [String: Any] = ["message": ["token": wakeup.token, "data": data, "android": android]]
        guard let body = try? JSONSerialization.data(withJSONObject: message, options: [.sortedKeys]) else {
            return .failed(reason: "cannot encode the message")
        }
        let project = settings.serviceAccount.projectID.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? ""
        var request = HTTPClientRequest(url: "\(settings.baseURL)/v1/projects/\(project)/messages:send")
        request.method = .POST
        request.headers.add(name: "authorization", value: "Bearer \(accessToken)")
        request.headers.add(name: "content-type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: body))
        return await ProviderHTTP.exchange(request, on: client, timeout: timeout) { answer(status: $0, headers: $1, body: $2) }
    }

    /// Reads FCM's answer: 200, or a status with a Google API error whose details may
    /// name an FCM error code.
    func answer(status: UInt, headers: HTTPHeaders, body: ByteBuffer) -> ProviderAnswer {
        if status == 200 { return .delivered }
        let error = (try? JSONDecoder().decode(GoogleError.self, from: Data(body.readableBytesView)))?.error
        let code = error?.details?.compactMap(\.errorCode).first ?? error?.status ?? "status \(status)"
        let message = error?.message ?? ""
        switch (status, code) {
        case (_, "UNREGISTERED"), (_, "SENDER_ID_MISMATCH"):
            return .deadToken(reason: code)
        case (400, "INVALID_ARGUMENT") where message.lowercased().contains("token"):
            return .deadToken(reason: "INVALID_ARGUMENT: \(message)")
        case (401, _):
            tokens.invalidate()
            return .retry(after: nil, reason: code)
        case (429, _), (500...599, _):
            return .retry(after: ProviderHTTP.retryAfter(headers), reason: code)
        default:
            return .failed(reason: "\(status) \(code) \(message)")
        }
    }

    struct GoogleError: Decodable {
        var error: Body

        struct Body: Decodable {
            var code: Int?
            var message: String?
            var status: String?
            var details: [Detail]?
        }

        struct Detail: Decodable {
            var errorCode: String?
        }
    }
}

/// OAuth2 access tokens for FCM from a service account (the JWT bearer grant, RFC 7523).
final class FCMAccessTokens: Sendable {
    static let scope = "https://www.googleapis.com/auth/firebase.messaging"
    private let account: PushSenderSettings.ServiceAccount
    private let client: HTTPClient
    private let keys = JWTKeyCollection()
    private let key: Insecure.RSA.PrivateKey
    private let cached = Mutex<(token: String, renewAt: ContinuousClock.Instant)?>(nil)

    enum Failure: Error {
        /// The token endpoint failed in a way that may pass (5xx, 429, a connection).
        case retry(String)
        /// It refused the assertion (a revoked key, a wrong account).
        case refused(String)
    }

    init(account: PushSenderSettings.ServiceAccount, client: HTTPClient) throws {
        self.account = account
        self.client = client
        key = try Insecure.RSA.PrivateKey(pem: account.privateKeyPEM)
    }

    struct Assertion: JWTPayload {
        var iss: IssuerClaim
        var scope: String
        var aud: AudienceClaim
        var iat: IssuedAtClaim
        var exp: ExpirationClaim

        func verify(using algorithm: some JWTAlgorithm) throws {}
    }

    struct Grant: Decodable {
        var access_token: String
        var expires_in: Int?
    }

    func current() async throws -> String {
        if let cached = cached.withLock({ $0 }), ContinuousClock.now < cached.renewAt {
            return cached.token
        }
        await keys.add(rsa: key, digestAlgorithm: .sha256)
        let now = Date()
        let assertion = try await keys.sign(Assertion(
            iss: IssuerClaim(value: account.clientEmail), scope: Self.scope, aud: AudienceClaim(value: account.tokenURI),
            iat: IssuedAtClaim(value: now), exp: ExpirationClaim(value: now.addingTimeInterval(3600))
        ))
        var request = HTTPClientRequest(url: account.tokenURI)
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/x-www-form-urlencoded")
        request.body = .bytes(ByteBuffer(string: "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=\(assertion)"))
        let response: HTTPClientResponse
        let body: ByteBuffer
        do {
            response = try await client.execute(request, timeout: .seconds(30))
            body = try await response.body.collect(upTo: 64 * 1024)
        } catch {
            throw Failure.retry("token endpoint: \(error)")
        }
        switch response.status.code {
        case 200:
            guard let grant = try? JSONDecoder().decode(Grant.self, from: Data(body.readableBytesView)), !grant.access_token.isEmpty else {
                throw Failure.retry("token endpoint: no access_token in its answer")
            }
            let lifetime = max(60, min(grant.expires_in ?? 3600, 86_400))
            cached.withLock { $0 = (grant.access_token, ContinuousClock.now + .seconds(lifetime - min(300, lifetime / 2))) }
            return grant.access_token
        case 429, 500...599:
            throw Failure.retry("token endpoint: status \(response.status.code)")
        default:
            throw Failure.refused("token endpoint refused the service account: status \(response.status.code)")
        }
    }

    func invalidate() {
        cached.withLock { $0 = nil }
    }
}

extension FCMProvider: RedactedDescription {}
extension FCMAccessTokens: RedactedDescription {}
