/// Live text (docs/protocol.md section 13): a Whisperer's long-lived conversations, each
/// with an ID and a name, kept by the server so that listeners can be let in to them.

/// Creates a conversation owned by the session's identity.
public struct LiveConversationCreateFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case name }
    public static let frameType = ClientFrameType.liveConversationCreate
    /// Shown to listeners who ask to join (1 to 128 characters).
    public var name: String

    public init(name: String) {
        self.name = name
    }

    public func validate() throws(FieldViolation) {
        try Checker().text(name, "name", characters: 1...Limits.MAX_LIVE_CONVERSATION_NAME_CHARS)
    }
}
public typealias LiveConversationCreate = Payload<LiveConversationCreateFields>

/// Renames one of the session identity's conversations.
public struct LiveConversationRenameFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case conversationId, name }
    public static let frameType = ClientFrameType.liveConversationRename
    public var conversationId: String
    public var name: String

    public init(conversationId: String, name: String) {
        self.conversationId = conversationId
        self.name = name
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.uuid(conversationId, "conversationId")
        try check.text(name, "name", characters: 1...Limits.MAX_LIVE_CONVERSATION_NAME_CHARS)
    }
}
public typealias LiveConversationRename = Payload<LiveConversationRenameFields>

/// Deletes one of the session identity's conversations.
public struct LiveConversationDeleteFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case conversationId }
    public static let frameType = ClientFrameType.liveConversationDelete
    public var conversationId: String

    public init(conversationId: String) {
        self.conversationId = conversationId
    }

    public func validate() throws(FieldViolation) {
        try Checker().uuid(conversationId, "conversationId")
    }
}
public typealias LiveConversationDelete = Payload<LiveConversationDeleteFields>

/// Lists the session identity's conversations.
public enum LiveConversationsListFrame: FrameMarker { public static let frameType = ClientFrameType.liveConversationsList }
public typealias LiveConversationsList = Payload<NoFields<LiveConversationsListFrame>>

/// One conversation: the answer to `live_conversation_create` and `live_conversation_rename`,
/// and an item of `live_conversations`.
public struct LiveConversation: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.liveConversation
    public var conversationId: String
    public var name: String
    /// ms since 1970.
    public var createdAt: Int64
    public var updatedAt: Int64

    public init(conversationId: String, name: String, createdAt: Int64, updatedAt: Int64) {
        self.conversationId = conversationId
        self.name = name
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}

/// The answer to `live_conversations_list`: every conversation of the identity, newest
/// first (at most `MAX_LIVE_CONVERSATIONS`).
public struct LiveConversations: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.liveConversations
    public var conversations: [LiveConversation]

    public init(conversations: [LiveConversation]) {
        self.conversations = conversations
    }
}

/// A frame that names one conversation and nothing else: the answer to
/// `live_conversation_delete` (`live_conversation_deleted`), and, to a listener, that it
/// was refused or let go and nothing more of the conversation comes (`live_deauthorized`).
/// One shape, two frame types (`Marker`).
public struct LiveConversationNamed<Marker: ServerFrameMarker>: ServerPayload, Equatable {
    public static var frameType: ServerFrameType { Marker.frameType }
    public var conversationId: String

    public init(conversationId: String) {
        self.conversationId = conversationId
    }
}

public enum LiveConversationDeletedFrame: ServerFrameMarker { public static let frameType = ServerFrameType.liveConversationDeleted }
public enum LiveDeauthorizedFrame: ServerFrameMarker { public static let frameType = ServerFrameType.liveDeauthorized }
public typealias LiveConversationDeleted = LiveConversationNamed<LiveConversationDeletedFrame>
public typealias LiveDeauthorized = LiveConversationNamed<LiveDeauthorizedFrame>

// MARK: - Listening (docs/protocol.md section 13, "The live sequence")

// A listener's frames act for the socket's listener device (the `whisper_live_device`
// cookie of its upgrade), not for an identity: they carry no session token.

