/// A client payload: the envelope (versions, docs/protocol.md section 2, and the session
/// token where the frame acts for an identity, section 4) beside the frame's own fields at
/// the top level. The one place that reads and writes the envelope; fields read as the
/// payload's own (`payload.messageId`).
@dynamicMemberLookup
public struct Payload<Fields: PayloadFields>: ClientPayload {
    public var protocolVersion: Int
    public var cryptoVersion: Int
    /// The session token of a `SessionFields` payload; empty for the others, which carry
    /// none (registration, and a listener's frames, which act for the socket's device).
    public var sessionToken: String
    public var fields: Fields

    public static var frameType: ClientFrameType { Fields.frameType }
    public static var carriesSession: Bool { Fields.carriesSession }

    public static var fieldNames: [String] {
        Envelope.names(carryingSession: Fields.carriesSession) + Fields.fieldNames
    }

    public var presentedSessionToken: String? { Fields.carriesSession ? sessionToken : nil }

    public subscript<Value>(dynamicMember path: WritableKeyPath<Fields, Value>) -> Value {
        get { fields[keyPath: path] }
        set { fields[keyPath: path] = newValue }
    }

    public subscript<Value>(dynamicMember path: KeyPath<Fields, Value>) -> Value {
        fields[keyPath: path]
    }

    public func validate() throws(FieldViolation) {
        try fields.validate()
    }

    private enum Envelope: String, CodingKey, CaseIterable {
        case protocolVersion, cryptoVersion, sessionToken

        static func names(carryingSession: Bool) -> [String] {
            allCases.filter { carryingSession || $0 != .sessionToken }.map(\.rawValue)
        }
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Envelope.self)
        protocolVersion = try container.decode(Int.self, forKey: .protocolVersion)
        cryptoVersion = try container.decode(Int.self, forKey: .cryptoVersion)
        sessionToken = Fields.carriesSession ? try container.decode(String.self, forKey: .sessionToken) : ""
        fields = try Fields(from: decoder)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Envelope.self)
        try container.encode(protocolVersion, forKey: .protocolVersion)
        try container.encode(cryptoVersion, forKey: .cryptoVersion)
        if Fields.carriesSession { try container.encode(sessionToken, forKey: .sessionToken) }
        try fields.encode(to: encoder)
    }
}

extension Payload: Equatable where Fields: Equatable {}

extension Payload where Fields: SessionFields {
    public init(protocolVersion: Int = 1, cryptoVersion: Int = 1, sessionToken: String, _ fields: Fields) {
        self.protocolVersion = protocolVersion
        self.cryptoVersion = cryptoVersion
        self.sessionToken = sessionToken
        self.fields = fields
    }
}

extension Payload where Fields: DeviceFields {
    public init(protocolVersion: Int = 1, cryptoVersion: Int = 1, _ fields: Fields) {
        self.protocolVersion = protocolVersion
        self.cryptoVersion = cryptoVersion
        self.sessionToken = ""
        self.fields = fields
    }
}

extension Payload where Fields: SessionFields & EmptyFields {
    /// A frame that carries nothing but the session (`session_refresh`, `logout`, …).
    public init(protocolVersion: Int = 1, cryptoVersion: Int = 1, sessionToken: String) {
        self.init(protocolVersion: protocolVersion, cryptoVersion: cryptoVersion, sessionToken: sessionToken, Fields())
    }
}

/// A client frame's own fields, each decoded strictly: `Payload` refuses keys that are
/// neither the envelope's nor listed in `CodingKeys`, then `validate()` applies the rules of
/// the frame's schema in docs/schemas/ that `Codable`'s types alone cannot express.
public protocol PayloadFields: Codable, Sendable {
    associatedtype CodingKeys: CodingKey & CaseIterable & RawRepresentable<String>
    /// The frame `type` these fields travel under.
    static var frameType: ClientFrameType { get }
    /// Whether the payload acts for a signed-in identity, and so carries its session token.
    static var carriesSession: Bool { get }
    /// Every key of these fields: `CodingKeys`, unless the fields hold others' fields too.
    static var fieldNames: [String] { get }
    func validate() throws(FieldViolation)
}

extension PayloadFields {
    public static var fieldNames: [String] { CodingKeys.allCases.map(\.rawValue) }
}

/// The fields of a frame that acts for a signed-in identity.
public protocol SessionFields: PayloadFields {}

extension SessionFields {
    public static var carriesSession: Bool { true }
}

/// The fields of a frame that acts for no identity: registration's, and a listener's
/// (which act for the socket's device).
public protocol DeviceFields: PayloadFields {}

extension DeviceFields {
    public static var carriesSession: Bool { false }
}

/// Fields that can be made with nothing in them.
public protocol EmptyFields {
    init()
}

/// The fields of a frame that carries nothing but its envelope: one shape, a frame type
/// per `Marker` (`session_refresh`, `logout`, `get_turn_credentials`, and the list frames).
public struct NoFields<Marker: FrameMarker>: SessionFields, EmptyFields, Equatable {
    public typealias CodingKeys = NoKeys
    public static var frameType: ClientFrameType { Marker.frameType }

    public init() {}
    public init(from decoder: any Decoder) throws {}
    public func encode(to encoder: any Encoder) throws {}

    /// The token is opaque (any string); whether it is live is the session check's.
    public func validate() throws(FieldViolation) {}
}

/// Names the frame type of a shape that several frame types share.
public protocol FrameMarker: Sendable {
    static var frameType: ClientFrameType { get }
}

/// The keys of fields that have none.
public enum NoKeys: CodingKey, CaseIterable, RawRepresentable {
    public init?(rawValue: String) { nil }
    public init?(stringValue: String) { nil }
    public init?(intValue: Int) { nil }
    public var rawValue: String { switch self {} }
    public var stringValue: String { switch self {} }
    public var intValue: Int? { nil }
}
