import Foundation

/// Every frame `type` the server sends.
public enum ServerFrameType: String, CaseIterable, Sendable, Codable {
    case error
    case registerChallenge = "register_challenge"
    case registerAck = "register_ack"
    case sessionRefreshed = "session_refreshed"
    case loggedOut = "logged_out"
    case accountDeleted = "account_deleted"
    case tokensUpdated = "tokens_updated"
    case sessionRevoked = "session_revoked"
    case pong
    case messageAccepted = "message_accepted"
    case messageReceived = "message_received"
    case messageDelivered = "message_delivered"
    case pendingMessages = "pending_messages"
    case groupCreated = "group_created"
    case groupUpdated = "group_updated"
    case groupInvited = "group_invited"
    case groupInvitations = "group_invitations"
    case callIncoming = "call_incoming"
    case callRinging = "call_ringing"
    case callAnswered = "call_answered"
    case callRemoteCandidate = "call_remote_candidate"
    case callEnded = "call_ended"
    case turnCredentials = "turn_credentials"
    case peerTyping = "peer_typing"
    case presence
    case presenceSnapshot = "presence_snapshot"
    case reportAccepted = "report_accepted"
    case reconnect
    case liveConversation = "live_conversation"
    case liveConversations = "live_conversations"
    case liveConversationDeleted = "live_conversation_deleted"
    case liveAck = "live_ack"
    case liveProfile = "live_profile"
    case liveProfileCode = "live_profile_code"
    case liveProfileConversations = "live_profile_conversations"
    case liveListenerOffered = "live_listener_offered"
    case liveListenerRequested = "live_listener_requested"
    case liveListenerJoined = "live_listener_joined"
    case liveFromListener = "live_from_listener"
    case liveOffered = "live_offered"
    case liveAuthorized = "live_authorized"
    case liveDeauthorized = "live_deauthorized"
    case liveContent = "live_content"
    case liveDropped = "live_dropped"
    case pttChannel = "ptt_channel"
    case pttChannels = "ptt_channels"
    case pttMembership = "ptt_membership"
    case pttFloor = "ptt_floor"
    case pttAnnounced = "ptt_announced"
    case pttNearbyChannels = "ptt_nearby_channels"
    case pttSignalReceived = "ptt_signal_received"

    var payloadType: any ServerPayload.Type {
        switch self {
        case .error: ErrorPayload.self
        case .registerChallenge: RegisterChallenge.self
        case .registerAck: RegisterAck.self
        case .sessionRefreshed: SessionRefreshed.self
        case .loggedOut: LoggedOut.self
        case .accountDeleted: AccountDeleted.self
        case .tokensUpdated: TokensUpdated.self
        case .sessionRevoked: SessionRevoked.self
        case .pong: Pong.self
        case .messageAccepted: MessageAccepted.self
        case .messageReceived: MessageReceived.self
        case .messageDelivered: MessageDelivered.self
        case .pendingMessages: PendingMessages.self
        case .groupCreated: GroupCreated.self
        case .groupUpdated: GroupUpdated.self
        case .groupInvited: GroupInvitation.self
        case .groupInvitations: GroupInvitations.self
        case .callIncoming: CallIncoming.self
        case .callRinging: CallRinging.self
        case .callAnswered: CallAnswered.self
        case .callRemoteCandidate: CallRemoteCandidate.self
        case .callEnded: CallEnded.self
        case .turnCredentials: TurnCredentials.self
        case .peerTyping: PeerTyping.self
        case .presence: PresenceUpdate.self
        case .presenceSnapshot: PresenceSnapshot.self
        case .reportAccepted: ReportAccepted.self
        case .reconnect: Reconnect.self
        case .liveConversation: LiveConversation.self
        case .liveConversations: LiveConversations.self
        case .liveConversationDeleted: LiveConversationDeleted.self
        case .liveAck: LiveAck.self
        case .liveProfile: LiveProfile.self
        case .liveProfileCode: LiveProfileCode.self
        case .liveProfileConversations: LiveProfileConversations.self
        case .liveListenerOffered: LiveListenerOffered.self
        case .liveListenerRequested: LiveListenerRequested.self
        case .liveListenerJoined: LiveListenerJoined.self
        case .liveFromListener: LiveFromListener.self
        case .liveOffered: LiveOffered.self
        case .liveAuthorized: LiveAuthorized.self
        case .liveDeauthorized: LiveDeauthorized.self
        case .liveContent: LiveContent.self
        case .liveDropped: LiveDropped.self
        case .pttChannel: PTTChannel.self
        case .pttChannels: PTTChannels.self
        case .pttMembership: PTTMembership.self
        case .pttFloor: PTTFloor.self
        case .pttAnnounced: PTTAnnounced.self
        case .pttNearbyChannels: PTTNearbyChannels.self
        case .pttSignalReceived: PTTSignalReceived.self
        }
    }
}

