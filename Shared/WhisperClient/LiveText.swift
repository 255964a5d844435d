import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import WhisperProtocol

// Live text (docs/protocol.md section 13): the pieces both sides share. The server
// relays these packets sealed; their meaning is between the Whisperer's and the
// listeners' clients.

/// A listener device: the server's device ID for an app or terminal that listens
/// without an identity, and the cookie that proves it (keep both; present the cookie
/// with every socket: `WhisperConnection(url:listenerDevice:)`).
public struct ListenerDevice: Codable, Sendable, Equatable {
    public static let cookieName = "whisper_live_device"
    public var deviceId: String
    public var cookie: String

    public init(deviceId: String, cookie: String) {
        self.deviceId = deviceId
        self.cookie = cookie
    }

    /// Asks the gateway behind `websocketURL` (`ws://host/ws`) for a new device (`POST /live/devices`).
    public static func issue(websocketURL: String, http: HTTPClient = .shared) async throws -> ListenerDevice {
        var request = HTTPClientRequest(url: origin(ofWebSocket: websocketURL) + "/live/devices")
        request.method = .POST
        let response = try await http.execute(request, timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 4_096)
        guard response.status == .created else {
            throw WhisperAPIError.refused(status: Int(response.status.code), code: nil, message: String(decoding: body.readableBytesView, as: UTF8.self))
        }
        return try JSONDecoder().decode(ListenerDevice.self, from: Data(body.readableBytesView))
    }

    /// The HTTP origin of a gateway's WebSocket URL: `wss://host/ws` → `https://host`.
    /// The listener page is `<origin>/listen/<conversation ID>`.
    public static func origin(ofWebSocket url: String) -> String {
        var base = url
        if base.hasPrefix("wss://") { base = "https://" + base.dropFirst(6) } else if base.hasPrefix("ws://") { base = "http://" + base.dropFirst(5) }
        if base.hasSuffix("/ws") { base = String(base.dropLast(3)) }
        return base
    }
}

/// One packet: `offset|data`. Offsets of 0 or more are text (the live text past
/// `offset` Unicode scalars is replaced by `data`); below 0, `LiveControl`.
public struct LiveTextPacket: Sendable, Equatable {
    public var offset: Int
    public var data: String

    public init(offset: Int, data: String) {
        self.offset = offset
        self.data = data
    }

    public init(_ control: LiveControl, _ data: String = "") {
        self.init(offset: control.rawValue, data: data)
    }

    public init?(parsing text: String) {
        guard let bar = text.firstIndex(of: "|"), let offset = Int(text[..<bar]) else { return nil }
        self.init(offset: offset, data: String(text[text.index(after: bar)...]))
    }

    public var text: String { "\(offset)|\(data)" }

    /// The packet that turns `old` live text into `new`: what follows their common start.
    public static func change(from old: String, to new: String) -> LiveTextPacket {
        let before = Array(old.unicodeScalars), after = Array(new.unicodeScalars)
        var common = 0
        while common < before.count, common < after.count, before[common] == after[common] { common += 1 }
        var rest = String.UnicodeScalarView()
        rest.append(contentsOf: after[common...])
        return LiveTextPacket(offset: common, data: String(rest))
    }
}

/// The control packets (offsets below 0) this project's clients use.
public enum LiveControl: Int, Sendable {
    /// Whisperer: the live text becomes a line of past text (return was pressed).
    case newline = -1
    /// Whisperer, re-read: the past text, lines joined by "\n" (the most recent that fit a packet).
    case pastText = -2
    /// Whisperer, re-read: the whole live text; incremental packets apply again after it.
    case liveText = -3
    /// Whisperer: past and live text are cleared.
    case clear = -4
    /// Listener: it saw a gap; send it everything again (`pastText`, then `liveText`).
    case rereadRequest = -5
}

/// What a listener shows: past lines and the live text, built from packets.
public struct LiveTranscript: Sendable, Equatable {
    public var past: [String] = []
    public var live = ""
    /// Set on a gap: text packets wait until the re-read's `liveText` arrives.
    public private(set) var rereading = false

    public init() {}

    /// Applies one packet; true when it showed a gap and a re-read must be asked for.
    public mutating func apply(_ packet: LiveTextPacket) -> Bool {
        switch packet.offset {
        case 0...:
            guard !rereading else { return false }
            let scalars = Array(live.unicodeScalars)
            guard packet.offset <= scalars.count else {
                rereading = true
                return true
            }
            var kept = String.UnicodeScalarView()
            kept.append(contentsOf: scalars[..<packet.offset])
            live = String(kept) + packet.data
        case LiveControl.newline.rawValue:
            past.append(live)
            live = ""
        case LiveControl.pastText.rawValue:
            past = packet.data.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
        case LiveControl.liveText.rawValue:
            live = packet.data
            rereading = false
        case LiveControl.clear.rawValue:
            past = []
            live = ""
        default:
            break
        }
        return false
    }
}

