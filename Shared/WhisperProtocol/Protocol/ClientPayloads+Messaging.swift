/// `send_message` (spec 4.1) and, with `groupId`, `group_send_message` (spec 7).
public struct SendMessage: PrivilegedPayload, Equatable {
    public enum Keys: String, CodingKey, CaseIterable {
        case protocolVersion, cryptoVersion, sessionToken, messageId, from, to, msgType, timestamp
        case nonce, ciphertext, sig, replyTo, reactions, attachment
    }
    public typealias CodingKeys = Keys
    public static let frameType = ClientFrameType.sendMessage
    public var protocolVersion: Int
    public var cryptoVersion: Int
    public var sessionToken: String
    public var messageId: String
    public var from: String
    public var to: String
    public var msgType: MessageType
    public var timestamp: Int64
    public var nonce: String
    public var ciphertext: String
    public var sig: String
    public var replyTo: String?
    public var reactions: [String: [String]]?
    public var attachment: AttachmentPointer?

    public init(
        protocolVersion: Int = 1, cryptoVersion: Int = 1, sessionToken: String, messageId: String, from: String, to: String,
        msgType: MessageType, timestamp: Int64, nonce: String, ciphertext: String, sig: String,
        replyTo: String? = nil, reactions: [String: [String]]? = nil, attachment: AttachmentPointer? = nil
    ) {
        self.protocolVersion = protocolVersion
        self.cryptoVersion = cryptoVersion
        self.sessionToken = sessionToken
        self.messageId = messageId
        self.from = from
        self.to = to
        self.msgType = msgType
        self.timestamp = timestamp
        self.nonce = nonce
        self.ciphertext = ciphertext
        self.sig = sig
        self.replyTo = replyTo
        self.reactions = reactions
        self.attachment = attachment
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try validateEnvelope(check)
    }

    func validateEnvelope(_ check: Checker) throws(FieldViolation) {
        try check.uuid(messageId, "messageId")
        try check.whisperID(from, "from")
        try check.whisperID(to, "to")
        // One active device per identity: a message to oneself would come back to the
        // device that sent it. Refused, so it cannot fill one's own queue either.
        try check.require(to != from, "to", "must not be the sender's own Whisper ID")
        try check.timestamp(timestamp, "timestamp")
        try check.base64(nonce, "nonce", bytes: 24)
        try check.base64(ciphertext, "ciphertext")
        try check.base64(sig, "sig", bytes: 64)
        if let replyTo { try check.uuid(replyTo, "replyTo") }
        if let reactions { try Self.validateReactions(reactions, check) }
        try attachment?.validate(check)
    }

    static func validateReactions(_ reactions: [String: [String]], _ check: Checker) throws(FieldViolation) {
        try check.require(reactions.count <= 64, "reactions", "must have at most 64 entries")
        for (reaction, members) in reactions {
            try check.text(reaction, "reactions", characters: 1...16)
            try check.whisperIDs(members, "reactions", count: 0...Limits.MAX_GROUP_MEMBERS)
        }
    }
}

public struct GroupSendMessage: PrivilegedPayload, Equatable {
    public enum Keys: String, CodingKey, CaseIterable {
        case protocolVersion, cryptoVersion, sessionToken, groupId, messageId, from, to, msgType, timestamp
        case nonce, ciphertext, sig, replyTo, reactions, attachment
    }
    public typealias CodingKeys = Keys
    public static let frameType = ClientFrameType.groupSendMessage
    public var protocolVersion: Int
    public var cryptoVersion: Int
    public var sessionToken: String
    public var groupId: String
    public var messageId: String
    public var from: String
    public var to: String
    public var msgType: MessageType
    public var timestamp: Int64
    public var nonce: String
    public var ciphertext: String
    public var sig: String
    public var replyTo: String?
    public var reactions: [String: [String]]?
    public var attachment: AttachmentPointer?

    public init(
        protocolVersion: Int = 1, cryptoVersion: Int = 1, sessionToken: String, groupId: String, messageId: String, from: String,
        to: String, msgType: MessageType, timestamp: Int64, nonce: String, ciphertext: String, sig: String,
        replyTo: String? = nil, reactions: [String: [String]]? = nil, attachment: AttachmentPointer? = nil
    ) {
        self.protocolVersion = protocolVersion
        self.cryptoVersion = cryptoVersion
        self.sessionToken = sessionToken
        self.groupId = groupId
        self.messageId = messageId
        self.from = from
        self.to = to
        self.msgType = msgType
        self.timestamp = timestamp
        self.nonce = nonce
        self.ciphertext = ciphertext
        self.sig = sig
        self.replyTo = replyTo
        self.reactions = reactions
        self.attachment = attachment
    }

