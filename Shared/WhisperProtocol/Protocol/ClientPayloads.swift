/// A payload a client sends: `Payload<Fields>` for every frame but `ping`. Each one
/// decodes strictly: keys not in `fieldNames` are refused, and `validate()` applies the
/// rules of its schema in docs/schemas/ that `Codable`'s types alone cannot express.
public protocol ClientPayload: Codable, Sendable {
    /// The frame `type` this payload travels under.
    static var frameType: ClientFrameType { get }
    /// Whether the payload carries a session token: its frame acts for a signed-in identity.
    static var carriesSession: Bool { get }
    /// Every key the payload may carry.
    static var fieldNames: [String] { get }
    func validate() throws(FieldViolation)
    /// The session token a privileged payload carries, nil for the others. A
    /// requirement, so reading it from `any ClientPayload` goes through the witness
    /// table, not a cast per frame.
    var presentedSessionToken: String? { get }
}

public enum Platform: String, Codable, Sendable, CaseIterable {
    case ios
    case android
}

public enum MessageType: String, Codable, Sendable, CaseIterable {
    case text
    case image
    case voice
    case file
    case system
}

public enum ReceiptStatus: String, Codable, Sendable, CaseIterable {
    case delivered
    case read
}

public enum CallMedia: String, Codable, Sendable, CaseIterable {
    case audio
    case video
}

public enum CallEndReason: String, Codable, Sendable, CaseIterable {
    case hangup
    case declined
    case busy
    case timeout
    case failed
}

public enum ReportReason: String, Codable, Sendable, CaseIterable {
    case spam
    case abuse
    case impersonation
    case illegal
    case other
}

/// A secretbox'd file key boxed to the recipient (docs/protocol.md section 12, "Attachments").
public struct FileKeyBox: Codable, Sendable, Equatable {
    public var nonce: String
    public var ciphertext: String

    public init(nonce: String, ciphertext: String) {
        self.nonce = nonce
        self.ciphertext = ciphertext
    }

    private enum CodingKeys: String, CodingKey, CaseIterable { case nonce, ciphertext }

    public init(from decoder: any Decoder) throws {
        try rejectUnknownKeys(decoder, CodingKeys.self, in: "attachment.fileKeyBox")
        let container = try decoder.container(keyedBy: CodingKeys.self)
        nonce = try container.decode(String.self, forKey: .nonce)
        ciphertext = try container.decode(String.self, forKey: .ciphertext)
    }
}

/// Nested objects of client frames are as strict as the payload itself.
func rejectUnknownKeys<K: CodingKey & CaseIterable & RawRepresentable<String>>(
    _ decoder: any Decoder, _ keys: K.Type, in field: String
) throws {
    let container = try decoder.container(keyedBy: AnyCodingKey.self)
    let allowed = Set(K.allCases.map(\.rawValue))
    if let extra = container.allKeys.first(where: { !allowed.contains($0.stringValue) }) {
        throw FieldViolation("\(field).\(extra.stringValue)", "is not an allowed field")
    }
}

/// The pointer to an encrypted blob in object storage (docs/protocol.md section 12, "Attachments").
public struct AttachmentPointer: Codable, Sendable, Equatable {
    public var objectKey: String
    public var contentType: String
    public var ciphertextSize: Int64
    public var fileNonce: String
    public var fileKeyBox: FileKeyBox

    public init(objectKey: String, contentType: String, ciphertextSize: Int64, fileNonce: String, fileKeyBox: FileKeyBox) {
        self.objectKey = objectKey
        self.contentType = contentType
        self.ciphertextSize = ciphertextSize
        self.fileNonce = fileNonce
        self.fileKeyBox = fileKeyBox
    }

    private enum CodingKeys: String, CodingKey, CaseIterable { case objectKey, contentType, ciphertextSize, fileNonce, fileKeyBox }

    public init(from decoder: any Decoder) throws {
        try rejectUnknownKeys(decoder, CodingKeys.self, in: "attachment")
        let container = try decoder.container(keyedBy: CodingKeys.self)
        objectKey = try container.decode(String.self, forKey: .objectKey)
        contentType = try container.decode(String.self, forKey: .contentType)
        ciphertextSize = try container.decode(Int64.self, forKey: .ciphertextSize)
        fileNonce = try container.decode(String.self, forKey: .fileNonce)
        fileKeyBox = try container.decode(FileKeyBox.self, forKey: .fileKeyBox)
    }

    func validate(_ check: Checker) throws(FieldViolation) {
        try check.require(Format.isObjectKey(objectKey), "attachment.objectKey", "must be an object key issued by /attachments/presign")
        try check.require(Format.isContentType(contentType), "attachment.contentType", "must be a MIME type")
        try check.require(ciphertextSize >= 1 && ciphertextSize <= Int64(Limits.MAX_FILE_BYTES), "attachment.ciphertextSize", "must be 1 to \(Limits.MAX_FILE_BYTES)")
        try check.base64(fileNonce, "attachment.fileNonce", bytes: 24)
        try check.base64(fileKeyBox.nonce, "attachment.fileKeyBox.nonce", bytes: 24)
        // A boxed 32-byte key is 48 bytes: the key and the 16-byte tag.
        try check.base64(fileKeyBox.ciphertext, "attachment.fileKeyBox.ciphertext", bytes: 48)
    }
}