/// Step 1: a listener announces itself to a conversation's Whisperer, with the P-256
/// public key the conversation key will be sealed to.
public struct LiveListenOfferFields: DeviceFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case conversationId, publicKey }
    public static let frameType = ClientFrameType.liveListenOffer
    public var conversationId: String
    /// Uncompressed P-256 point (65 bytes), base64.
    public var publicKey: String

    public init(conversationId: String, publicKey: String) {
        self.conversationId = conversationId
        self.publicKey = publicKey
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.uuid(conversationId, "conversationId")
        try check.base64(publicKey, "publicKey", bytes: Limits.LIVE_PUBLIC_KEY_BYTES)
    }
}
public typealias LiveListenOffer = Payload<LiveListenOfferFields>

/// Step 3: the listener asks to be let in, under a name it chose.
public struct LiveListenRequestFields: DeviceFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case conversationId, name }
    public static let frameType = ClientFrameType.liveListenRequest
    public var conversationId: String
    public var name: String

    public init(conversationId: String, name: String) {
        self.conversationId = conversationId
        self.name = name
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.uuid(conversationId, "conversationId")
        try check.text(name, "name", characters: 1...Limits.MAX_LIVE_PERSON_NAME_CHARS)
    }
}
public typealias LiveListenRequest = Payload<LiveListenRequestFields>


/// A frame that names one conversation and nothing else: joining (step 5: an authorized
/// listener starts receiving content) and dropping (either side leaves; the socket's
/// place in the conversation says which). One shape, two frame types (`Marker`).
public struct LiveConversationActionFields<Marker: LiveConversationActionFrame>: DeviceFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case conversationId }
    public static var frameType: ClientFrameType { Marker.frameType }
    public var conversationId: String

    public init(conversationId: String) {
        self.conversationId = conversationId
    }

    public func validate() throws(FieldViolation) {
        try Checker().uuid(conversationId, "conversationId")
    }
}
public typealias LiveConversationAction<Marker: LiveConversationActionFrame> = Payload<LiveConversationActionFields<Marker>>

public protocol LiveConversationActionFrame: FrameMarker {}
public enum LiveJoiningFrame: LiveConversationActionFrame { public static let frameType = ClientFrameType.liveJoining }
public enum LiveDroppingFrame: LiveConversationActionFrame { public static let frameType = ClientFrameType.liveDropping }
public typealias LiveJoining = LiveConversationAction<LiveJoiningFrame>
public typealias LiveDropping = LiveConversationAction<LiveDroppingFrame>

/// A joined listener's packet for the Whisperer (a re-read request), sealed under the
/// conversation key.
public struct LiveListenerPacketFields: DeviceFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case conversationId, keyId, packet }
    public static let frameType = ClientFrameType.liveListenerPacket
    public var conversationId: String
    public var keyId: Int
    public var packet: String

    public init(conversationId: String, keyId: Int, packet: String) {
        self.conversationId = conversationId
        self.keyId = keyId
        self.packet = packet
    }

    public func validate() throws(FieldViolation) {
        try LivePacketFields.check(conversationId: conversationId, keyId: keyId, packet: packet)
    }
}
public typealias LiveListenerPacket = Payload<LiveListenerPacketFields>


// MARK: - Whispering

/// Step 2 (and the Whisperer's arrival): the Whisperer takes its place in one of its
/// conversations and offers it to one listener (`listenerId`) or to every listener
/// waiting there (no `listenerId`).
public struct LiveWhisperOfferFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case conversationId, whispererName, listenerId }
    public static let frameType = ClientFrameType.liveWhisperOffer
    public var conversationId: String
    public var whispererName: String
    public var listenerId: String?

    public init(
        conversationId: String, whispererName: String,
        listenerId: String? = nil
    ) {
        self.conversationId = conversationId
        self.whispererName = whispererName
        self.listenerId = listenerId
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.uuid(conversationId, "conversationId")
        try check.text(whispererName, "whispererName", characters: 1...Limits.MAX_LIVE_PERSON_NAME_CHARS)
        if let listenerId { try check.uuid(listenerId, "listenerId") }
    }
}
public typealias LiveWhisperOffer = Payload<LiveWhisperOfferFields>