    /// The copy as a 1:1 message to its member (the fields the two share).
    public var envelope: SendMessage {
        SendMessage(
            protocolVersion: protocolVersion, cryptoVersion: cryptoVersion, sessionToken: sessionToken, messageId: messageId,
            from: from, to: to, msgType: msgType, timestamp: timestamp, nonce: nonce, ciphertext: ciphertext, sig: sig,
            replyTo: replyTo, reactions: reactions, attachment: attachment
        )
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.require(Format.isGroupID(groupId), "groupId", "must be a group ID (grp-<uuid>)")
        try check.require(msgType != .system, "msgType", "must be text, image, voice or file")
        try SendMessage(
            sessionToken: sessionToken, messageId: messageId, from: from, to: to, msgType: msgType, timestamp: timestamp,
            nonce: nonce, ciphertext: ciphertext, sig: sig, replyTo: replyTo, reactions: reactions, attachment: attachment
        ).validateEnvelope(check)
    }
}

public struct DeliveryReceipt: PrivilegedPayload, Equatable {
    public enum Keys: String, CodingKey, CaseIterable {
        case protocolVersion, cryptoVersion, sessionToken, messageId, from, to, status, timestamp
    }
    public typealias CodingKeys = Keys
    public static let frameType = ClientFrameType.deliveryReceipt
    public var protocolVersion: Int
    public var cryptoVersion: Int
    public var sessionToken: String
    public var messageId: String
    /// The recipient sending the receipt.
    public var from: String
    /// The original sender.
    public var to: String
    public var status: ReceiptStatus
    public var timestamp: Int64

    public init(
        protocolVersion: Int = 1, cryptoVersion: Int = 1, sessionToken: String, messageId: String,
        from: String, to: String, status: ReceiptStatus, timestamp: Int64
    ) {
        self.protocolVersion = protocolVersion
        self.cryptoVersion = cryptoVersion
        self.sessionToken = sessionToken
        self.messageId = messageId
        self.from = from
        self.to = to
        self.status = status
        self.timestamp = timestamp
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.uuid(messageId, "messageId")
        try check.whisperID(from, "from")
        try check.whisperID(to, "to")
        try check.timestamp(timestamp, "timestamp")
    }
}

public struct FetchPending: PrivilegedPayload, Equatable {
    public enum Keys: String, CodingKey, CaseIterable { case protocolVersion, cryptoVersion, sessionToken, cursor, limit }
    public typealias CodingKeys = Keys
    public static let frameType = ClientFrameType.fetchPending
    public var protocolVersion: Int
    public var cryptoVersion: Int
    public var sessionToken: String
    public var cursor: String?
    public var limit: Int?

    public init(protocolVersion: Int = 1, cryptoVersion: Int = 1, sessionToken: String, cursor: String? = nil, limit: Int? = nil) {
        self.protocolVersion = protocolVersion
        self.cryptoVersion = cryptoVersion
        self.sessionToken = sessionToken
        self.cursor = cursor
        self.limit = limit
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        if let cursor { try check.require(Format.isCursor(cursor), "cursor", "must be a cursor returned as nextCursor") }
        if let limit {
            try check.require((1...Limits.FETCH_PENDING_LIMIT_MAX).contains(limit), "limit", "must be 1 to \(Limits.FETCH_PENDING_LIMIT_MAX)")
        }
    }
}

// MARK: - Groups

public struct GroupCreate: PrivilegedPayload, Equatable {
    public enum Keys: String, CodingKey, CaseIterable { case protocolVersion, cryptoVersion, sessionToken, title, memberIds }
    public typealias CodingKeys = Keys
    public static let frameType = ClientFrameType.groupCreate
    public var protocolVersion: Int
    public var cryptoVersion: Int
    public var sessionToken: String
    public var title: String
    /// Everyone but the creator, who always becomes the owner.
    public var memberIds: [String]

    public init(protocolVersion: Int = 1, cryptoVersion: Int = 1, sessionToken: String, title: String, memberIds: [String]) {
        self.protocolVersion = protocolVersion
        self.cryptoVersion = cryptoVersion
        self.sessionToken = sessionToken
        self.title = title
        self.memberIds = memberIds
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.text(title, "title", characters: 1...Limits.MAX_GROUP_TITLE_CHARS)
        try check.whisperIDs(memberIds, "memberIds", count: 1...(Limits.MAX_GROUP_MEMBERS - 1))
    }
}

