import Foundation

/// Push-to-talk channels (docs/protocol.md section 14): audio channels whose members
/// hear whoever holds the floor. The server keeps the channels and their members, and
/// holds the floor; the audio goes between the members' devices.

/// Creates a channel; the creator is its owner and first member.
public struct PTTChannelCreateFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case name, isPublic }
    public static let frameType = ClientFrameType.pttChannelCreate
    public var name: String
    /// Whether it may be announced to people nearby (`ptt_announce`).
    public var isPublic: Bool

    public init(name: String, isPublic: Bool = false) {
        self.name = name
        self.isPublic = isPublic
    }

    public func validate() throws(FieldViolation) {
        try Checker().text(name, "name", characters: 1...Limits.MAX_PTT_CHANNEL_NAME_CHARS)
    }
}
public typealias PTTChannelCreate = Payload<PTTChannelCreateFields>

/// Joins a channel by its join code or its ID (exactly one of them).
public struct PTTChannelJoinFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case joinCode, channelId }
    public static let frameType = ClientFrameType.pttChannelJoin
    public var joinCode: String?
    public var channelId: String?

    public init(joinCode: String? = nil, channelId: String? = nil) {
        self.joinCode = joinCode
        self.channelId = channelId
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.require((joinCode == nil) != (channelId == nil), "joinCode", "exactly one of joinCode and channelId")
        if let joinCode { try check.require(PTTJoinCode.isValid(joinCode), "joinCode", "\(PTTJoinCode.length) characters of \(PTTJoinCode.alphabet)") }
        if let channelId { try check.uuid(channelId, "channelId") }
    }
}
public typealias PTTChannelJoin = Payload<PTTChannelJoinFields>

/// The owner removes a member (not itself: it deletes the channel instead).
public struct PTTChannelRemoveFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case channelId, whisperId }
    public static let frameType = ClientFrameType.pttChannelRemove
    public var channelId: String
    public var whisperId: String

    public init(channelId: String, whisperId: String) {
        self.channelId = channelId
        self.whisperId = whisperId
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.uuid(channelId, "channelId")
        try check.whisperID(whisperId, "whisperId")
    }
}
public typealias PTTChannelRemove = Payload<PTTChannelRemoveFields>



/// A member's frame that names one channel and nothing else: leave it, delete it (its
/// owner only), or give up its floor. One shape, three frame types (`Marker`).
public struct PTTChannelActionFields<Marker: PTTChannelActionFrame>: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case channelId }
    public static var frameType: ClientFrameType { Marker.frameType }
    public var channelId: String

    public init(channelId: String) {
        self.channelId = channelId
    }

    public func validate() throws(FieldViolation) { try Checker().uuid(channelId, "channelId") }
}
public typealias PTTChannelAction<Marker: PTTChannelActionFrame> = Payload<PTTChannelActionFields<Marker>>

public protocol PTTChannelActionFrame: FrameMarker {}
public enum PTTChannelLeaveFrame: PTTChannelActionFrame { public static let frameType = ClientFrameType.pttChannelLeave }
public enum PTTChannelDeleteFrame: PTTChannelActionFrame { public static let frameType = ClientFrameType.pttChannelDelete }
public enum PTTTalkReleaseFrame: PTTChannelActionFrame { public static let frameType = ClientFrameType.pttTalkRelease }
public typealias PTTChannelLeave = PTTChannelAction<PTTChannelLeaveFrame>
public typealias PTTChannelDelete = PTTChannelAction<PTTChannelDeleteFrame>
/// The owner draws a new join code; the old one joins nobody from then on.
public enum PTTChannelRotateCodeFrame: PTTChannelActionFrame { public static let frameType = ClientFrameType.pttChannelRotateCode }
public typealias PTTChannelRotateCode = PTTChannelAction<PTTChannelRotateCodeFrame>
public typealias PTTTalkRelease = PTTChannelAction<PTTTalkReleaseFrame>

/// The channels the session's identity is a member of.
public enum PTTChannelsListFrame: FrameMarker { public static let frameType = ClientFrameType.pttChannelsList }
public typealias PTTChannelsList = Payload<NoFields<PTTChannelsListFrame>>

/// Asks for the floor: granted when it is free; otherwise refused, or queued (`queue`).
public struct PTTTalkRequestFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case channelId, queue }
    public static let frameType = ClientFrameType.pttTalkRequest
    public var channelId: String
    public var queue: Bool

    public init(channelId: String, queue: Bool = false) {
        self.channelId = channelId
        self.queue = queue
    }

    public func validate() throws(FieldViolation) { try Checker().uuid(channelId, "channelId") }
}
public typealias PTTTalkRequest = Payload<PTTTalkRequestFields>


/// One channel as its members see it: the answer to create and join, an item of `ptt_channels`.
public struct PTTChannel: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.pttChannel
    public var channelId: String
    public var name: String
    public var joinCode: String
    public var ownerId: String
    public var isPublic: Bool
    public var members: [String]
    public var createdAt: Int64

    public init(channelId: String, name: String, joinCode: String, ownerId: String, isPublic: Bool, members: [String], createdAt: Int64) {
        self.channelId = channelId
        self.name = name
        self.joinCode = joinCode
        self.ownerId = ownerId
        self.isPublic = isPublic
        self.members = members
        self.createdAt = createdAt
    }
}