/// The cryptography of live text: a 32-byte conversation key, AES-256-GCM for packets,
/// sealed to each listener's P-256 key (ECDH with an ephemeral key, HKDF-SHA256). What
/// WebCrypto does in the browser listener, byte for byte (docs/protocol.md, "Keys").
public enum LiveCrypto {
    static let info = Array("whisper live key v1".utf8)

    public static func newConversationKey() -> SymmetricKey { SymmetricKey(size: .bits256) }

    /// The conversation key sealed to `publicKey` (base64, uncompressed P-256): the
    /// ephemeral public key, the nonce, the encrypted key and its tag (`LIVE_SEALED_KEY_BYTES`).
    public static func seal(_ key: SymmetricKey, to publicKey: String, conversationId: String, keyId: Int) throws -> String {
        guard let listenerKey = Data(base64Encoded: publicKey) else { throw LiveCryptoError.badKey }
        let listener = try P256.KeyAgreement.PublicKey(x963Representation: listenerKey)
        let ephemeral = P256.KeyAgreement.PrivateKey()
        let ephemeralPublic = ephemeral.publicKey.x963Representation
        let wrapping = try wrappingKey(ephemeral.sharedSecretFromKeyAgreement(with: listener), ephemeral: ephemeralPublic, listener: listenerKey)
        let raw = key.withUnsafeBytes { Data($0) }
        let box = try AES.GCM.seal(raw, using: wrapping, authenticating: Array("\(conversationId)|\(keyId)".utf8))
        guard let combined = box.combined else { throw LiveCryptoError.badKey }
        return (ephemeralPublic + combined).base64EncodedString()
    }

    /// Opens a sealed conversation key with the listener's private key.
    public static func open(sealed: String, with privateKey: P256.KeyAgreement.PrivateKey, conversationId: String, keyId: Int) throws -> SymmetricKey {
        guard let bytes = Data(base64Encoded: sealed), bytes.count == Limits.LIVE_SEALED_KEY_BYTES else { throw LiveCryptoError.badKey }
        let ephemeralPublic = bytes.prefix(65)
        let ephemeral = try P256.KeyAgreement.PublicKey(x963Representation: ephemeralPublic)
        let wrapping = try wrappingKey(
            privateKey.sharedSecretFromKeyAgreement(with: ephemeral), ephemeral: Data(ephemeralPublic), listener: privateKey.publicKey.x963Representation
        )
        let raw = try AES.GCM.open(AES.GCM.SealedBox(combined: bytes.dropFirst(65)), using: wrapping, authenticating: Array("\(conversationId)|\(keyId)".utf8))
        return SymmetricKey(data: raw)
    }

    private static func wrappingKey(_ secret: SharedSecret, ephemeral: Data, listener: Data) -> SymmetricKey {
        secret.hkdfDerivedSymmetricKey(using: SHA256.self, salt: ephemeral + listener, sharedInfo: info, outputByteCount: 32)
    }

    /// A packet sealed under the conversation key: nonce, ciphertext, tag (base64). The
    /// direction is authenticated, so a listener's packet cannot pass for the Whisperer's.
    public static func sealPacket(_ packet: LiveTextPacket, key: SymmetricKey, conversationId: String, keyId: Int, fromWhisperer: Bool) throws -> String {
        let box = try AES.GCM.seal(Array(packet.text.utf8), using: key, authenticating: aad(conversationId, keyId, fromWhisperer))
        guard let combined = box.combined else { throw LiveCryptoError.badPacket }
        return combined.base64EncodedString()
    }

    public static func openPacket(_ packet: String, key: SymmetricKey, conversationId: String, keyId: Int, fromWhisperer: Bool) throws -> LiveTextPacket {
        guard let bytes = Data(base64Encoded: packet) else { throw LiveCryptoError.badPacket }
        let plain = try AES.GCM.open(AES.GCM.SealedBox(combined: bytes), using: key, authenticating: aad(conversationId, keyId, fromWhisperer))
        guard let parsed = LiveTextPacket(parsing: String(decoding: plain, as: UTF8.self)) else { throw LiveCryptoError.badPacket }
        return parsed
    }

    static func aad(_ conversationId: String, _ keyId: Int, _ fromWhisperer: Bool) -> [UInt8] {
        Array("\(conversationId)|\(keyId)|\(fromWhisperer ? "w" : "l")".utf8)
    }
}

public enum LiveCryptoError: Error, Sendable {
    case badKey, badPacket, noKey
}