public struct GroupUpdate: PrivilegedPayload, Equatable {
    public enum Keys: String, CodingKey, CaseIterable {
        case protocolVersion, cryptoVersion, sessionToken, groupId, addMembers, removeMembers, title
    }
    public typealias CodingKeys = Keys
    public static let frameType = ClientFrameType.groupUpdate
    public var protocolVersion: Int
    public var cryptoVersion: Int
    public var sessionToken: String
    public var groupId: String
    public var addMembers: [String]?
    public var removeMembers: [String]?
    public var title: String?

    public init(
        protocolVersion: Int = 1, cryptoVersion: Int = 1, sessionToken: String, groupId: String,
        addMembers: [String]? = nil, removeMembers: [String]? = nil, title: String? = nil
    ) {
        self.protocolVersion = protocolVersion
        self.cryptoVersion = cryptoVersion
        self.sessionToken = sessionToken
        self.groupId = groupId
        self.addMembers = addMembers
        self.removeMembers = removeMembers
        self.title = title
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.require(Format.isGroupID(groupId), "groupId", "must be a group ID (grp-<uuid>)")
        if let addMembers { try check.whisperIDs(addMembers, "addMembers", count: 0...(Limits.MAX_GROUP_MEMBERS - 1)) }
        if let removeMembers { try check.whisperIDs(removeMembers, "removeMembers", count: 0...(Limits.MAX_GROUP_MEMBERS - 1)) }
        if let title { try check.text(title, "title", characters: 1...Limits.MAX_GROUP_TITLE_CHARS) }
        let changes = (addMembers?.count ?? 0) + (removeMembers?.count ?? 0) + (title == nil ? 0 : 1)
        try check.require(changes > 0, "payload", "must change something: addMembers, removeMembers or title")
    }
}

// MARK: - Calls

/// The signed call signaling frames (spec 9.1): `call_initiate`, `call_answer`,
/// `call_ice_candidate` and `call_end` share one shape.
public struct CallSignal<Marker: CallSignalFrame>: PrivilegedPayload, Equatable {
    public enum Keys: String, CodingKey, CaseIterable {
        case protocolVersion, cryptoVersion, sessionToken, callId, from, to, timestamp, nonce, ciphertext, sig, media, reason
    }
    public typealias CodingKeys = Keys
    public static var frameType: ClientFrameType { Marker.frameType }
    public var protocolVersion: Int
    public var cryptoVersion: Int
    public var sessionToken: String
    public var callId: String
    public var from: String
    public var to: String
    public var timestamp: Int64
    public var nonce: String
    /// The SDP offer/answer or ICE candidate, encrypted to the peer.
    public var ciphertext: String
    public var sig: String
    /// `call_initiate` only: what the callee's call UI should show. Not signed.
    public var media: CallMedia?
    /// `call_end` only: why the call ended. Not signed.
    public var reason: CallEndReason?

    public init(
        protocolVersion: Int = 1, cryptoVersion: Int = 1, sessionToken: String, callId: String, from: String, to: String,
        timestamp: Int64, nonce: String, ciphertext: String, sig: String, media: CallMedia? = nil, reason: CallEndReason? = nil
    ) {
        self.protocolVersion = protocolVersion
        self.cryptoVersion = cryptoVersion
        self.sessionToken = sessionToken
        self.callId = callId
        self.from = from
        self.to = to
        self.timestamp = timestamp
        self.nonce = nonce
        self.ciphertext = ciphertext
        self.sig = sig
        self.media = media
        self.reason = reason
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.uuid(callId, "callId")
        try check.whisperID(from, "from")
        try check.whisperID(to, "to")
        try check.timestamp(timestamp, "timestamp")
        try check.base64(nonce, "nonce", bytes: 24)
        try check.base64(ciphertext, "ciphertext")
        try check.require(
            Format.decodedLength(ofBase64: ciphertext) <= Limits.MAX_CALL_SIGNAL_BYTES, "ciphertext",
            "must hold at most \(Limits.MAX_CALL_SIGNAL_BYTES) bytes"
        )
        try check.base64(sig, "sig", bytes: 64)
        try check.require(media == nil || Marker.frameType == .callInitiate, "media", "is only allowed on call_initiate")
        try check.require(reason == nil || Marker.frameType == .callEnd, "reason", "is only allowed on call_end")
    }
}

public protocol CallSignalFrame: Sendable {
    static var frameType: ClientFrameType { get }
}

