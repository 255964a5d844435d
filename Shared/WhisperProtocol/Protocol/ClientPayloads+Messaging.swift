/// `send_message` (docs/protocol.md section 5) and, with `groupId`, `group_send_message` (section 6).
public struct SendMessageFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable {
        case messageId, from, to, msgType, timestamp
        case nonce, ciphertext, sig, replyTo, reactions, attachment, directoryHead
    }
    public static let frameType = ClientFrameType.sendMessage
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
    /// The key directory head the sender holds, for the recipient to compare with its own
    /// (a split view is caught by the people talking); covered by `sig`.
    public var directoryHead: DirectoryHead?

    public init(
        messageId: String, from: String, to: String,
        msgType: MessageType, timestamp: Int64, nonce: String, ciphertext: String, sig: String,
        replyTo: String? = nil, reactions: [String: [String]]? = nil, attachment: AttachmentPointer? = nil,
        directoryHead: DirectoryHead? = nil
    ) {
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
        self.directoryHead = directoryHead
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try validateMessage(check)
    }

    /// The canonical bytes `sig` covers (docs/protocol.md section 11); `groupId` for a
    /// group message's copy, which is signed over the group instead of the recipient.
    public func signedBytes(groupId: String? = nil) -> [UInt8] {
        CanonicalSigning.bytes(
            messageType: (groupId == nil ? ClientFrameType.sendMessage : .groupSendMessage).rawValue, messageId: messageId,
            from: from, toOrGroupId: groupId ?? to, timestamp: timestamp, nonce: nonce, ciphertext: ciphertext,
            directoryHead: directoryHead
        )
    }

    func validateMessage(_ check: Checker) throws(FieldViolation) {
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
        try directoryHead?.validate(check)
    }

    static func validateReactions(_ reactions: [String: [String]], _ check: Checker) throws(FieldViolation) {
        try check.require(reactions.count <= 64, "reactions", "must have at most 64 entries")
        for (reaction, members) in reactions {
            try check.text(reaction, "reactions", characters: 1...16)
            try check.whisperIDs(members, "reactions", count: 0...Limits.MAX_GROUP_MEMBERS)
        }
    }
}
public typealias SendMessage = Payload<SendMessageFields>

/// A group message's copy for one member: the fields of a 1:1 message (`message`,
/// which read as this type's own) and the group it went to, side by side on the wire.
@dynamicMemberLookup
public struct GroupSendMessageFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case groupId }
    public static let frameType = ClientFrameType.groupSendMessage
    public static var fieldNames: [String] { ["groupId"] + SendMessageFields.fieldNames }
    public var groupId: String
    /// The copy as the 1:1 message to its member.
    public var message: SendMessageFields

    public init(groupId: String, message: SendMessageFields) {
        self.groupId = groupId
        self.message = message
    }

    public subscript<Value>(dynamicMember path: WritableKeyPath<SendMessageFields, Value>) -> Value {
        get { message[keyPath: path] }
        set { message[keyPath: path] = newValue }
    }

    public init(from decoder: any Decoder) throws {
        groupId = try decoder.container(keyedBy: CodingKeys.self).decode(String.self, forKey: .groupId)
        message = try SendMessageFields(from: decoder)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(groupId, forKey: .groupId)
        try message.encode(to: encoder)
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.require(Format.isGroupID(groupId), "groupId", "must be a group ID (grp-<uuid>)")
        try check.require(message.msgType != .system, "msgType", "must be text, image, voice or file")
        try message.validateMessage(check)
    }
}
public typealias GroupSendMessage = Payload<GroupSendMessageFields>

extension GroupSendMessage {
    /// The copy as a 1:1 message to its member.
    public var asMessage: SendMessage {
        SendMessage(protocolVersion: protocolVersion, cryptoVersion: cryptoVersion, sessionToken: sessionToken, fields.message)
    }
}

