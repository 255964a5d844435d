import Foundation

/// The frames every message causes (send, accept, deliver, receipt), read and written
/// without Codable when their text allows (see `FastJSON`). Each reader returns nil for
/// anything its general `Codable` twin would not turn into the same value, so callers
/// fall back to the twin; the contract tests hold the two paths to the same answers.
public protocol HotPayload {
    init?(fast object: FastJSON.Object)
    func write(to writer: inout FastJSONWriter)
}

// MARK: - Client frames

/// The fields a message has both in `send_message` and in `message_received`, read as
/// they come.
struct MessageFieldReader {
    var messageId: String?, from: String?, to: String?, msgType: MessageType?, timestamp: Int64?
    var nonce: String?, ciphertext: String?, sig: String?, replyTo: String?
    var refused = false

    /// True when the field is one of these (read, or refused for its value).
    mutating func read(_ field: FastJSON.Field) -> Bool {
        switch (field.key, field.value) {
        case ("messageId", .string(let value)): messageId = value
        case ("from", .string(let value)): from = value
        case ("to", .string(let value)): to = value
        case ("msgType", .string(let value)):
            msgType = MessageType(rawValue: value)
            refused = refused || msgType == nil
        case ("timestamp", .integer(let value)): timestamp = value
        case ("nonce", .string(let value)): nonce = value
        case ("ciphertext", .string(let value)): ciphertext = value
        case ("sig", .string(let value)): sig = value
        case ("replyTo", .string(let value)): replyTo = value
        // An explicit null is what `decodeIfPresent` reads as absent.
        case ("replyTo", .null), ("reactions", .null), ("attachment", .null), ("directoryHead", .null): break
        default: return false
        }
        return true
    }

    /// The message, when every required field came.
    var message: SendMessageFields? {
        guard !refused, let messageId, let from, let to, let msgType, let timestamp, let nonce, let ciphertext, let sig else { return nil }
        return SendMessageFields(
            messageId: messageId, from: from, to: to, msgType: msgType, timestamp: timestamp, nonce: nonce, ciphertext: ciphertext, sig: sig,
            replyTo: replyTo
        )
    }
}

/// Client fields that have a fast reader and writer. `Payload` reads and writes the
/// envelope around them.
public protocol HotFields: PayloadFields {
    associatedtype Reader: HotFieldsReader where Reader.Fields == Self
    func write(fieldsTo writer: inout FastJSONWriter)
}

/// Gathers one frame's fields as they come.
public protocol HotFieldsReader {
    associatedtype Fields
    init()
    /// True when the field is one of these (read, or refused for its value).
    mutating func read(_ field: FastJSON.Field) -> Bool
    /// Every required field, or nil.
    var fields: Fields? { get }
}

/// What every idle app sends.
extension Ping: HotPayload {
    /// At most the two versions, both supported when present; anything else goes the
    /// general way, which words the refusal.
    public init?(fast object: FastJSON.Object) {
        var protocolVersion: Int?, cryptoVersion: Int?
        for field in object.fields {
            switch (field.key, field.value) {
            case ("protocolVersion", .integer(let value)): protocolVersion = Int(value)
            case ("cryptoVersion", .integer(let value)): cryptoVersion = Int(value)
            default: return nil
            }
        }
        guard HotFrames.supportsIfPresent(protocolVersion, cryptoVersion) else { return nil }
        self.init(protocolVersion: protocolVersion, cryptoVersion: cryptoVersion)
    }

    public func write(to writer: inout FastJSONWriter) {
        writer.beginObject()
        if let protocolVersion { writer.field("protocolVersion", protocolVersion) }
        if let cryptoVersion { writer.field("cryptoVersion", cryptoVersion) }
        writer.endObject()
    }
}

extension Payload: HotPayload where Fields: HotFields {
    public init?(fast object: FastJSON.Object) {
        var reader = Fields.Reader()
        var protocolVersion: Int64?, cryptoVersion: Int64?, sessionToken: String?
        for field in object.fields where !reader.read(field) {
            switch (field.key, field.value) {
            case ("protocolVersion", .integer(let value)): protocolVersion = value
            case ("cryptoVersion", .integer(let value)): cryptoVersion = value
            case ("sessionToken", .string(let value)) where Fields.carriesSession: sessionToken = value
            default: return nil
            }
        }
        guard let protocolVersion, let cryptoVersion, (sessionToken != nil) == Fields.carriesSession,
              let fields = reader.fields else { return nil }
        self.protocolVersion = Int(protocolVersion)
        self.cryptoVersion = Int(cryptoVersion)
        self.sessionToken = sessionToken ?? ""
        self.fields = fields
    }

