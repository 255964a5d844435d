import Foundation

/// The frames every message causes (send, accept, deliver, receipt), read and written
/// without Codable when their text allows (see `FastJSON`). Each reader returns nil for
/// anything its general `Codable` twin would not turn into the same value, so callers
/// fall back to the twin; the contract tests hold the two paths to the same answers.
public protocol HotPayload {
    init?(fast object: FastJSON.Object)
    func write(to writer: inout FastJSONWriter)
}

/// Field-by-field reading of one payload object: every key must be one the reader
/// knows, with a value of the expected kind.
private struct FieldReader {
    var strings: [String: String] = [:]
    var integers: [String: Int64] = [:]

    /// Nil when a key is unknown or its value is of a kind the fast path does not read
    /// for it. `null` is accepted only for the optional keys (decoded as absent, as
    /// `decodeIfPresent` does).
    init?(_ object: FastJSON.Object, strings stringKeys: Set<String>, integers integerKeys: Set<String>, optional: Set<String>) {
        for field in object.fields {
            switch field.value {
            case .string(let value) where stringKeys.contains(field.key):
                strings[field.key] = value
            case .integer(let value) where integerKeys.contains(field.key):
                integers[field.key] = value
            case .null where optional.contains(field.key):
                continue
            default:
                return nil
            }
        }
    }
}

// MARK: - Client frames

extension SendMessage: HotPayload {
    private static let stringKeys: Set<String> = ["sessionToken", "messageId", "from", "to", "msgType", "nonce", "ciphertext", "sig", "replyTo"]
    private static let integerKeys: Set<String> = ["protocolVersion", "cryptoVersion", "timestamp"]
    private static let optionalKeys: Set<String> = ["replyTo", "reactions", "attachment"]

    /// The common shape: no reactions or attachment objects (those take the general path).
    public init?(fast object: FastJSON.Object) {
        guard let fields = FieldReader(object, strings: Self.stringKeys, integers: Self.integerKeys, optional: Self.optionalKeys),
              let protocolVersion = fields.integers["protocolVersion"], let cryptoVersion = fields.integers["cryptoVersion"],
              let timestamp = fields.integers["timestamp"], let sessionToken = fields.strings["sessionToken"],
              let messageId = fields.strings["messageId"], let from = fields.strings["from"], let to = fields.strings["to"],
              let msgType = fields.strings["msgType"].flatMap(MessageType.init(rawValue:)), let nonce = fields.strings["nonce"],
              let ciphertext = fields.strings["ciphertext"], let sig = fields.strings["sig"] else { return nil }
        self.init(
            protocolVersion: Int(protocolVersion), cryptoVersion: Int(cryptoVersion), sessionToken: sessionToken, messageId: messageId,
            from: from, to: to, msgType: msgType, timestamp: timestamp, nonce: nonce, ciphertext: ciphertext, sig: sig,
            replyTo: fields.strings["replyTo"]
        )
    }

    public func write(to writer: inout FastJSONWriter) {
        writer.beginObject()
        writer.field("protocolVersion", protocolVersion)
        writer.field("cryptoVersion", cryptoVersion)
        writer.field("sessionToken", sessionToken)
        writer.field("messageId", messageId)
        writer.messageFields(
            from: from, to: to, msgType: msgType, timestamp: timestamp, nonce: nonce, ciphertext: ciphertext, sig: sig,
            replyTo: replyTo, reactions: reactions, attachment: attachment
        )
        writer.endObject()
    }
}

extension DeliveryReceipt: HotPayload {
    private static let stringKeys: Set<String> = ["sessionToken", "messageId", "from", "to", "status"]
    private static let integerKeys: Set<String> = ["protocolVersion", "cryptoVersion", "timestamp"]

    public init?(fast object: FastJSON.Object) {
        guard let fields = FieldReader(object, strings: Self.stringKeys, integers: Self.integerKeys, optional: []),
              let protocolVersion = fields.integers["protocolVersion"], let cryptoVersion = fields.integers["cryptoVersion"],
              let timestamp = fields.integers["timestamp"], let sessionToken = fields.strings["sessionToken"],
              let messageId = fields.strings["messageId"], let from = fields.strings["from"], let to = fields.strings["to"],
              let status = fields.strings["status"].flatMap(ReceiptStatus.init(rawValue:)) else { return nil }
        self.init(
            protocolVersion: Int(protocolVersion), cryptoVersion: Int(cryptoVersion), sessionToken: sessionToken,
            messageId: messageId, from: from, to: to, status: status, timestamp: timestamp
        )
    }

    public func write(to writer: inout FastJSONWriter) {
        writer.beginObject()
        writer.field("protocolVersion", protocolVersion)
        writer.field("cryptoVersion", cryptoVersion)
        writer.field("sessionToken", sessionToken)
        writer.field("messageId", messageId)
        writer.field("from", from)
        writer.field("to", to)
        writer.field("status", status.rawValue)
        writer.field("timestamp", timestamp)
        writer.endObject()
    }
}

// MARK: - Server frames

extension MessageReceived: HotPayload {
    private static let stringKeys: Set<String> = ["messageId", "groupId", "from", "to", "msgType", "nonce", "ciphertext", "sig", "replyTo"]
    private static let integerKeys: Set<String> = ["timestamp"]
    private static let optionalKeys: Set<String> = ["groupId", "replyTo", "reactions", "attachment"]