public struct DeliveryReceiptFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable {
        case messageId, from, to, status, timestamp
    }
    public static let frameType = ClientFrameType.deliveryReceipt
    public var messageId: String
    /// The recipient sending the receipt.
    public var from: String
    /// The original sender.
    public var to: String
    public var status: ReceiptStatus
    public var timestamp: Int64

    public init(
        messageId: String,
        from: String, to: String, status: ReceiptStatus, timestamp: Int64
    ) {
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
public typealias DeliveryReceipt = Payload<DeliveryReceiptFields>

public struct FetchPendingFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case cursor, limit }
    public static let frameType = ClientFrameType.fetchPending
    public var cursor: String?
    public var limit: Int?

    public init(cursor: String? = nil, limit: Int? = nil) {
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
public typealias FetchPending = Payload<FetchPendingFields>

// MARK: - Groups

public struct GroupCreateFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case title, memberIds }
    public static let frameType = ClientFrameType.groupCreate
    public var title: String
    /// Everyone but the creator, who always becomes the owner.
    public var memberIds: [String]

    public init(title: String, memberIds: [String]) {
        self.title = title
        self.memberIds = memberIds
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.text(title, "title", characters: 1...Limits.MAX_GROUP_TITLE_CHARS)
        try check.whisperIDs(memberIds, "memberIds", count: 1...(Limits.MAX_GROUP_MEMBERS - 1))
    }
}
public typealias GroupCreate = Payload<GroupCreateFields>

public struct GroupUpdateFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable {
        case groupId, addMembers, removeMembers, title
    }
    public static let frameType = ClientFrameType.groupUpdate
    public var groupId: String
    public var addMembers: [String]?
    public var removeMembers: [String]?
    public var title: String?

    public init(
        groupId: String,
        addMembers: [String]? = nil, removeMembers: [String]? = nil, title: String? = nil
    ) {
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
public typealias GroupUpdate = Payload<GroupUpdateFields>

// MARK: - Calls

/// The signed call signaling frames (docs/protocol.md section 7): `call_initiate`, `call_answer`,
/// `call_ice_candidate` and `call_end` share one shape.
public struct CallSignalFields<Marker: CallSignalFrame>: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable {
        case callId, from, to, timestamp, nonce, ciphertext, sig, media, reason
    }
    public static var frameType: ClientFrameType { Marker.frameType }
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
        callId: String, from: String, to: String,
        timestamp: Int64, nonce: String, ciphertext: String, sig: String, media: CallMedia? = nil, reason: CallEndReason? = nil
    ) {
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
public typealias CallSignal<Marker: CallSignalFrame> = Payload<CallSignalFields<Marker>>

/// The call signaling frames, which share `CallSignal`'s shape.
public protocol CallSignalFrame: FrameMarker {}

public enum CallInitiateFrame: CallSignalFrame { public static let frameType = ClientFrameType.callInitiate }
public enum CallAnswerFrame: CallSignalFrame { public static let frameType = ClientFrameType.callAnswer }
public enum CallIceCandidateFrame: CallSignalFrame { public static let frameType = ClientFrameType.callIceCandidate }
public enum CallEndFrame: CallSignalFrame { public static let frameType = ClientFrameType.callEnd }

public typealias CallInitiate = CallSignal<CallInitiateFrame>
public typealias CallAnswer = CallSignal<CallAnswerFrame>
public typealias CallIceCandidate = CallSignal<CallIceCandidateFrame>
public typealias CallEnd = CallSignal<CallEndFrame>

// MARK: - Presence, typing, reports

public struct TypingFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case to, isTyping }
    public static let frameType = ClientFrameType.typing
    public var to: String
    public var isTyping: Bool

    public init(to: String, isTyping: Bool) {
        self.to = to
        self.isTyping = isTyping
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.whisperID(to, "to")
    }
}
public typealias Typing = Payload<TypingFields>

public struct PresenceSubscribeFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case whisperIds }
    public static let frameType = ClientFrameType.presenceSubscribe
    /// The direct peers (contacts, open conversations) to watch; replaces the previous list.
    public var whisperIds: [String]

    public init(whisperIds: [String]) {
        self.whisperIds = whisperIds
    }

    public func validate() throws(FieldViolation) {
        let check = Checker()
        try check.whisperIDs(whisperIds, "whisperIds", count: 0...Limits.MAX_PRESENCE_PEERS)
    }
}
public typealias PresenceSubscribe = Payload<PresenceSubscribeFields>

public struct ReportUserFields: SessionFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable {
        case whisperId, reason, details, messageId, messageIds
    }
    public static let frameType = ClientFrameType.reportUser
    public var whisperId: String
    public var reason: ReportReason
    public var details: String?
    public var messageId: String?
    /// The reported messages (`messageId` is the one-message form; both may be given).
    public var messageIds: [String]?

    public init(
        whisperId: String,
        reason: ReportReason, details: String? = nil, messageId: String? = nil, messageIds: [String]? = nil
    ) {
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
public typealias ReportUser = Payload<ReportUserFields>