/// A payload the server sends. Clients must ignore fields they do not know.
public protocol ServerPayload: Codable, Sendable {
    static var frameType: ServerFrameType { get }
}

/// Names the frame type of a server payload shape that several frame types share.
public protocol ServerFrameMarker: Sendable {
    static var frameType: ServerFrameType { get }
}

public struct ErrorPayload: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.error
    public var code: ErrorCode
    public var message: String
    public var requestId: String?

    public init(code: ErrorCode, message: String, requestId: String? = nil) {
        self.code = code
        self.message = message
        self.requestId = requestId
    }
}

public struct RegisterChallenge: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.registerChallenge
    public var challengeId: String
    /// base64 of 32 random bytes, to be signed with the identity's Ed25519 key.
    public var challenge: String
    public var expiresAt: Int64

    public init(challengeId: String, challenge: String, expiresAt: Int64) {
        self.challengeId = challengeId
        self.challenge = challenge
        self.expiresAt = expiresAt
    }
}

public struct RegisterAck: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.registerAck
    public var success: Bool
    public var whisperId: String
    public var sessionToken: String
    public var sessionExpiresAt: Int64
    public var serverTime: Int64

    public init(success: Bool = true, whisperId: String, sessionToken: String, sessionExpiresAt: Int64, serverTime: Int64) {
        self.success = success
        self.whisperId = whisperId
        self.sessionToken = sessionToken
        self.sessionExpiresAt = sessionExpiresAt
        self.serverTime = serverTime
    }
}

public struct SessionRefreshed: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.sessionRefreshed
    public var sessionToken: String
    public var sessionExpiresAt: Int64
    public var serverTime: Int64

    public init(sessionToken: String, sessionExpiresAt: Int64, serverTime: Int64) {
        self.sessionToken = sessionToken
        self.sessionExpiresAt = sessionExpiresAt
        self.serverTime = serverTime
    }
}

public struct LoggedOut: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.loggedOut
    public var success: Bool

    public init(success: Bool = true) { self.success = success }
}

/// The identity is deleted (`account_delete`): everything of it is gone but its Whisper
/// ID, which is never given out again. The socket is closed right after.
public struct AccountDeleted: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.accountDeleted
    public var whisperId: String
    /// When the deletion was done (ms since 1970).
    public var deletedAt: Int64

    public init(whisperId: String, deletedAt: Int64) {
        self.whisperId = whisperId
        self.deletedAt = deletedAt
    }
}

public struct TokensUpdated: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.tokensUpdated
    public var success: Bool

    public init(success: Bool = true) { self.success = success }
}

/// Sent just before the server closes a socket whose session ended elsewhere.
public struct SessionRevoked: ServerPayload, Equatable {
    public enum Reason: String, Codable, Sendable { case replacedByNewDevice = "replaced_by_new_device", loggedOut = "logged_out", banned, accountDeleted = "account_deleted" }
    public static let frameType = ServerFrameType.sessionRevoked
    public var reason: Reason