    public func write(to writer: inout FastJSONWriter) {
        write(to: &writer, withSessionToken: true)
    }

    /// Without `sessionToken`: what the gateway passes on once it has checked it.
    public func write(to writer: inout FastJSONWriter, withSessionToken: Bool) {
        writer.beginObject()
        writer.field("protocolVersion", protocolVersion)
        writer.field("cryptoVersion", cryptoVersion)
        if withSessionToken && Fields.carriesSession { writer.field("sessionToken", sessionToken) }
        fields.write(fieldsTo: &writer)
        writer.endObject()
    }
}

extension SendMessageFields: HotFields {
    /// The common shape: no reactions or attachment objects (those take the general path).
    public struct Reader: HotFieldsReader {
        var message = MessageFieldReader()

        public init() {}

        public mutating func read(_ field: FastJSON.Field) -> Bool {
            message.read(field)
        }

        public var fields: SendMessageFields? { message.message }
    }

    /// Also `message_received`'s, which holds these fields.
    public func write(fieldsTo writer: inout FastJSONWriter) {
        writer.field("messageId", messageId)
        writer.field("from", from)
        writer.field("to", to)
        writer.field("msgType", msgType.rawValue)
        writer.field("timestamp", timestamp)
        writer.field("nonce", nonce)
        writer.field("ciphertext", ciphertext)
        writer.field("sig", sig)
        writer.field("replyTo", replyTo)
        if let reactions { writer.field("reactions", json: ProtocolJSON.encodeValue(reactions)) }
        if let attachment { writer.field("attachment", json: ProtocolJSON.encodeValue(attachment)) }
        if let directoryHead { writer.field("directoryHead", json: ProtocolJSON.encodeValue(directoryHead)) }
    }
}

extension GroupSendMessageFields: HotFields {
    public struct Reader: HotFieldsReader {
        var groupId: String?
        var message = MessageFieldReader()

        public init() {}

        public mutating func read(_ field: FastJSON.Field) -> Bool {
            if case ("groupId", .string(let value)) = (field.key, field.value) {
                groupId = value
                return true
            }
            return message.read(field)
        }

        public var fields: GroupSendMessageFields? {
            guard let groupId, let message = message.message else { return nil }
            return GroupSendMessageFields(groupId: groupId, message: message)
        }
    }

    public func write(fieldsTo writer: inout FastJSONWriter) {
        writer.field("groupId", groupId)
        message.write(fieldsTo: &writer)
    }
}

extension DeliveryReceiptFields: HotFields {
    public struct Reader: HotFieldsReader {
        var timestamp: Int64?, messageId: String?, from: String?, to: String?, status: ReceiptStatus?
        var refused = false

        public init() {}

        public mutating func read(_ field: FastJSON.Field) -> Bool {
            switch (field.key, field.value) {
            case ("timestamp", .integer(let value)): timestamp = value
            case ("messageId", .string(let value)): messageId = value
            case ("from", .string(let value)): from = value
            case ("to", .string(let value)): to = value
            case ("status", .string(let value)):
                status = ReceiptStatus(rawValue: value)
                refused = refused || status == nil
            default: return false
            }
            return true
        }

        public var fields: DeliveryReceiptFields? {
            guard !refused, let timestamp, let messageId, let from, let to, let status else { return nil }
            return DeliveryReceiptFields(messageId: messageId, from: from, to: to, status: status, timestamp: timestamp)
        }
    }

    public func write(fieldsTo writer: inout FastJSONWriter) {
        writer.field("messageId", messageId)
        writer.field("from", from)
        writer.field("to", to)
        writer.field("status", status.rawValue)
        writer.field("timestamp", timestamp)
    }
}

// MARK: - Server frames