extension Format {
    /// `^att/[0-9]{4}/[0-9]{2}/<uuid>\.bin$`, the shape attachment-signer issues.
    public static func isObjectKey(_ value: String) -> Bool {
        let bytes = Array(value.utf8)
        guard bytes.count == 4 + 5 + 3 + 36 + 4, value.hasPrefix("att/"), value.hasSuffix(".bin") else { return false }
        let digits = { (range: Range<Int>) in bytes[range].allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) } }
        guard digits(4..<8), bytes[8] == UInt8(ascii: "/"), digits(9..<11), bytes[11] == UInt8(ascii: "/") else { return false }
        return isUUID(String(decoding: bytes[12..<48], as: UTF8.self))
    }

    /// `^[a-z0-9][a-z0-9.+-]*/[a-z0-9][a-z0-9.+-]*$`, at most 127 characters.
    public static func isContentType(_ value: String) -> Bool {
        let bytes = Array(value.utf8)
        guard bytes.count <= 127, let slash = bytes.firstIndex(of: UInt8(ascii: "/")) else { return false }
        func part(_ slice: ArraySlice<UInt8>) -> Bool {
            guard let first = slice.first, isLowerAlnum(first) else { return false }
            return slice.allSatisfy { isLowerAlnum($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "+") || $0 == UInt8(ascii: "-") }
        }
        return part(bytes[..<slash]) && part(bytes[(slash + 1)...])
    }

    static func isLowerAlnum(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }

    /// A position in a pending queue, as the server hands it out (`nextCursor`): the
    /// Redis stream entry ID `<ms>-<seq>`, each part a decimal of at most 20 digits
    /// that fits in 64 bits unsigned, and not the greatest ID of all (no entry can
    /// follow it, and Redis refuses a range that starts after it). Checked here so that
    /// no cursor reaches Redis that Redis would refuse.
    public static func isCursor(_ value: String) -> Bool {
        guard let position = cursorPosition(value) else { return false }
        return !(position.ms == UInt64.max && position.seq == UInt64.max)
    }

    /// A cursor's two numbers, which order cursors as the queue orders its messages; nil
    /// for text that is no cursor.
    public static func cursorPosition(_ value: String) -> (ms: UInt64, seq: UInt64)? {
        let parts = value.utf8.split(separator: UInt8(ascii: "-"), omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        var numbers: [UInt64] = []
        for part in parts {
            guard (1...20).contains(part.count), part.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
                  let number = UInt64(String(decoding: part, as: UTF8.self)) else { return nil }
            numbers.append(number)
        }
        return (numbers[0], numbers[1])
    }

    /// Whether `next` lies after `previous` (nil: the queue's start) in the queue: what a
    /// walk of its pages must see at every step, else it is not followed.
    public static func isCursor(_ next: String, after previous: String?) -> Bool {
        guard isCursor(next), let position = cursorPosition(next) else { return false }
        guard let previous else { return true }
        guard let before = cursorPosition(previous) else { return false }
        return (position.ms, position.seq) > (before.ms, before.seq)
    }
}

// MARK: - Identity and sessions

public struct RegisterBeginFields: DeviceFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case whisperId, deviceId, platform }
    public static let frameType = ClientFrameType.registerBegin
    public var whisperId: String?
    public var deviceId: String
    public var platform: Platform

    public init(whisperId: String? = nil, deviceId: String, platform: Platform) {
        self.whisperId = whisperId
        self.deviceId = deviceId
        self.platform = platform
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        if let whisperId { try check.whisperID(whisperId, "whisperId") }
        try check.uuid(deviceId, "deviceId")
    }
}
public typealias RegisterBegin = Payload<RegisterBeginFields>

public struct RegisterProofFields: DeviceFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable {
        case challengeId, deviceId, platform, whisperId
        case encPublicKey, signPublicKey, signature, pushToken, voipToken
    }
    public static let frameType = ClientFrameType.registerProof
    public var challengeId: String
    public var deviceId: String
    public var platform: Platform
    public var whisperId: String?
    public var encPublicKey: String
    public var signPublicKey: String
    public var signature: String
    public var pushToken: String?
    public var voipToken: String?

    public init(
        challengeId: String, deviceId: String, platform: Platform,
        whisperId: String? = nil, encPublicKey: String, signPublicKey: String, signature: String,
        pushToken: String? = nil, voipToken: String? = nil
    ) {
        self.challengeId = challengeId
        self.deviceId = deviceId
        self.platform = platform
        self.whisperId = whisperId
        self.encPublicKey = encPublicKey
        self.signPublicKey = signPublicKey
        self.signature = signature
        self.pushToken = pushToken
        self.voipToken = voipToken
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.uuid(challengeId, "challengeId")
        try check.uuid(deviceId, "deviceId")
        if let whisperId { try check.whisperID(whisperId, "whisperId") }
        try check.base64(encPublicKey, "encPublicKey", bytes: 32)
        try check.base64(signPublicKey, "signPublicKey", bytes: 32)
        try check.base64(signature, "signature", bytes: 64)
        try check.pushToken(pushToken, "pushToken")
        try check.pushToken(voipToken, "voipToken")
    }
}
public typealias RegisterProof = Payload<RegisterProofFields>