    public init(reason: Reason) { self.reason = reason }
}

public struct Pong: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.pong
    public var serverTime: Int64

    public init(serverTime: Int64) { self.serverTime = serverTime }
}

public struct MessageAccepted: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.messageAccepted
    public var messageId: String
    public var status: String

    public init(messageId: String, status: String = "sent") {
        self.messageId = messageId
        self.status = status
    }
}

/// A message for its recipient (docs/protocol.md section 5): the fields it was sent with (`message`,
/// which read as this type's own) and, for a group message, `groupId`.
@dynamicMemberLookup
public struct MessageReceived: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.messageReceived
    public var message: SendMessageFields
    public var groupId: String?

    public init(_ message: SendMessageFields, groupId: String? = nil) {
        self.message = message
        self.groupId = groupId
    }

    public subscript<Value>(dynamicMember path: KeyPath<SendMessageFields, Value>) -> Value {
        message[keyPath: path]
    }

    private enum Keys: String, CodingKey { case groupId }

    public init(from decoder: any Decoder) throws {
        message = try SendMessageFields(from: decoder)
        groupId = try decoder.container(keyedBy: Keys.self).decodeIfPresent(String.self, forKey: .groupId)
    }

    public func encode(to encoder: any Encoder) throws {
        try message.encode(to: encoder)
        var container = encoder.container(keyedBy: Keys.self)
        try container.encodeIfPresent(groupId, forKey: .groupId)
    }
}

public struct MessageDelivered: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.messageDelivered
    public var messageId: String
    public var status: ReceiptStatus
    public var timestamp: Int64
    /// The recipient whose receipt this is (tells a group message's copies apart, which
    /// share one messageId). Absent from receipts stored by earlier versions.
    public var from: String?

    public init(messageId: String, status: ReceiptStatus, timestamp: Int64, from: String? = nil) {
        self.messageId = messageId
        self.status = status
        self.timestamp = timestamp
        self.from = from
    }
}

public struct PendingMessages: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.pendingMessages
    public var messages: [MessageReceived]
    public var nextCursor: String?

    public init(messages: [MessageReceived], nextCursor: String?) {
        self.messages = messages
        self.nextCursor = nextCursor
    }
}

/// A new group, to its creator (the answer) and to every member.
public struct GroupCreated: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.groupCreated
    public var groupId: String
    public var title: String
    /// Every member, the creator first, then in the order they were added.
    public var memberIds: [String]
    /// The member who may add and remove others (the creator, until they leave).
    public var ownerId: String
    public var createdBy: String
    public var createdAt: Int64
    /// Identities named who were invited rather than added (they are not direct peers of
    /// the creator): members once they accept. Absent when there are none.
    public var invited: [String]?

    public init(
        groupId: String, title: String, memberIds: [String], ownerId: String, createdBy: String, createdAt: Int64, invited: [String]? = nil
    ) {
        self.groupId = groupId
        self.title = title
        self.memberIds = memberIds
        self.ownerId = ownerId
        self.createdBy = createdBy
        self.createdAt = createdAt
        self.invited = invited
    }
}

/// An invitation to a group (docs/protocol.md section 6): someone who is not a direct
/// peer named this identity in `group_create` or `group_update`. Sent to the invitee's
/// live socket as `group_invited` (never stored for it), and listed in
/// `group_invitations`. Accepting is `group_update` with `addMembers: [self]`, declining
/// `removeMembers: [self]`.
public struct GroupInvitation: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.groupInvited
    public var groupId: String
    public var title: String
    public var invitedBy: String
    public var memberCount: Int
    public var invitedAt: Int64

    public init(groupId: String, title: String, invitedBy: String, memberCount: Int, invitedAt: Int64) {
        self.groupId = groupId
        self.title = title
        self.invitedBy = invitedBy
        self.memberCount = memberCount
        self.invitedAt = invitedAt
    }
}

