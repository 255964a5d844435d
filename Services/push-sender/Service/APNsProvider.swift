import AsyncHTTPClient
import Foundation
import JWTKit
import NIOCore
import NIOHTTP1
import Synchronization
import WhisperShared

/// APNs over HTTP/2 with an ES256 JWT reused for 40 minutes (Apple wants 20 to 60). Message
/// wake-ups are contentless `alert` pushes with `mutable-content` and one collapse ID;
/// calls are `voip` pushes to `<topic>.voip` (docs/protocol.md, "Wake-ups").
struct APNsProvider: PushProvider {
    let name = "apns"
    let settings: PushSenderSettings.APNsSettings
    let client: HTTPClient
    let tokens: APNsTokenCache

    /// The longest one request may take (`PUSH_REQUEST_TIMEOUT_SECONDS`).
    let timeout: TimeAmount

    init(settings: PushSenderSettings.APNsSettings, client: HTTPClient, timeout: Duration) throws {
        self.settings = settings
        self.client = client
        self.timeout = .nanoseconds(timeout.nanoseconds)
        tokens = try APNsTokenCache(keyPEM: settings.keyPEM, keyID: settings.keyID, teamID: settings.teamID)
    }

    static let collapseID = "whisper-pending"

    func send(_ wakeup: Wakeup, ttl: Duration) async -> ProviderAnswer {
        // A token goes into the URL: only the hexadecimal form APNs hands out is sent.
        guard (1...200).contains(wakeup.token.utf8.count), wakeup.token.utf8.allSatisfy({ Self.isHex($0) }) else {
            return .deadToken(reason: "BadDeviceToken (not hexadecimal)")
        }
        let jwt: String
        do {
            jwt = try await tokens.current()
        } catch {
            return .failed(reason: "cannot sign the provider token: \(error)")
        }
        var request = HTTPClientRequest(url: "\(settings.baseURL)/3/device/\(wakeup.token)")
        request.method = .POST
        request.headers.add(name: "authorization", value: "bearer \(jwt)")
        request.headers.add(name: "apns-id", value: RandomID.uuid())
        let expiration = ttl == .zero ? 0 : Clock.millisecondsNow() / 1000 + Int64(ttl.components.seconds)
        request.headers.add(name: "apns-expiration", value: "\(expiration)")
        request.headers.add(name: "content-type", value: "application/json")
        let body: String
        switch wakeup.job.kind {
        case .message:
            request.headers.add(name: "apns-topic", value: settings.topic)
            request.headers.add(name: "apns-push-type", value: "alert")
            request.headers.add(name: "apns-priority", value: "10")
            request.headers.add(name: "apns-collapse-id", value: Self.collapseID)
            body = #"{"aps":{"alert":{"loc-key":"WHISPER_NEW_MESSAGES"},"mutable-content":1,"sound":"default"},"whisper":{"v":1,"kind":"message"}}"#
        case .call:
            request.headers.add(name: "apns-topic", value: "\(settings.topic).voip")
            request.headers.add(name: "apns-push-type", value: "voip")
            request.headers.add(name: "apns-priority", value: "10")
            body = #"{"whisper":{"v":1,"kind":"call","callId":"\#(Self.jsonSafe(wakeup.job.id))"}}"#
        }
        request.body = .bytes(ByteBuffer(string: body))
        return await ProviderHTTP.exchange(request, on: client, timeout: timeout) { answer(status: $0, headers: $1, body: $2) }
    }

    /// Reads APNs's answer: 200, or a status with `{"reason": "..."}`.
    func answer(status: UInt, headers: HTTPHeaders, body: ByteBuffer) -> ProviderAnswer {
        if status == 200 { return .delivered }
        let reason = (try? JSONDecoder().decode(APNsError.self, from: Data(body.readableBytesView)))?.reason ?? "status \(status)"
        switch status {
        case 410:
            return .deadToken(reason: reason)
        case 400 where reason == "BadDeviceToken" || reason == "DeviceTokenNotForTopic":
            return .deadToken(reason: reason)
        case 403 where reason == "ExpiredProviderToken" || reason == "InvalidProviderToken":
            // Made anew for the next attempt; a key Apple does not accept fails again
            // and ends, after the attempts, in the dead-letter stream with this reason.
            tokens.invalidate()
            return .retry(after: nil, reason: reason)
        case 429, 500...599:
            return .retry(after: ProviderHTTP.retryAfter(headers), reason: reason)
        default:
            return .failed(reason: "\(status) \(reason)")
        }
    }

    struct APNsError: Decodable {
        var reason: String
    }

    static func isHex(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x41...0x46).contains(byte) || (0x61...0x66).contains(byte)
    }

    /// A call ID is a UUID; anything else is kept to characters safe inside a JSON string.
    static func jsonSafe(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.filter { $0.isASCII && ($0 == "-" || CharacterSet.alphanumerics.contains($0)) }))
    }
}

/// The provider token of APNs: signed once, reused until it is 40 minutes old.
final class APNsTokenCache: Sendable {
    static let lifetime: Duration = .seconds(40 * 60)
    private let keys: JWTKeyCollection
    private let keyID: JWKIdentifier
    private let teamID: String
    private let cached = Mutex<(token: String, madeAt: ContinuousClock.Instant)?>(nil)

    private let key: ES256PrivateKey

    init(keyPEM: String, keyID: String, teamID: String) throws {
        key = try ES256PrivateKey(pem: keyPEM)
        self.keyID = JWKIdentifier(string: keyID)
        self.teamID = teamID
        keys = JWTKeyCollection()
    }

    struct Claims: JWTPayload {
        var iss: IssuerClaim
        var iat: IssuedAtClaim

        func verify(using algorithm: some JWTAlgorithm) throws {}
    }

    func current() async throws -> String {
        if let cached = cached.withLock({ $0 }), ContinuousClock.now - cached.madeAt < Self.lifetime {
            return cached.token
        }
        // The collection is an actor: the key goes in where it is used (a no-op after the first time).
        await keys.add(ecdsa: key, kid: keyID)
        let token = try await keys.sign(Claims(iss: IssuerClaim(value: teamID), iat: IssuedAtClaim(value: Date())), kid: keyID)
        cached.withLock { $0 = (token, ContinuousClock.now) }
        return token
    }

    func invalidate() {
        cached.withLock { $0 = nil }
    }
}

extension APNsProvider: RedactedDescription {}
extension APNsTokenCache: RedactedDescription {}