/// Step 4.1: the Whisperer lets a listener in (kept, so it is recognised next time) and
/// hands it the conversation key sealed to its public key. Sent again with a new key
/// to every listener that stays when one is deauthorized.
public struct LiveAuthorizeFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case conversationId, listenerId, listenerName, keyId, sealedKey }
    public static let frameType = ClientFrameType.liveAuthorize
    public var conversationId: String
    public var listenerId: String
    public var listenerName: String
    public var keyId: Int
    /// The conversation key sealed to the listener (`LIVE_SEALED_KEY_BYTES`), base64.
    public var sealedKey: String

    public init(
        conversationId: String, listenerId: String,
        listenerName: String, keyId: Int, sealedKey: String
    ) {
        self.conversationId = conversationId
        self.listenerId = listenerId
        self.listenerName = listenerName
        self.keyId = keyId
        self.sealedKey = sealedKey
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.uuid(conversationId, "conversationId")
        try check.uuid(listenerId, "listenerId")
        try check.text(listenerName, "listenerName", characters: 1...Limits.MAX_LIVE_PERSON_NAME_CHARS)
        try check.require((1...Limits.MAX_LIVE_KEY_ID).contains(keyId), "keyId", "an integer from 1 to \(Limits.MAX_LIVE_KEY_ID)")
        try check.base64(sealedKey, "sealedKey", bytes: Limits.LIVE_SEALED_KEY_BYTES)
    }
}
public typealias LiveAuthorize = Payload<LiveAuthorizeFields>

/// Step 4.2, or later: the listener is refused, or let go. It is forgotten, is sent
/// nothing more, and the Whisperer replaces the key for the others.
public struct LiveDeauthorizeFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case conversationId, listenerId }
    public static let frameType = ClientFrameType.liveDeauthorize
    public var conversationId: String
    public var listenerId: String

    public init(conversationId: String, listenerId: String) {
        self.conversationId = conversationId
        self.listenerId = listenerId
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.uuid(conversationId, "conversationId")
        try check.uuid(listenerId, "listenerId")
    }
}
public typealias LiveDeauthorize = Payload<LiveDeauthorizeFields>

/// A content packet (`offset|text`, sealed under the conversation key) for every joined
/// listener, or for one (`listenerId`: a re-read answered to the listener who asked).
public struct LivePacketFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case conversationId, keyId, packet, listenerId }
    public static let frameType = ClientFrameType.livePacket
    public var conversationId: String
    public var keyId: Int
    /// 12-byte nonce, then the AES-GCM ciphertext and tag, base64.
    public var packet: String
    public var listenerId: String?

    public init(
        conversationId: String, keyId: Int, packet: String,
        listenerId: String? = nil
    ) {
        self.conversationId = conversationId
        self.keyId = keyId
        self.packet = packet
        self.listenerId = listenerId
    }

    public func validate() throws(FieldViolation) {
        try Self.check(conversationId: conversationId, keyId: keyId, packet: packet)
        if let listenerId { try Checker().uuid(listenerId, "listenerId") }
    }

    /// The checks every sealed packet passes, either way.
    static func check(conversationId: String, keyId: Int, packet: String) throws(FieldViolation) {
        let check = Checker()
        try check.uuid(conversationId, "conversationId")
        try check.require((1...Limits.MAX_LIVE_KEY_ID).contains(keyId), "keyId", "an integer from 1 to \(Limits.MAX_LIVE_KEY_ID)")
        try check.base64(packet, "packet")
        let bytes = Format.decodedLength(ofBase64: packet)
        try check.require(
            bytes >= Limits.LIVE_PACKET_OVERHEAD_BYTES && bytes <= Limits.MAX_LIVE_PACKET_BYTES, "packet",
            "\(Limits.LIVE_PACKET_OVERHEAD_BYTES) to \(Limits.MAX_LIVE_PACKET_BYTES) bytes once decoded"
        )
    }
}
public typealias LivePacket = Payload<LivePacketFields>

// MARK: - What the server sends

/// The answer to a live control frame: done (for `live_listen_offer`, with the
/// listener ID the server knows this device by).
public struct LiveAck: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.liveAck
    public var conversationId: String
    public var listenerId: String?

    public init(conversationId: String, listenerId: String? = nil) {
        self.conversationId = conversationId
        self.listenerId = listenerId
    }
}