public enum CallInitiateFrame: CallSignalFrame { public static let frameType = ClientFrameType.callInitiate }
public enum CallAnswerFrame: CallSignalFrame { public static let frameType = ClientFrameType.callAnswer }
public enum CallIceCandidateFrame: CallSignalFrame { public static let frameType = ClientFrameType.callIceCandidate }
public enum CallEndFrame: CallSignalFrame { public static let frameType = ClientFrameType.callEnd }

public typealias CallInitiate = CallSignal<CallInitiateFrame>
public typealias CallAnswer = CallSignal<CallAnswerFrame>
public typealias CallIceCandidate = CallSignal<CallIceCandidateFrame>
public typealias CallEnd = CallSignal<CallEndFrame>

// MARK: - Presence, typing, reports

public struct Typing: PrivilegedPayload, Equatable {
    public enum Keys: String, CodingKey, CaseIterable { case protocolVersion, cryptoVersion, sessionToken, to, isTyping }
    public typealias CodingKeys = Keys
    public static let frameType = ClientFrameType.typing
    public var protocolVersion: Int
    public var cryptoVersion: Int
    public var sessionToken: String
    public var to: String
    public var isTyping: Bool

    public init(protocolVersion: Int = 1, cryptoVersion: Int = 1, sessionToken: String, to: String, isTyping: Bool) {
        self.protocolVersion = protocolVersion
        self.cryptoVersion = cryptoVersion
        self.sessionToken = sessionToken
        self.to = to
        self.isTyping = isTyping
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.whisperID(to, "to")
    }
}

public struct PresenceSubscribe: PrivilegedPayload, Equatable {
    public enum Keys: String, CodingKey, CaseIterable { case protocolVersion, cryptoVersion, sessionToken, whisperIds }
    public typealias CodingKeys = Keys
    public static let frameType = ClientFrameType.presenceSubscribe
    public var protocolVersion: Int
    public var cryptoVersion: Int
    public var sessionToken: String
    /// The direct peers (contacts, open conversations) to watch; replaces the previous list.
    public var whisperIds: [String]

    public init(protocolVersion: Int = 1, cryptoVersion: Int = 1, sessionToken: String, whisperIds: [String]) {
        self.protocolVersion = protocolVersion
        self.cryptoVersion = cryptoVersion
        self.sessionToken = sessionToken
        self.whisperIds = whisperIds
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.whisperIDs(whisperIds, "whisperIds", count: 0...Limits.MAX_PRESENCE_PEERS)
    }
}

public struct ReportUser: PrivilegedPayload, Equatable {
    public enum Keys: String, CodingKey, CaseIterable {
        case protocolVersion, cryptoVersion, sessionToken, whisperId, reason, details, messageId, messageIds
    }
    public typealias CodingKeys = Keys
    public static let frameType = ClientFrameType.reportUser
    public var protocolVersion: Int
    public var cryptoVersion: Int
    public var sessionToken: String
    public var whisperId: String
    public var reason: ReportReason
    public var details: String?
    public var messageId: String?
    /// The reported messages (`messageId` is the one-message form; both may be given).
    public var messageIds: [String]?

    public init(
        protocolVersion: Int = 1, cryptoVersion: Int = 1, sessionToken: String, whisperId: String,
        reason: ReportReason, details: String? = nil, messageId: String? = nil, messageIds: [String]? = nil
    ) {
        self.protocolVersion = protocolVersion
        self.cryptoVersion = cryptoVersion
        self.sessionToken = sessionToken
        self.whisperId = whisperId
        self.reason = reason
        self.details = details
        self.messageId = messageId
        self.messageIds = messageIds
    }

    /// Every message the report names, lower-case, each once, in the order given.
    public var reportedMessageIds: [String] {
        var seen = Set<String>()
        return ((messageId.map { [$0] } ?? []) + (messageIds ?? [])).map(Format.lowercased).filter { seen.insert($0).inserted }
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.whisperID(whisperId, "whisperId")
        if let details { try check.text(details, "details", characters: 0...Limits.MAX_REPORT_DETAILS_CHARS) }
        if let messageId { try check.uuid(messageId, "messageId") }
        if let messageIds {
            try check.require(messageIds.count <= Limits.MAX_REPORT_MESSAGE_IDS, "messageIds", "must list at most \(Limits.MAX_REPORT_MESSAGE_IDS) message IDs")
            for id in messageIds { try check.uuid(id, "messageIds") }
        }
        try check.require(reportedMessageIds.count <= Limits.MAX_REPORT_MESSAGE_IDS, "messageIds", "with messageId, must name at most \(Limits.MAX_REPORT_MESSAGE_IDS) messages")
    }
}
