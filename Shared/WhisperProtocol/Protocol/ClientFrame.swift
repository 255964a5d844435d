import Foundation

/// Every frame `type` a client may send.
public enum ClientFrameType: String, CaseIterable, Sendable, Codable {
    case registerBegin = "register_begin"
    case registerProof = "register_proof"
    case sessionRefresh = "session_refresh"
    case logout
    case accountDelete = "account_delete"
    case updateTokens = "update_tokens"
    case ping
    case sendMessage = "send_message"
    case deliveryReceipt = "delivery_receipt"
    case fetchPending = "fetch_pending"
    case groupCreate = "group_create"
    case groupUpdate = "group_update"
    case groupInvitationsList = "group_invitations_list"
    case groupSendMessage = "group_send_message"
    case callInitiate = "call_initiate"
    case callAnswer = "call_answer"
    case callIceCandidate = "call_ice_candidate"
    case callEnd = "call_end"
    case getTurnCredentials = "get_turn_credentials"
    case typing
    case presenceSubscribe = "presence_subscribe"
    case reportUser = "report_user"
    case liveConversationCreate = "live_conversation_create"
    case liveConversationRename = "live_conversation_rename"
    case liveConversationDelete = "live_conversation_delete"
    case liveConversationsList = "live_conversations_list"
    case liveListenOffer = "live_listen_offer"
    case liveListenRequest = "live_listen_request"
    case liveJoining = "live_joining"
    case liveListenerPacket = "live_listener_packet"
    case liveDropping = "live_dropping"
    case liveWhisperOffer = "live_whisper_offer"
    case liveAuthorize = "live_authorize"
    case liveDeauthorize = "live_deauthorize"
    case livePacket = "live_packet"
    case liveProfileGet = "live_profile_get"
    case liveProfileRename = "live_profile_rename"
    case liveProfileShare = "live_profile_share"
    case liveProfileJoin = "live_profile_join"
    case liveProfileLeave = "live_profile_leave"
    case liveProfileDelete = "live_profile_delete"
    case liveProfileConversationsList = "live_profile_conversations_list"
    case pttChannelCreate = "ptt_channel_create"
    case pttChannelJoin = "ptt_channel_join"
    case pttChannelLeave = "ptt_channel_leave"
    case pttChannelDelete = "ptt_channel_delete"
    case pttChannelRemove = "ptt_channel_remove"
    case pttChannelRotateCode = "ptt_channel_rotate_code"
    case pttChannelsList = "ptt_channels_list"
    case pttTalkRequest = "ptt_talk_request"
    case pttTalkRelease = "ptt_talk_release"
    case pttAnnounce = "ptt_announce"
    case pttNearby = "ptt_nearby"
    case pttSignal = "ptt_signal"

    /// Frames that act for a signed-in identity and need a valid session (docs/protocol.md
    /// section 4): those whose payload carries a session token.
    public var isPrivileged: Bool { payloadType.carriesSession }

    /// The payload type of each frame type, as the payload types name it (`frameType`);
    /// `FrameDecoderTests` checks that every frame type has exactly one. (Without one, a
    /// frame would be read as a `ping`'s payload, and refused for its keys.)
    var payloadType: any ClientPayload.Type { Self.payloadTypes[self] ?? Ping.self }

    static let payloadTypes: [ClientFrameType: any ClientPayload.Type] = Dictionary(
        allPayloadTypes.map { ($0.frameType, $0) }, uniquingKeysWith: { first, _ in first }
    )

    /// Every payload type a client may send.
    static let allPayloadTypes: [any ClientPayload.Type] = [
        RegisterBegin.self, RegisterProof.self, SessionRefresh.self, Logout.self,
        AccountDelete.self, UpdateTokens.self, Ping.self, SendMessage.self,
        DeliveryReceipt.self, FetchPending.self, GroupCreate.self, GroupUpdate.self,
        GroupInvitationsList.self, GroupSendMessage.self, CallInitiate.self, CallAnswer.self,
        CallIceCandidate.self, CallEnd.self, GetTurnCredentials.self, Typing.self,
        PresenceSubscribe.self, ReportUser.self, LiveConversationCreate.self, LiveConversationRename.self,
        LiveConversationDelete.self, LiveConversationsList.self, LiveListenOffer.self, LiveListenRequest.self,
        LiveJoining.self, LiveListenerPacket.self, LiveDropping.self, LiveWhisperOffer.self,
        LiveAuthorize.self, LiveDeauthorize.self, LivePacket.self, LiveProfileGet.self, LiveProfileRename.self,
        LiveProfileShare.self, LiveProfileJoin.self, LiveProfileLeave.self, LiveProfileDelete.self,
        LiveProfileConversationsList.self, PTTChannelCreate.self,
        PTTChannelJoin.self, PTTChannelLeave.self, PTTChannelDelete.self, PTTChannelRemove.self,
        PTTChannelRotateCode.self, PTTChannelsList.self, PTTTalkRequest.self, PTTTalkRelease.self,
        PTTAnnounce.self, PTTNearby.self, PTTSignal.self,
    ]
}