/// The answer to `group_invitations_list`: the open invitations, newest first.
public struct GroupInvitations: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.groupInvitations
    public var invitations: [GroupInvitation]

    public init(invitations: [GroupInvitation]) {
        self.invitations = invitations
    }
}

/// A changed group, to the member who changed it (the answer) and to every member
/// before and after the change. A removed member's copy has empty `memberIds`.
public struct GroupUpdated: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.groupUpdated
    public var groupId: String
    public var title: String
    public var memberIds: [String]
    /// The owner after the change (absent when the group is gone, or in a removed member's copy).
    public var ownerId: String?
    public var added: [String]
    public var removed: [String]
    public var updatedBy: String
    public var updatedAt: Int64
    /// In the answer to the owner only: identities of `addMembers` who were invited
    /// rather than added (not direct peers of the owner). Absent when there are none.
    public var invited: [String]?

    public init(
        groupId: String, title: String, memberIds: [String], ownerId: String?, added: [String], removed: [String],
        updatedBy: String, updatedAt: Int64, invited: [String]? = nil
    ) {
        self.groupId = groupId
        self.title = title
        self.memberIds = memberIds
        self.ownerId = ownerId
        self.added = added
        self.removed = removed
        self.updatedBy = updatedBy
        self.updatedAt = updatedAt
        self.invited = invited
    }
}

/// The signed fields of a call signaling frame as the peer receives them.
public struct CallSignalDelivery<Marker: CallDeliveryFrame>: ServerPayload, Equatable {
    public static var frameType: ServerFrameType { Marker.frameType }
    public var callId: String
    public var from: String
    public var to: String
    public var timestamp: Int64
    public var nonce: String
    public var ciphertext: String
    public var sig: String
    public var media: CallMedia?

    /// The peer's frame as the other party receives it (all but `reason`, which only
    /// `call_end` carries).
    public init<Signal: CallSignalFrame>(_ signal: CallSignal<Signal>) {
        (callId, from, to, timestamp) = (signal.callId, signal.from, signal.to, signal.timestamp)
        (nonce, ciphertext, sig, media) = (signal.nonce, signal.ciphertext, signal.sig, signal.media)
    }
}

/// The call signaling deliveries, which share `CallSignalDelivery`'s shape.
public protocol CallDeliveryFrame: ServerFrameMarker {}

public enum CallIncomingFrame: CallDeliveryFrame { public static let frameType = ServerFrameType.callIncoming }
public enum CallAnsweredFrame: CallDeliveryFrame { public static let frameType = ServerFrameType.callAnswered }
public enum CallRemoteCandidateFrame: CallDeliveryFrame { public static let frameType = ServerFrameType.callRemoteCandidate }

public typealias CallIncoming = CallSignalDelivery<CallIncomingFrame>
public typealias CallAnswered = CallSignalDelivery<CallAnsweredFrame>
public typealias CallRemoteCandidate = CallSignalDelivery<CallRemoteCandidateFrame>

