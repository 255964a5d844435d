import Crypto
import Foundation
import WhisperShared

/// Listener devices for live text: a device ID and its MAC under a key derived from the
/// internal token, in a long-lived cookie, so any gateway checks it and none stores it.
/// During a token rotation the previous key's cookies are accepted and reissued.
struct LiveDevices: Sendable {
    static let cookieName = "whisper_live_device"
    /// 400 days, the longest browsers keep a cookie.
    static let maxAgeSeconds = 400 * 86_400
    private let key: SymmetricKey
    private let previousKey: SymmetricKey?

    init(internalToken: String, previousToken: String? = nil) {
        key = Self.derive(internalToken)
        previousKey = previousToken.map(Self.derive)
    }

    private static func derive(_ token: String) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: Array(token.utf8)),
            info: Array("whisper live listener device cookie v1".utf8), outputByteCount: 32
        )
    }

    /// A new device (or `id` again, under the current key): its ID and the cookie value that proves it.
    func issue(_ id: String = RandomID.uuid()) -> (deviceId: String, cookie: String) {
        (id, "\(id).\(mac(id, key))")
    }

    /// The device a cookie value proves, and whether it was made under the current key; nil when it proves none.
    func device(fromCookie value: Substring) -> (id: String, current: Bool)? {
        guard let dot = value.firstIndex(of: "."), value.utf8.count < 200 else { return nil }
        let id = String(value[..<dot])
        let presented = Array(value[value.index(after: dot)...].utf8)
        guard Format.isUUID(id) else { return nil }
        if constantTimeEqual(presented, Array(mac(id, key).utf8)) { return (id, true) }
        if let previousKey, constantTimeEqual(presented, Array(mac(id, previousKey).utf8)) { return (id, false) }
        return nil
    }

    /// The device of a request's `Cookie` header(s), or nil.
    func device(fromCookieHeaders headers: [String]) -> (id: String, current: Bool)? {
        for header in headers.prefix(8) {
            for pair in header.split(separator: ";").prefix(64) {
                let trimmed = pair.drop { $0 == " " }
                guard trimmed.hasPrefix(Self.cookieName + "=") else { continue }
                if let device = device(fromCookie: trimmed.dropFirst(Self.cookieName.count + 1)) { return device }
            }
        }
        return nil
    }

    /// The device of a WebSocket upgrade: its cookie counts only from the gateway's own
    /// pages. `SameSite=Strict` still sends the cookie with an upgrade from a page of a
    /// sibling host (same site, another origin), and a browser always names the page in
    /// `Origin` (`http(s)://host[:port]`, or `null`), so a web page's upgrade must come
    /// from the host it was sent to (`Host`, which the edge passes on); ports aside, as
    /// cookies know no ports. Clients that are not browsers send no `Origin` or a
    /// `ws(s)://` one, and act for nobody but themselves. From another page the socket is
    /// admitted without a device: a web client the operator allows
    /// (`GATEWAY_ALLOWED_ORIGINS`) still connects, but cannot listen as the browser's device.
    /// An upgrade that names several origins must come from the host in each.
    func device(ofUpgrade origins: [String], host: String?, cookieHeaders: [String]) -> String? {
        if origins.contains(where: { Self.isWebPage($0) && !Self.names(origin: $0, host: host) }) { return nil }
        return device(fromCookieHeaders: cookieHeaders)?.id
    }

    static func isWebPage(_ origin: String) -> Bool {
        let lowered = origin.lowercased()
        return !(lowered.hasPrefix("ws://") || lowered.hasPrefix("wss://"))
    }

    /// Whether `origin` (`scheme://host[:port]`) is a page of `host` (`host[:port]`).
    static func names(origin: String, host: String?) -> Bool {
        guard let host, let separator = origin.range(of: "://") else { return false }
        func name(_ authority: Substring) -> Substring {
            if authority.hasPrefix("["), let end = authority.firstIndex(of: "]") { return authority[...end] }
            return authority.prefix { $0 != ":" }
        }
        let named = name(origin[separator.upperBound...])
        return !named.isEmpty && named.lowercased() == name(Substring(host)).lowercased()
    }

    /// The `Set-Cookie` value that gives a browser its device. `secure` when the page
    /// was asked for over HTTPS (`isHTTPS`).
    func setCookie(_ value: String, secure: Bool) -> String {
        "\(Self.cookieName)=\(value); Max-Age=\(Self.maxAgeSeconds); Path=/; HttpOnly; SameSite=Strict" + (secure ? "; Secure" : "")
    }

    private func mac(_ id: String, _ key: SymmetricKey) -> String {
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
