/// Listener profiles (docs/protocol.md section 13, "Listener profiles"): the person
/// behind one or more listener devices. Every frame acts for the socket's device.

/// The fields of a listener's frame that carries nothing but its envelope: one shape, a
/// frame type per `Marker`.
public struct DeviceNoFields<Marker: FrameMarker>: DeviceFields, EmptyFields, Equatable {
    public typealias CodingKeys = NoKeys
    public static var frameType: ClientFrameType { Marker.frameType }

    public init() {}
    public init(from decoder: any Decoder) throws {}
    public func encode(to encoder: any Encoder) throws {}
    public func validate() throws(FieldViolation) {}
}

public enum LiveProfileGetFrame: FrameMarker { public static let frameType = ClientFrameType.liveProfileGet }
/// The device's profile.
public typealias LiveProfileGet = Payload<DeviceNoFields<LiveProfileGetFrame>>

public enum LiveProfileShareFrame: FrameMarker { public static let frameType = ClientFrameType.liveProfileShare }
/// A code another device presents to join the profile.
public typealias LiveProfileShare = Payload<DeviceNoFields<LiveProfileShareFrame>>

public enum LiveProfileLeaveFrame: FrameMarker { public static let frameType = ClientFrameType.liveProfileLeave }
/// The device leaves its profile for a new one of its own.
public typealias LiveProfileLeave = Payload<DeviceNoFields<LiveProfileLeaveFrame>>

public enum LiveProfileDeleteFrame: FrameMarker { public static let frameType = ClientFrameType.liveProfileDelete }
/// The profile goes with what it holds; each of its devices gets a new one of its own.
public typealias LiveProfileDelete = Payload<DeviceNoFields<LiveProfileDeleteFrame>>

public enum LiveProfileConversationsListFrame: FrameMarker { public static let frameType = ClientFrameType.liveProfileConversationsList }
/// The conversations that let the device's profile in.
public typealias LiveProfileConversationsList = Payload<DeviceNoFields<LiveProfileConversationsListFrame>>

/// Names the device's profile.
public struct LiveProfileRenameFields: DeviceFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case name }
    public static let frameType = ClientFrameType.liveProfileRename
    public var name: String

    public init(name: String) {
        self.name = name
    }

    public func validate() throws(FieldViolation) {
        try Checker().text(name, "name", characters: 1...Limits.MAX_LIVE_PERSON_NAME_CHARS)
    }
}
public typealias LiveProfileRename = Payload<LiveProfileRenameFields>

/// Joins the profile a code was made for.
public struct LiveProfileJoinFields: DeviceFields, Equatable {
    public enum CodingKeys: String, CodingKey, CaseIterable { case code }
    public static let frameType = ClientFrameType.liveProfileJoin
    public var code: String

    public init(code: String) {
        self.code = code
    }

    public func validate() throws(FieldViolation) {
        try Checker().require(PTTJoinCode.isValid(code), "code", "\(PTTJoinCode.length) characters of \(PTTJoinCode.alphabet)")
    }
}
public typealias LiveProfileJoin = Payload<LiveProfileJoinFields>

// MARK: - What the server sends

/// A listener device's profile: its ID, its name (none until one is given), and how
/// many devices share it.
public struct LiveProfile: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.liveProfile
    public var profileId: String
    public var name: String?
    public var devices: Int

    public init(profileId: String, name: String?, devices: Int) {
        self.profileId = profileId
        self.name = name
        self.devices = devices
    }
}

/// A code that lets one more device join the profile, until `expiresAt` (ms since 1970).
public struct LiveProfileCode: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.liveProfileCode
    public var code: String
    public var expiresAt: Int64

    public init(code: String, expiresAt: Int64) {
        self.code = code
        self.expiresAt = expiresAt
    }
}

/// The conversations that let a profile in, the latest first (at most
/// `MAX_LIVE_CONVERSATIONS`): each with its name, the name its Whisperer last whispered
/// under, whether the Whisperer is in it now, and when the profile was let in (ms).
public struct LiveProfileConversations: ServerPayload, Equatable {
    public static let frameType = ServerFrameType.liveProfileConversations
    public var conversations: [Entry]

    public struct Entry: Codable, Sendable, Equatable {
        public var conversationId: String
        public var name: String
        public var whispererName: String?
        public var live: Bool
        public var letInAt: Int64

        public init(conversationId: String, name: String, whispererName: String?, live: Bool, letInAt: Int64) {
            self.conversationId = conversationId
            self.name = name
            self.whispererName = whispererName
            self.live = live
            self.letInAt = letInAt
        }
    }

    public init(conversations: [Entry]) {
        self.conversations = conversations
    }
}