extension MessageReceived: HotPayload {
    public init?(fast object: FastJSON.Object) {
        var message = MessageFieldReader()
        var groupId: String?
        for field in object.fields where !message.read(field) {
            switch (field.key, field.value) {
            case ("groupId", .string(let value)): groupId = value
            case ("groupId", .null): continue
            default: return nil
            }
        }
        guard let fields = message.message else { return nil }
        self.init(fields, groupId: groupId)
    }

    public func write(to writer: inout FastJSONWriter) {
        writer.beginObject()
        message.write(fieldsTo: &writer)
        writer.field("groupId", groupId)
        writer.endObject()
    }

    /// The payload alone, as the pending queue keeps it.
    public var payloadJSON: [UInt8] {
        var writer = FastJSONWriter(capacity: 256 + message.ciphertext.utf8.count)
        write(to: &writer)
        return writer.bytes
    }
}

extension MessageAccepted: HotPayload {
    public init?(fast object: FastJSON.Object) {
        var messageId: String?, status: String?
        for field in object.fields {
            switch (field.key, field.value) {
            case ("messageId", .string(let value)): messageId = value
            case ("status", .string(let value)): status = value
            default: return nil
            }
        }
        guard let messageId, let status else { return nil }
        self.init(messageId: messageId, status: status)
    }

    public func write(to writer: inout FastJSONWriter) {
        writer.beginObject()
        writer.field("messageId", messageId)
        writer.field("status", status)
        writer.endObject()
    }
}

/// The answer to every idle app's `ping`.
extension Pong: HotPayload {
    public init?(fast object: FastJSON.Object) {
        var serverTime: Int64?
        for field in object.fields {
            switch (field.key, field.value) {
            case ("serverTime", .integer(let value)): serverTime = value
            default: return nil
            }
        }
        guard let serverTime else { return nil }
        self.init(serverTime: serverTime)
    }

    public func write(to writer: inout FastJSONWriter) {
        writer.beginObject()
        writer.field("serverTime", serverTime)
        writer.endObject()
    }
}

/// Refusals: one per refused frame, many of them past capacity ("the server is busy").
extension ErrorPayload: HotPayload {
    public init?(fast object: FastJSON.Object) {
        var code: ErrorCode?, message: String?, requestId: String?
        for field in object.fields {
            switch (field.key, field.value) {
            case ("code", .string(let value)):
                guard let value = ErrorCode(rawValue: value) else { return nil }
                code = value
            case ("message", .string(let value)): message = value
            case ("requestId", .string(let value)): requestId = value
            case ("requestId", .null): continue
            default: return nil
            }
        }
        guard let code, let message else { return nil }
        self.init(code: code, message: message, requestId: requestId)
    }

    public func write(to writer: inout FastJSONWriter) {
        writer.beginObject()
        writer.field("code", code.rawValue)
        writer.field("message", message)
        writer.field("requestId", requestId)
        writer.endObject()
    }
}

extension MessageDelivered: HotPayload {
    public init?(fast object: FastJSON.Object) {
        var messageId: String?, status: ReceiptStatus?, timestamp: Int64?, from: String?
        for field in object.fields {
            switch (field.key, field.value) {
            case ("messageId", .string(let value)): messageId = value
            case ("status", .string(let value)):
                guard let value = ReceiptStatus(rawValue: value) else { return nil }
                status = value
            case ("timestamp", .integer(let value)): timestamp = value
            case ("from", .string(let value)): from = value
            default: return nil
            }
        }
        guard let messageId, let status, let timestamp else { return nil }
        self.init(messageId: messageId, status: status, timestamp: timestamp, from: from)
    }

    public func write(to writer: inout FastJSONWriter) {
        writer.beginObject()
        writer.field("messageId", messageId)
        writer.field("status", status.rawValue)
        writer.field("timestamp", timestamp)
        writer.field("from", from)
        writer.endObject()
    }
}

// MARK: - Envelopes

enum HotFrames {
    /// `{"type": ..., "requestId"?: ..., "payload": {...}}` of the subset, split up.
    static func envelope(_ bytes: [UInt8]) -> (type: String, requestId: String?, payload: FastJSON.Object)? {
        guard let top = FastJSON.object(bytes) else { return nil }
        var type: String?
        var requestId: String?
        var payload: FastJSON.Object?
        for field in top.fields {
            switch (field.key, field.value) {
            case ("type", .string(let value)): type = value
            case ("requestId", .string(let value)) where Format.isRequestID(value): requestId = value
            case ("requestId", .null): continue
            case ("payload", .object(let value)): payload = value
            default: return nil
            }
        }
        guard let type, let payload else { return nil }
        return (type, requestId, payload)
    }