public struct PTTChannels: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.pttChannels
    public var channels: [PTTChannel]

    public init(channels: [PTTChannel]) { self.channels = channels }
}

/// A member joined, left or was removed by the owner (to every member, the removed one
/// too), or the channel was deleted (`deleted`; to every member); the answer to
/// `ptt_channel_leave`, `ptt_channel_remove` and `ptt_channel_delete`.
public struct PTTMembership: ServerPayload, Equatable {
    public enum Change: String, Codable, Sendable { case joined, left, removed, deleted }
    public static let frameType = ServerFrameType.pttMembership
    public var channelId: String
    public var whisperId: String
    public var change: Change

    public init(channelId: String, whisperId: String, change: Change) {
        self.channelId = channelId
        self.whisperId = whisperId
        self.change = change
    }
}

/// Who holds the floor, to every member whenever it changes, and the answer to
/// `ptt_talk_request` and `ptt_talk_release` (`outcome` says what became of the ask).
/// A held floor comes with the server's grant: its Ed25519 signature over
/// `PTTFloor.signedBytes` by the floor key `keyId` names (`GET /ptt/floor-key`,
/// `PTTFloorKeys`), so receivers can check whose audio to play.
public struct PTTFloor: ServerPayload, Equatable {
    public enum Outcome: String, Codable, Sendable { case granted, queued, refused, released, timeout, disconnected, changed }
    public static let frameType = ServerFrameType.pttFloor
    public var channelId: String
    public var outcome: Outcome
    /// The holder; nil when the floor is free.
    public var holder: String?
    public var grantId: String?
    /// ms since 1970: the grant holds from `notBefore` to `notAfter`.
    public var notBefore: Int64?
    public var notAfter: Int64?
    /// The floor key that signed the grant (an ID listed by `GET /ptt/floor-key`).
    public var keyId: String?
    public var signature: String?
    /// For `queued`: the place in the queue (1 first).
    public var position: Int?

    public init(
        channelId: String, outcome: Outcome, holder: String? = nil, grantId: String? = nil, notBefore: Int64? = nil, notAfter: Int64? = nil,
        keyId: String? = nil, signature: String? = nil, position: Int? = nil
    ) {
        self.channelId = channelId
        self.outcome = outcome
        self.holder = holder
        self.grantId = grantId
        self.notBefore = notBefore
        self.notAfter = notAfter
        self.keyId = keyId
        self.signature = signature
        self.position = position
    }

    /// What the grant's signature covers: `whisper-ptt-floor-v1|channelId|holder|grantId|notBefore|notAfter`.
    public static func signedBytes(channelId: String, holder: String, grantId: String, notBefore: Int64, notAfter: Int64) -> [UInt8] {
        Array("whisper-ptt-floor-v1|\(channelId)|\(holder)|\(grantId)|\(notBefore)|\(notAfter)".utf8)
    }

    /// True when the grant is signed by the key of `floorKeys` its `keyId` names and
    /// `holder` may be heard at `time` (ms). A key ID not listed is not valid: fetch the
    /// keys again (a rotation may have added it) and check once more.
    public func isValidGrant(floorKeys: PTTFloorKeys, at time: Int64) -> Bool {
        guard let holder, let grantId, let notBefore, let notAfter, let keyId, let floorKey = floorKeys.publicKey(keyId),
              let signature, let bytes = Data(base64Encoded: signature).map(Array.init) else { return false }
        return notBefore <= time && time < notAfter && Ed25519.verify(
            signature: bytes, message: Self.signedBytes(channelId: channelId, holder: holder, grantId: grantId, notBefore: notBefore, notAfter: notAfter),
            publicKey: floorKey
        )
    }
}

/// The answer of `GET /ptt/floor-key`: the keys floor grants may be signed with, the one
/// gateways sign with first. An operator rotates them without a gap (docs/operations.md,
/// "Rotating secrets"), so a grant names its key by `keyId`.
public struct PTTFloorKeys: Codable, Equatable, Sendable {
    public typealias Key = ListedKey

    public var keys: [Key]

    public init(keys: [Key]) {
        self.keys = keys
    }

    /// The public key listed under `keyId`, or nil.
    public func publicKey(_ keyId: String) -> [UInt8]? {
        keys.publicKey(keyId)
    }
}

// MARK: - Nearby

/// The owner keeps a public channel announced in a cell (send it every 10 s; it
/// lapses 30 s after the last), or stops (no `cell`).
public struct PTTAnnounceFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case channelId, cell }
    public static let frameType = ClientFrameType.pttAnnounce
    public var channelId: String
    public var cell: String?

    public init(channelId: String, cell: String?) {
        self.channelId = channelId
        self.cell = cell
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.uuid(channelId, "channelId")
        if let cell { try check.require(Geohash.isCell(cell), "cell", "a geohash of \(Geohash.nearbyPrecision) characters") }
    }
}
public typealias PTTAnnounce = Payload<PTTAnnounceFields>