public enum SessionRefreshFrame: FrameMarker { public static let frameType = ClientFrameType.sessionRefresh }
public enum LogoutFrame: FrameMarker { public static let frameType = ClientFrameType.logout }
public enum GetTurnCredentialsFrame: FrameMarker { public static let frameType = ClientFrameType.getTurnCredentials }
public enum GroupInvitationsListFrame: FrameMarker { public static let frameType = ClientFrameType.groupInvitationsList }

public typealias SessionRefresh = Payload<NoFields<SessionRefreshFrame>>
public typealias Logout = Payload<NoFields<LogoutFrame>>
public typealias GetTurnCredentials = Payload<NoFields<GetTurnCredentialsFrame>>
/// Asks for the open invitations to groups (`group_invitations`).
public typealias GroupInvitationsList = Payload<NoFields<GroupInvitationsListFrame>>

public struct UpdateTokensFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case pushToken, voipToken }
    public static let frameType = ClientFrameType.updateTokens
    /// Absent: unchanged. `null`: cleared. A string: replaced.
    public var pushToken: TokenUpdate
    public var voipToken: TokenUpdate

    public init(pushToken: TokenUpdate = .unchanged, voipToken: TokenUpdate = .unchanged) {
        self.pushToken = pushToken
        self.voipToken = voipToken
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        pushToken = try TokenUpdate(container, .pushToken)
        voipToken = try TokenUpdate(container, .voipToken)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try pushToken.encode(into: &container, .pushToken)
        try voipToken.encode(into: &container, .voipToken)
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        if case .set(let token) = pushToken { try check.pushToken(token, "pushToken") }
        if case .set(let token) = voipToken { try check.pushToken(token, "voipToken") }
    }
}
public typealias UpdateTokens = Payload<UpdateTokensFields>

/// A change to a push token: left alone, cleared, or replaced.
public enum TokenUpdate: Sendable, Equatable {
    case unchanged
    case clear
    case set(String)

    init<K: CodingKey>(_ container: KeyedDecodingContainer<K>, _ key: K) throws {
        if !container.contains(key) {
            self = .unchanged
        } else if try container.decodeNil(forKey: key) {
            self = .clear
        } else {
            self = .set(try container.decode(String.self, forKey: key))
        }
    }

    func encode<K: CodingKey>(into container: inout KeyedEncodingContainer<K>, _ key: K) throws {
        switch self {
        case .unchanged: break
        case .clear: try container.encodeNil(forKey: key)
        case .set(let token): try container.encode(token, forKey: key)
        }
    }
}

/// Deletes the identity for good (docs/protocol.md section 4, "account_delete"):
/// signed with the identity's signing key, so that a session token alone, stolen or
/// leaked, cannot end an account.
public struct AccountDeleteFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case whisperId, timestamp, signature }
    public static let frameType = ClientFrameType.accountDelete
    /// The identity to delete: the session's own.
    public var whisperId: String
    /// When the client signed (ms since 1970), within ``Limits/TIMESTAMP_SKEW_MS`` of the server's clock.
    public var timestamp: Int64
    /// Ed25519 by the identity's signing key over ``signedBytes(whisperId:timestamp:)``.
    public var signature: String

    public init(whisperId: String, timestamp: Int64, signature: String) {
        self.whisperId = whisperId
        self.timestamp = timestamp
        self.signature = signature
    }

    /// What the signature covers: `whisper-account-delete-v1`, the Whisper ID and the
    /// timestamp in decimal, each followed by a newline (never 32 bytes, so never the
    /// digest a message signature covers).
    public static func signedBytes(whisperId: String, timestamp: Int64) -> [UInt8] {
        Array("whisper-account-delete-v1\n\(whisperId)\n\(timestamp)\n".utf8)
    }

    public var signedBytes: [UInt8] { Self.signedBytes(whisperId: whisperId, timestamp: timestamp) }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.whisperID(whisperId, "whisperId")
        try check.timestamp(timestamp, "timestamp")
        try check.base64(signature, "signature", bytes: 64)
    }
}
public typealias AccountDelete = Payload<AccountDeleteFields>

public struct Ping: ClientPayload, Equatable {
    public static let frameType = ClientFrameType.ping
    public static let carriesSession = false
    public static let fieldNames = ["protocolVersion", "cryptoVersion"]
    public var presentedSessionToken: String? { nil }
    public var protocolVersion: Int?
    public var cryptoVersion: Int?

    public init(protocolVersion: Int? = nil, cryptoVersion: Int? = nil) {
        self.protocolVersion = protocolVersion
        self.cryptoVersion = cryptoVersion
    }

    public func validate() throws(FieldViolation) {}
}