    /// A `send_message`, `delivery_receipt` or `ping` (what every idle app sends) that
    /// passes every check, or nil.
    static func clientFrame(_ bytes: [UInt8]) -> InboundFrame? {
        guard let (typeName, requestId, payloadObject) = envelope(bytes), let type = ClientFrameType(rawValue: typeName) else { return nil }
        let payload: any ClientPayload
        switch type {
        case .sendMessage:
            guard let message = SendMessage(fast: payloadObject), supports(message.protocolVersion, message.cryptoVersion) else { return nil }
            payload = message
        case .deliveryReceipt:
            guard let receipt = DeliveryReceipt(fast: payloadObject), supports(receipt.protocolVersion, receipt.cryptoVersion) else { return nil }
            payload = receipt
        case .ping:
            guard let ping = Ping(fast: payloadObject) else { return nil }
            payload = ping
        default:
            return nil
        }
        // A value that breaks a rule goes the general way, which words the refusal.
        guard (try? payload.validate()) != nil else { return nil }
        let text = Array(bytes[payloadObject.byteRange])
        return InboundFrame(type: type, requestId: requestId, payload: payload, payloadJSON: text)
    }

    /// `ping`'s payload: nothing, or versions the server supports.
    static func supportsIfPresent(_ protocolVersion: Int?, _ cryptoVersion: Int?) -> Bool {
        protocolVersion.map { Limits.SUPPORTED_PROTOCOL_VERSIONS.contains($0) } ?? true
            && cryptoVersion.map { Limits.SUPPORTED_CRYPTO_VERSIONS.contains($0) } ?? true
    }

    private static func supports(_ protocolVersion: Int, _ cryptoVersion: Int) -> Bool {
        supportsIfPresent(protocolVersion, cryptoVersion)
    }

    /// A `message_received`, `message_accepted`, `message_delivered`, `error` or `pong`
    /// frame, or nil.
    static func serverFrame(_ bytes: [UInt8]) -> ServerFrame? {
        guard let (typeName, requestId, payloadObject) = envelope(bytes), let type = ServerFrameType(rawValue: typeName) else { return nil }
        let payload: (any ServerPayload)? = switch type {
        case .messageReceived: MessageReceived(fast: payloadObject)
        case .messageAccepted: MessageAccepted(fast: payloadObject)
        case .messageDelivered: MessageDelivered(fast: payloadObject)
        case .error: ErrorPayload(fast: payloadObject)
        case .pong: Pong(fast: payloadObject)
        default: nil
        }
        return payload.map { ServerFrame(type: type, requestId: requestId, payload: $0) }
    }

    /// `{"type":..., "requestId":..., "payload":{...}}` for a payload that writes itself.
    static func frame(type: String, requestId: String?, payload: some HotPayload) -> [UInt8] {
        envelope(type: type, requestId: requestId, capacity: 512) { writer in
            writer.key("payload")
            payload.write(to: &writer)
        }
    }

    /// The same envelope around a payload that is JSON already (a stored message, a page).
    static func frame(type: String, requestId: String?, payloadJSON: [UInt8]) -> [UInt8] {
        envelope(type: type, requestId: requestId, capacity: payloadJSON.count + 64) { $0.field("payload", json: payloadJSON) }
    }

    /// Every server and client frame this module writes by hand has its envelope written here.
    private static func envelope(type: String, requestId: String?, capacity: Int, payload: (inout FastJSONWriter) -> Void) -> [UInt8] {
        var writer = FastJSONWriter(capacity: capacity)
        writer.beginObject()
        writer.field("type", type)
        writer.field("requestId", requestId)
        payload(&writer)
        writer.endObject()
        return writer.bytes
    }
}

extension ProtocolJSON {
    /// One of our own value types as JSON (cannot fail for them).
    static func encodeValue(_ value: some Encodable) -> [UInt8] {
        Array((try? encoder.encode(value)) ?? Data("null".utf8))
    }
}