/// A call is over. Either the peer's signed `call_end` (`origin` `peer`: nonce,
/// ciphertext and sig as the peer sent them) or the server's own word (`origin`
/// `server`: no signature; `reason` one of `ServerCallEndReason`).
public struct CallEnded: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.callEnded

    public enum Origin: String, Codable, Sendable {
        case peer
        case server
    }

    public var callId: String
    /// The other party of the call (for a peer's frame, the one who ended it).
    public var from: String
    /// The party this frame is for.
    public var to: String
    public var timestamp: Int64
    public var origin: Origin
    /// A peer's reason (`CallEndReason`, optional) or the server's (`ServerCallEndReason`).
    public var reason: String?
    public var nonce: String?
    public var ciphertext: String?
    public var sig: String?

    public init(callId: String, from: String, to: String, timestamp: Int64, origin: Origin, reason: String?, nonce: String? = nil, ciphertext: String? = nil, sig: String? = nil) {
        self.callId = callId
        self.from = from
        self.to = to
        self.timestamp = timestamp
        self.origin = origin
        self.reason = reason
        self.nonce = nonce
        self.ciphertext = ciphertext
        self.sig = sig
    }

    /// The peer's signed `call_end`, passed on.
    public init(_ end: CallEnd) {
        self.init(
            callId: end.callId, from: end.from, to: end.to, timestamp: end.timestamp, origin: .peer, reason: end.reason?.rawValue,
            nonce: end.nonce, ciphertext: end.ciphertext, sig: end.sig
        )
    }

    /// The server ends the call between `peer` and `party`, telling `party`.
    public init(callId: String, peer: String, party: String, reason: ServerCallEndReason, at timestamp: Int64) {
        self.init(callId: callId, from: peer, to: party, timestamp: timestamp, origin: .server, reason: reason.rawValue)
    }
}

/// Why the server ended a call (`call_ended` with `origin` `server`).
public enum ServerCallEndReason: String, Codable, Sendable, CaseIterable {
    /// The callee's device had the call and nobody answered within the ring timeout.
    case timeout
    /// The callee's device was never reached within the ring timeout (offline; a VoIP
    /// push was sent).
    case unavailable
    /// The callee was already in another call.
    case busy
    /// The caller started another call before this one was over.
    case replaced
}

/// Tells the caller the callee's device has been reached (live socket or VoIP push).
public struct CallRinging: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.callRinging
    public var callId: String
    public var to: String
    public var timestamp: Int64
    /// How the callee was reached: `socket` (the offer is on the callee's device) or
    /// `push` (a VoIP / high-priority push is on its way).
    public var via: Via?

    public enum Via: String, Codable, Sendable {
        case socket
        case push
    }

    public init(callId: String, to: String, timestamp: Int64, via: Via?) {
        self.callId = callId
        self.to = to
        self.timestamp = timestamp
        self.via = via
    }
}

public struct TurnCredentials: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.turnCredentials
    public var urls: [String]
    public var username: String
    public var credential: String
    public var ttlSeconds: Int
    public var expiresAt: Int64

    public init(urls: [String], username: String, credential: String, ttlSeconds: Int, expiresAt: Int64) {
        self.urls = urls
        self.username = username
        self.credential = credential
        self.ttlSeconds = ttlSeconds
        self.expiresAt = expiresAt
    }
}

public struct PeerTyping: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.peerTyping
    public var from: String
    public var isTyping: Bool
    public var timestamp: Int64

    public init(from: String, isTyping: Bool, timestamp: Int64) {
        self.from = from
        self.isTyping = isTyping
        self.timestamp = timestamp
    }
}

public enum PresenceStatus: String, Codable, Sendable { case online, offline }

public struct PresenceUpdate: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.presence
    public var whisperId: String
    public var status: PresenceStatus
    public var timestamp: Int64

    public init(whisperId: String, status: PresenceStatus, timestamp: Int64) {
        self.whisperId = whisperId
        self.status = status
        self.timestamp = timestamp
    }
}

public struct PresenceSnapshot: ServerPayload, Equatable {
    public struct Peer: Codable, Sendable, Equatable {
        public var whisperId: String
        public var status: PresenceStatus

        public init(whisperId: String, status: PresenceStatus) {
            self.whisperId = whisperId
            self.status = status
        }
    }
    public static let frameType = ServerFrameType.presenceSnapshot
    /// The subscribed IDs that are direct peers, with their status now; the others are left out.
    public var peers: [Peer]

    public init(peers: [Peer]) {
        self.peers = peers
    }
}

public struct ReportAccepted: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.reportAccepted
    public var reportId: String

    public init(reportId: String) {
        self.reportId = reportId
    }
}