/// A client frame that passed every check of docs/schemas/: envelope, type, versions
/// and payload.
public struct InboundFrame: Sendable {
    public var type: ClientFrameType
    public var requestId: String?
    public var payload: any ClientPayload
    /// The payload's JSON text as the client sent it, when the frame was read by the
    /// fast path (`HotFrames`); it passed the same checks, so it can be passed on as is.
    public var payloadJSON: [UInt8]?

    public init(type: ClientFrameType, requestId: String?, payload: any ClientPayload, payloadJSON: [UInt8]? = nil) {
        self.type = type
        self.requestId = requestId
        self.payload = payload
        self.payloadJSON = payloadJSON
    }

    /// The session token, for privileged frames.
    public var sessionToken: String? {
        payload.presentedSessionToken
    }
}

/// Why a frame was refused before any business logic ran.
public struct FrameRejection: Error, Sendable, Equatable {
    public var code: ErrorCode
    public var message: String
    /// Echoed in the error frame when the frame carried a readable one.
    public var requestId: String?

    public init(_ code: ErrorCode, _ message: String, requestId: String? = nil) {
        self.code = code
        self.message = message
        self.requestId = requestId
    }
}

/// Decodes and checks client frames, once each, straight from the bytes received.
public struct ClientFrameDecoder: Sendable {
    public init() {}

    public func decode(_ bytes: [UInt8]) -> Result<InboundFrame, FrameRejection> {
        if let frame = HotFrames.clientFrame(bytes) {
            return .success(frame)
        }
        return decodeGeneral(bytes)
    }

    public func decode(_ bytes: some DataProtocol) -> Result<InboundFrame, FrameRejection> {
        decode(Array(bytes))
    }

    /// Foundation's decoder and the strict checks alone: the answer for every frame the
    /// fast path leaves, and the one the fast path must agree with.
    public func decodeGeneral(_ bytes: some DataProtocol) -> Result<InboundFrame, FrameRejection> {
        let data = bytes as? Data ?? Data(bytes)
        do {
            let envelope = try ProtocolJSON.decoder.decode(Envelope.self, from: data)
            return .success(envelope.frame)
        } catch let rejection as FrameRejection {
            return .failure(rejection)
        } catch DecodingError.dataCorrupted(let context) where context.codingPath.isEmpty {
            return .failure(FrameRejection(.invalidPayload, "frame is not valid JSON"))
        } catch DecodingError.typeMismatch(_, let context) where context.codingPath.isEmpty {
            return .failure(FrameRejection(.invalidPayload, "frame must be a JSON object"))
        } catch {
            return .failure(FrameRejection(.invalidPayload, "frame is not valid JSON"))
        }
    }
}

/// `^[A-Za-z0-9._:-]{1,128}$`: a UUID is recommended; anything of this shape is echoed.
extension Format {
    public static func isRequestID(_ value: String) -> Bool {
        let count = value.utf8.count
        return (1...128).contains(count) && value.utf8.allSatisfy {
            isLowerAlnum($0) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0)
                || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: "-")
        }
    }
}

struct AnyCodingKey: CodingKey {
    var stringValue: String
    var intValue: Int?
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) {
        self.stringValue = String(intValue)
        self.intValue = intValue
    }
}