/// The public channels announced in a cell and the eight around it.
public struct PTTNearbyFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case cell }
    public static let frameType = ClientFrameType.pttNearby
    public var cell: String

    public init(cell: String) {
        self.cell = cell
    }

    public func validate() throws(FieldViolation) {
        try Checker().require(Geohash.isCell(cell), "cell", "a geohash of \(Geohash.nearbyPrecision) characters")
    }
}
public typealias PTTNearby = Payload<PTTNearbyFields>

/// The answer to `ptt_announce`: announced until `until` (ms), or no longer (nil).
public struct PTTAnnounced: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.pttAnnounced
    public var channelId: String
    public var until: Int64?

    public init(channelId: String, until: Int64?) {
        self.channelId = channelId
        self.until = until
    }
}

/// The answer to `ptt_nearby`.
public struct PTTNearbyChannels: ServerPayload, Equatable {
    public struct Channel: Codable, Sendable, Equatable {
        public var channelId: String
        public var name: String
        public var joinCode: String
        public var memberCount: Int

        public init(channelId: String, name: String, joinCode: String, memberCount: Int) {
            self.channelId = channelId
            self.name = name
            self.joinCode = joinCode
            self.memberCount = memberCount
        }
    }

    public static let frameType = ServerFrameType.pttNearbyChannels
    public var channels: [Channel]

    public init(channels: [Channel]) { self.channels = channels }
}

// MARK: - Media signaling

/// A WebRTC offer, answer or ICE candidate for one member of a channel, sealed to it
/// (as call signaling is: `crypto_box` to its key) and signed by the sender over
/// `PTTSignal.signedBytes`. The server checks both are members and the signature, and
/// hands it to the recipient's socket; it keeps nothing.
public struct PTTSignalFields: SessionFields, Equatable {
    public enum Kind: String, Codable, Sendable { case offer, answer, candidate }
    public enum CodingKeys: String, CodingKey, CaseIterable {
        case channelId, signalId, from, to, kind, timestamp, nonce, ciphertext, sig
    }
    public static let frameType = ClientFrameType.pttSignal
    public var channelId: String
    public var signalId: String
    public var from: String
    public var to: String
    public var kind: Kind
    public var timestamp: Int64
    public var nonce: String
    public var ciphertext: String
    public var sig: String

    public init(
        channelId: String, signalId: String, from: String, to: String,
        kind: Kind, timestamp: Int64, nonce: String, ciphertext: String, sig: String
    ) {
        self.channelId = channelId
        self.signalId = signalId
        self.from = from
        self.to = to
        self.kind = kind
        self.timestamp = timestamp
        self.nonce = nonce
        self.ciphertext = ciphertext
        self.sig = sig
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.uuid(channelId, "channelId")
        try check.uuid(signalId, "signalId")
        try check.whisperID(from, "from")
        try check.whisperID(to, "to")
        try check.timestamp(timestamp, "timestamp")
        try check.base64(nonce, "nonce", bytes: 24)
        try check.base64(ciphertext, "ciphertext")
        try check.require(
            Format.decodedLength(ofBase64: ciphertext) <= Limits.MAX_CALL_SIGNAL_BYTES, "ciphertext", "must hold at most \(Limits.MAX_CALL_SIGNAL_BYTES) bytes"
        )
        try check.base64(sig, "sig", bytes: 64)
    }

    /// What `sig` covers: the canonical bytes of docs/protocol.md section 11 with type `ptt_<kind>`,
    /// messageId the signalId, and `<channelId>:<to>` in the recipient's place.
    public static func signedBytes(channelId: String, signalId: String, from: String, to: String, kind: Kind, timestamp: Int64, nonce: String, ciphertext: String) -> [UInt8] {
        CanonicalSigning.bytes(
            messageType: "ptt_\(kind.rawValue)", messageId: signalId, from: from, toOrGroupId: "\(channelId):\(to)", timestamp: timestamp, nonce: nonce,
            ciphertext: ciphertext
        )
    }

    public var signedBytes: [UInt8] {
        Self.signedBytes(channelId: channelId, signalId: signalId, from: from, to: to, kind: kind, timestamp: timestamp, nonce: nonce, ciphertext: ciphertext)
    }
}
public typealias PTTSignal = Payload<PTTSignalFields>

/// A member's signal, as its recipient gets it.
public struct PTTSignalReceived: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.pttSignalReceived
    public var channelId: String
    public var signalId: String
    public var from: String
    public var to: String
    public var kind: PTTSignalFields.Kind
    public var timestamp: Int64
    public var nonce: String
    public var ciphertext: String
    public var sig: String

    public init(_ signal: PTTSignal) {
        channelId = signal.channelId
        signalId = signal.signalId
        from = signal.from
        to = signal.to
        kind = signal.kind
        timestamp = signal.timestamp
        nonce = signal.nonce
        ciphertext = signal.ciphertext
        sig = signal.sig
    }

    public var signedBytes: [UInt8] {
        PTTSignalFields.signedBytes(channelId: channelId, signalId: signalId, from: from, to: to, kind: kind, timestamp: timestamp, nonce: nonce, ciphertext: ciphertext)
    }
}