/// The server is going away (deploy, drain): connect again, to any instance, after the delay.
public struct Reconnect: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.reconnect
    /// The reasons a gateway sends (docs/protocol.md section 10): it is shutting down, or
    /// frames for its sockets were lost while its Redis subscription was down.
    public static let serverShutdown = "server_shutdown", framesMissed = "frames_missed"
    public var reason: String
    public var retryAfterMs: Int

    public init(reason: String, retryAfterMs: Int) {
        self.reason = reason
        self.retryAfterMs = retryAfterMs
    }

    /// How long a client waits before it opens its next socket: the hint, kept within
    /// 0 to 60 s whatever a server sends.
    public var delay: Duration { .milliseconds(min(max(retryAfterMs, 0), 60_000)) }
}

/// A decoded server frame (what clients and tests read).
public struct ServerFrame: Sendable {
    public var type: ServerFrameType
    public var requestId: String?
    public var payload: any ServerPayload

    public func payload<P: ServerPayload>(as type: P.Type) -> P? {
        payload as? P
    }
}

/// Encodes server frames as `{"type", "requestId"?, "payload"}` and decodes them back.
public enum ServerFrameCodec {
    /// The busiest frames: written field by field (chosen at compile time, no cast).
    public static func encode<P: ServerPayload & HotPayload>(_ payload: P, requestId: String? = nil) -> [UInt8] {
        HotFrames.frame(type: P.frameType.rawValue, requestId: requestId, payload: payload)
    }

    public static func encode<P: ServerPayload>(_ payload: P, requestId: String? = nil) -> [UInt8] {
        if let hot = payload as? any HotPayload {
            return HotFrames.frame(type: P.frameType.rawValue, requestId: requestId, payload: hot)
        }
        // Encoding our own value types cannot fail.
        return Array((try? ProtocolJSON.encoder.encode(Outbound(type: P.frameType, requestId: requestId, payload: payload))) ?? Data())
    }

    /// A frame around a payload that is already JSON (a stored `message_received`
    /// payload, a page of them): the envelope the other encoders write.
    public static func encode(_ type: ServerFrameType, payloadJSON: [UInt8], requestId: String? = nil) -> [UInt8] {
        HotFrames.frame(type: type.rawValue, requestId: requestId, payloadJSON: payloadJSON)
    }

    public static func encodeError(_ code: ErrorCode, _ message: String, requestId: String?) -> [UInt8] {
        encode(ErrorPayload(code: code, message: message, requestId: requestId), requestId: requestId)
    }

    public static func decode(_ bytes: [UInt8]) throws -> ServerFrame {
        if let frame = HotFrames.serverFrame(bytes) {
            return frame
        }
        return try decodeGeneral(bytes)
    }

    public static func decode(_ bytes: some DataProtocol) throws -> ServerFrame {
        try decode(Array(bytes))
    }

    /// Foundation's decoder alone (what the fast path must agree with).
    public static func decodeGeneral(_ bytes: some DataProtocol) throws -> ServerFrame {
        let data = bytes as? Data ?? Data(bytes)
        return try ProtocolJSON.decoder.decode(Inbound.self, from: data).frame
    }

    private struct Outbound<P: ServerPayload>: Encodable {
        var type: ServerFrameType
        var requestId: String?
        var payload: P
    }

    private struct Inbound: Decodable {
        let frame: ServerFrame

        enum CodingKeys: String, CodingKey { case type, requestId, payload }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let type = try container.decode(ServerFrameType.self, forKey: .type)
            let requestId = try container.decodeIfPresent(String.self, forKey: .requestId)
            let payload = try Self.decode(type.payloadType, container)
            frame = ServerFrame(type: type, requestId: requestId, payload: payload)
        }

        static func decode<P: ServerPayload>(_ type: P.Type, _ container: KeyedDecodingContainer<CodingKeys>) throws -> P {
            try container.decode(P.self, forKey: .payload)
        }
    }
}