private struct Envelope: Decodable {
    let frame: InboundFrame

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: AnyCodingKey.self)
        var requestId: String?
        let requestKey = AnyCodingKey(stringValue: "requestId")
        if container.contains(requestKey), !(try container.decodeNil(forKey: requestKey)) {
            guard let value = try? container.decode(String.self, forKey: requestKey), Format.isRequestID(value) else {
                throw FrameRejection(.invalidPayload, "requestId must be 1 to 128 characters of A-Z a-z 0-9 . _ : -")
            }
            requestId = value
        }
        func reject(_ message: String) -> FrameRejection {
            FrameRejection(.invalidPayload, message, requestId: requestId)
        }
        if let extra = container.allKeys.first(where: { !["type", "requestId", "payload"].contains($0.stringValue) }) {
            throw reject("unknown top-level field \"\(extra.stringValue)\"")
        }
        guard let typeName = try? container.decode(String.self, forKey: AnyCodingKey(stringValue: "type")) else {
            throw reject("type is required and must be a string")
        }
        guard let type = ClientFrameType(rawValue: typeName) else {
            throw reject("unknown frame type")
        }
        let payloadKey = AnyCodingKey(stringValue: "payload")
        guard container.contains(payloadKey),
              let probe = try? container.decode(VersionProbe.self, forKey: payloadKey) else {
            throw reject("payload is required and must be an object")
        }
        if let version = probe.protocolVersion, !Limits.SUPPORTED_PROTOCOL_VERSIONS.contains(version) {
            throw reject("unsupported protocolVersion \(version); supported: \(Limits.SUPPORTED_PROTOCOL_VERSIONS.sorted())")
        }
        if let version = probe.cryptoVersion, !Limits.SUPPORTED_CRYPTO_VERSIONS.contains(version) {
            throw reject("unsupported cryptoVersion \(version); supported: \(Limits.SUPPORTED_CRYPTO_VERSIONS.sorted())")
        }
        do {
            let payload = try Self.decodePayload(type.payloadType, from: container, key: payloadKey)
            frame = InboundFrame(type: type, requestId: requestId, payload: payload)
        } catch let violation as FieldViolation {
            throw reject("payload.\(violation.field) \(violation.rule)")
        } catch let error as DecodingError {
            throw reject(Self.describe(error))
        }
    }

    private static func decodePayload<P: ClientPayload>(
        _ type: P.Type, from container: KeyedDecodingContainer<AnyCodingKey>, key: AnyCodingKey
    ) throws -> P {
        try container.decode(StrictPayload<P>.self, forKey: key).value
    }

    /// A readable account of a schema mismatch: the field path and what was wrong.
    static func describe(_ error: DecodingError) -> String {
        func path(_ codingPath: [any CodingKey]) -> String {
            codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }
                .joined(separator: ".")
                .replacingOccurrences(of: ".[", with: "[")
        }
        switch error {
        case .keyNotFound(let key, let context):
            return "\(path(context.codingPath + [key])) is required"
        case .valueNotFound(_, let context):
            return "\(path(context.codingPath)) must not be null"
        case .typeMismatch(let expected, let context):
            return "\(path(context.codingPath)) must be \(describe(expected))"
        case .dataCorrupted(let context):
            return "\(path(context.codingPath)) has a value that is not allowed"
        @unknown default:
            return "payload does not match its schema"
        }
    }

    static func describe(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Int.Type, is Int64.Type: "an integer"
        case is Bool.Type: "true or false"
        case is [String].Type, is [Any].Type: "an array"
        default: String(describing: type).contains("Array") ? "an array" : "an object"
        }
    }
}

/// The version fields, read leniently before anything else so that a frame from a
/// newer client is refused for its version, not for fields it may have added.
private struct VersionProbe: Decodable {
    var protocolVersion: Int?
    var cryptoVersion: Int?

    enum CodingKeys: String, CodingKey { case protocolVersion, cryptoVersion }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        protocolVersion = try? container.decodeIfPresent(Int.self, forKey: .protocolVersion)
        cryptoVersion = try? container.decodeIfPresent(Int.self, forKey: .cryptoVersion)
    }
}

/// Refuses keys the payload's schema does not list, then decodes and validates.
private struct StrictPayload<P: ClientPayload>: Decodable {
    let value: P

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: AnyCodingKey.self)
        let allowed = Set(P.fieldNames)
        if let extra = container.allKeys.first(where: { !allowed.contains($0.stringValue) }) {
            throw FieldViolation(extra.stringValue, "is not a field of \(P.frameType.rawValue)")
        }
        value = try P(from: decoder)
        try value.validate()
    }
}

/// Encodes client frames (what the SDK and tools send).
public enum ClientFrameCodec {
    /// The busiest frames: written field by field (chosen at compile time, no cast).
    public static func encode<P: ClientPayload & HotPayload>(_ payload: P, requestId: String? = nil) -> [UInt8] {
        HotFrames.frame(type: P.frameType.rawValue, requestId: requestId, payload: payload)
    }

    public static func encode<P: ClientPayload>(_ payload: P, requestId: String? = nil) -> [UInt8] {
        if let hot = payload as? any HotPayload {
            return HotFrames.frame(type: P.frameType.rawValue, requestId: requestId, payload: hot)
        }
        return Array((try? ProtocolJSON.encoder.encode(Outbound(type: P.frameType, requestId: requestId, payload: payload))) ?? Data())
    }

    private struct Outbound<P: ClientPayload>: Encodable {
        var type: ClientFrameType
        var requestId: String?
        var payload: P
    }
}