/// To the Whisperer: a listener arrived (`known`: the Whisperer let it in before, under `name`).
public struct LiveListenerOffered: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.liveListenerOffered
    public var conversationId: String
    public var listenerId: String
    /// The profile of the listener's device: devices with one profile are one person.
    public var profileId: String?
    public var publicKey: String
    public var known: Bool
    public var name: String?

    public init(conversationId: String, listenerId: String, profileId: String? = nil, publicKey: String, known: Bool, name: String?) {
        self.conversationId = conversationId
        self.listenerId = listenerId
        self.profileId = profileId
        self.publicKey = publicKey
        self.known = known
        self.name = name
    }
}

/// To the Whisperer, about one listener under the name it chose: it asks to be let in
/// (`live_listener_requested`), or, authorized, it joined and now receives content
/// (`live_listener_joined`). One shape, two frame types (`Marker`).
public struct LiveListenerNamed<Marker: ServerFrameMarker>: ServerPayload, Equatable {
    public static var frameType: ServerFrameType { Marker.frameType }
    public var conversationId: String
    public var listenerId: String
    public var name: String

    public init(conversationId: String, listenerId: String, name: String) {
        self.conversationId = conversationId
        self.listenerId = listenerId
        self.name = name
    }
}

public enum LiveListenerRequestedFrame: ServerFrameMarker { public static let frameType = ServerFrameType.liveListenerRequested }
public enum LiveListenerJoinedFrame: ServerFrameMarker { public static let frameType = ServerFrameType.liveListenerJoined }
public typealias LiveListenerRequested = LiveListenerNamed<LiveListenerRequestedFrame>
public typealias LiveListenerJoined = LiveListenerNamed<LiveListenerJoinedFrame>

/// To the Whisperer: a joined listener's sealed packet.
public struct LiveFromListener: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.liveFromListener
    public var conversationId: String
    public var listenerId: String
    public var keyId: Int
    public var packet: String

    public init(conversationId: String, listenerId: String, keyId: Int, packet: String) {
        self.conversationId = conversationId
        self.listenerId = listenerId
        self.keyId = keyId
        self.packet = packet
    }
}

/// To a listener: the whisper offer (the conversation's name is the server's record).
/// `broadcast`: the Whisperer arrived and offers to everyone waiting (answer with a
/// listen offer, so it learns your key); otherwise it answers your listen offer
/// (answer with a listen request).
public struct LiveOffered: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.liveOffered
    public var conversationId: String
    public var conversationName: String
    public var whispererId: String
    public var whispererName: String
    public var broadcast: Bool

    public init(conversationId: String, conversationName: String, whispererId: String, whispererName: String, broadcast: Bool) {
        self.conversationId = conversationId
        self.conversationName = conversationName
        self.whispererId = whispererId
        self.whispererName = whispererName
        self.broadcast = broadcast
    }
}

/// To a listener: let in, with the conversation key sealed to its public key.
public struct LiveAuthorized: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.liveAuthorized
    public var conversationId: String
    public var keyId: Int
    public var sealedKey: String

    public init(conversationId: String, keyId: Int, sealedKey: String) {
        self.conversationId = conversationId
        self.keyId = keyId
        self.sealedKey = sealedKey
    }
}

/// To a joined listener: a content packet.
public struct LiveContent: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.liveContent
    public var conversationId: String
    public var keyId: Int
    public var packet: String

    public init(conversationId: String, keyId: Int, packet: String) {
        self.conversationId = conversationId
        self.keyId = keyId
        self.packet = packet
    }
}

/// Someone left: the Whisperer (no `listenerId`, to listeners) or a listener (to the
/// Whisperer). `dropping`: it said so; `leave`: its socket went away; `deleted`: the
/// owner deleted the conversation (no `listenerId`, to every socket in it, whose place
/// is gone).
public struct LiveDropped: ServerPayload, Equatable {
    public enum Reason: String, Codable, Sendable { case dropping, leave, deleted }
    public static let frameType = ServerFrameType.liveDropped
    public var conversationId: String
    public var listenerId: String?
    public var reason: Reason

    public init(conversationId: String, listenerId: String?, reason: Reason) {
        self.conversationId = conversationId
        self.listenerId = listenerId
        self.reason = reason
    }
}