    public init?(fast object: FastJSON.Object) {
        guard let fields = FieldReader(object, strings: Self.stringKeys, integers: Self.integerKeys, optional: Self.optionalKeys),
              let messageId = fields.strings["messageId"], let from = fields.strings["from"], let to = fields.strings["to"],
              let msgType = fields.strings["msgType"].flatMap(MessageType.init(rawValue:)), let timestamp = fields.integers["timestamp"],
              let nonce = fields.strings["nonce"], let ciphertext = fields.strings["ciphertext"], let sig = fields.strings["sig"] else { return nil }
        self.init(
            messageId: messageId, groupId: fields.strings["groupId"], from: from, to: to, msgType: msgType, timestamp: timestamp,
            nonce: nonce, ciphertext: ciphertext, sig: sig, replyTo: fields.strings["replyTo"]
        )
    }

    public func write(to writer: inout FastJSONWriter) {
        writer.beginObject()
        writer.field("messageId", messageId)
        writer.field("groupId", groupId)
        writer.messageFields(
            from: from, to: to, msgType: msgType, timestamp: timestamp, nonce: nonce, ciphertext: ciphertext, sig: sig,
            replyTo: replyTo, reactions: reactions, attachment: attachment
        )
        writer.endObject()
    }

    /// The payload alone, as the pending queue keeps it.
    public var payloadJSON: [UInt8] {
        var writer = FastJSONWriter(capacity: 256 + ciphertext.utf8.count)
        write(to: &writer)
        return writer.bytes
    }
}

extension MessageAccepted: HotPayload {
    public init?(fast object: FastJSON.Object) {
        guard let fields = FieldReader(object, strings: ["messageId", "status"], integers: [], optional: []),
              let messageId = fields.strings["messageId"], let status = fields.strings["status"] else { return nil }
        self.init(messageId: messageId, status: status)
    }

    public func write(to writer: inout FastJSONWriter) {
        writer.beginObject()
        writer.field("messageId", messageId)
        writer.field("status", status)
        writer.endObject()
    }
}

extension MessageDelivered: HotPayload {
    public init?(fast object: FastJSON.Object) {
        guard let fields = FieldReader(object, strings: ["messageId", "status"], integers: ["timestamp"], optional: []),
              let messageId = fields.strings["messageId"], let status = fields.strings["status"].flatMap(ReceiptStatus.init(rawValue:)),
              let timestamp = fields.integers["timestamp"] else { return nil }
        self.init(messageId: messageId, status: status, timestamp: timestamp)
    }

    public func write(to writer: inout FastJSONWriter) {
        writer.beginObject()
        writer.field("messageId", messageId)
        writer.field("status", status.rawValue)
        writer.field("timestamp", timestamp)
        writer.endObject()
    }
}

extension FastJSONWriter {
    /// The fields a message has on its way in (`send_message`) and out (`message_received`).
    mutating func messageFields(
        from: String, to: String, msgType: MessageType, timestamp: Int64, nonce: String, ciphertext: String, sig: String,
        replyTo: String?, reactions: [String: [String]]?, attachment: AttachmentPointer?
    ) {
        field("from", from)
        field("to", to)
        field("msgType", msgType.rawValue)
        field("timestamp", timestamp)
        field("nonce", nonce)
        field("ciphertext", ciphertext)
        field("sig", sig)
        field("replyTo", replyTo)
        if let reactions { field("reactions", json: ProtocolJSON.encodeValue(reactions)) }
        if let attachment { field("attachment", json: ProtocolJSON.encodeValue(attachment)) }
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

    /// A `send_message` or `delivery_receipt` that passes every check, or nil.
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
        default:
            return nil
        }
        // A value that breaks a rule goes the general way, which words the refusal.
        guard (try? payload.validate()) != nil else { return nil }
        let text = Array(bytes[payloadObject.byteRange])
        return InboundFrame(type: type, requestId: requestId, payload: payload, payloadJSON: text)
    }

    private static func supports(_ protocolVersion: Int, _ cryptoVersion: Int) -> Bool {
        Limits.SUPPORTED_PROTOCOL_VERSIONS.contains(protocolVersion) && Limits.SUPPORTED_CRYPTO_VERSIONS.contains(cryptoVersion)
    }

    /// A `message_received`, `message_accepted` or `message_delivered` frame, or nil.
    static func serverFrame(_ bytes: [UInt8]) -> ServerFrame? {
        guard let (typeName, requestId, payloadObject) = envelope(bytes), let type = ServerFrameType(rawValue: typeName) else { return nil }
        let payload: (any ServerPayload)? = switch type {
        case .messageReceived: MessageReceived(fast: payloadObject)
        case .messageAccepted: MessageAccepted(fast: payloadObject)
        case .messageDelivered: MessageDelivered(fast: payloadObject)
        default: nil
        }
        return payload.map { ServerFrame(type: type, requestId: requestId, payload: $0) }
    }

    /// `{"type":..., "requestId":..., "payload":{...}}` for a payload that writes itself.
    static func frame(type: String, requestId: String?, payload: some HotPayload) -> [UInt8] {
        var writer = FastJSONWriter(capacity: 512)
        writer.beginObject()
        writer.field("type", type)
        writer.field("requestId", requestId)
        writer.key("payload")
        payload.write(to: &writer)
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
