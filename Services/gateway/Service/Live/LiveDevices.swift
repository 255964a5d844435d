import Crypto
import Foundation
import WhisperShared

/// Listener devices for live text. A browser (or an app listening without an identity)
/// is given a device ID by the server, kept in a long-lived cookie: the ID and a MAC of
/// it under a key every gateway derives from the internal token, so any gateway can
/// check a cookie and none has to store one. Changing the internal token makes every
/// device new (their Whisperers let them in again).
struct LiveDevices: Sendable {
    static let cookieName = "whisper_live_device"
    /// 400 days, the longest browsers keep a cookie.
    static let maxAgeSeconds = 400 * 86_400
    private let key: SymmetricKey

    init(internalToken: String) {
        key = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: Array(internalToken.utf8)),
            info: Array("whisper live listener device cookie v1".utf8), outputByteCount: 32
        )
    }

    /// A new device: its ID and the cookie value that proves it.
    func issue() -> (deviceId: String, cookie: String) {
        let id = RandomID.uuid()
        return (id, "\(id).\(mac(id))")
    }

    /// The device a cookie value proves, or nil.
    func device(fromCookie value: Substring) -> String? {
        guard let dot = value.firstIndex(of: "."), value.utf8.count < 200 else { return nil }
        let id = String(value[..<dot])
        let presented = value[value.index(after: dot)...]
        guard Format.isUUID(id), constantTimeEqual(Array(presented.utf8), Array(mac(id).utf8)) else { return nil }
        return id
    }

    /// The device of a request's `Cookie` header(s), or nil.
    func device(fromCookieHeaders headers: [String]) -> String? {
        for header in headers.prefix(8) {
            for pair in header.split(separator: ";").prefix(64) {
                let trimmed = pair.drop { $0 == " " }
                guard trimmed.hasPrefix(Self.cookieName + "=") else { continue }
                if let device = device(fromCookie: trimmed.dropFirst(Self.cookieName.count + 1)) { return device }
            }
        }
        return nil
    }

    /// The `Set-Cookie` value that gives a browser its device. `secure` when the page
    /// was asked for over HTTPS (the edge says so in `X-Forwarded-Proto`).
    func setCookie(_ value: String, secure: Bool) -> String {
        "\(Self.cookieName)=\(value); Max-Age=\(Self.maxAgeSeconds); Path=/; HttpOnly; SameSite=Strict" + (secure ? "; Secure" : "")
    }

    private func mac(_ id: String) -> String {
        let code = HMAC<SHA256>.authenticationCode(for: Array(id.utf8), using: key)
        return Data(code).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    private func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }
}
