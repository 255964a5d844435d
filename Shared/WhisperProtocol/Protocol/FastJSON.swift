/// A one-pass reader and writer for the JSON the busiest frames use (flat string, integer
/// and null values, one nested object). The reader is a shortcut, never a second opinion:
/// it answers only for text unmistakably in that subset and returns nil for the rest, which
/// goes through `JSONDecoder` and the schema checks, so every refusal has one source.
public enum FastJSON {
    public enum Value: Sendable, Equatable {
        case string(String)
        case integer(Int64)
        case null
        case object(Object)
    }

    public struct Field: Sendable, Equatable {
        public var key: String
        public var value: Value
    }

    public struct Object: Sendable, Equatable {
        public var fields: [Field]
        /// Where the object's text (braces included) lies in the bytes read.
        public var byteRange: Range<Int>
    }

    /// Reads `bytes` as one JSON object of the subset (surrounding white space allowed);
    /// nil when the text is anything else, valid JSON or not.
    public static func object(_ bytes: [UInt8]) -> Object? {
        bytes.withUnsafeBytes(object(in:))
    }

    /// Concrete, not generic: the hot path pays for no generic metadata lookups.
    static func object(in buffer: UnsafeRawBufferPointer) -> Object? {
        var reader = Reader(bytes: buffer)
        reader.skipSpace()
        guard let object = reader.object(depth: 0) else { return nil }
        reader.skipSpace()
        return reader.index == buffer.count ? object : nil
    }

    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var index = 0

        /// Nesting stops here: the frames have an envelope and a payload.
        static let maxDepth = 1

        init(bytes: UnsafeRawBufferPointer) {
            self.bytes = bytes
        }

        var current: UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipSpace() {
            while let byte = current, byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 {
                index += 1
            }
        }

        mutating func object(depth: Int) -> Object? {
            guard depth <= Self.maxDepth, current == UInt8(ascii: "{") else { return nil }
            let start = index
            index += 1
            skipSpace()
            var fields: [Field] = []
            if current == UInt8(ascii: "}") {
                index += 1
                return Object(fields: fields, byteRange: start..<index)
            }
            while true {
                guard let key = string() else { return nil }
                skipSpace()
                guard current == UInt8(ascii: ":") else { return nil }
                index += 1
                skipSpace()
                guard let value = value(depth: depth) else { return nil }
                // A repeated key: what it means is up to the general decoder.
                if fields.contains(where: { $0.key == key }) { return nil }
                fields.append(Field(key: key, value: value))
                skipSpace()
                switch current {
                case UInt8(ascii: ","):
                    index += 1
                    skipSpace()
                case UInt8(ascii: "}"):
                    index += 1
                    return Object(fields: fields, byteRange: start..<index)
                default:
                    return nil
                }
            }
        }

        mutating func value(depth: Int) -> Value? {
            switch current {
            case UInt8(ascii: "\""):
                return string().map(Value.string)
            case UInt8(ascii: "{"):
                return object(depth: depth + 1).map(Value.object)
            case UInt8(ascii: "n"):
                guard index + 4 <= bytes.count, bytes[index + 1] == UInt8(ascii: "u"), bytes[index + 2] == UInt8(ascii: "l"),
                      bytes[index + 3] == UInt8(ascii: "l") else { return nil }
                index += 4
                return .null
            case let byte? where byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"):
                return integer().map(Value.integer)
            default:
                return nil
            }
        }

        /// Digits only, no leading zero, at most 18 of them (always fits in Int64). What
        /// follows is checked by the caller (a `.` or `e` there makes the object fail).
        /// A longer run of digits is left to the general decoder, which refuses what does
        /// not fit: the count is checked before a digit is added, so nothing can overflow.
        mutating func integer() -> Int64? {
            let start = index
            var value: Int64 = 0
            while let byte = current, byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") {
                guard index - start < Self.maxDigits else { return nil }
                value = value &* 10 &+ Int64(byte &- UInt8(ascii: "0"))
                index += 1
            }
            if bytes[start] == UInt8(ascii: "0") && index - start > 1 { return nil }
            return value
        }

        /// 10^18 - 1 is the largest run of nines below Int64.max.
        static let maxDigits = 18

        /// Printable ASCII without escapes; anything else (a backslash, a control
        /// character, a byte of a multi-byte character) is left to the general decoder.
        mutating func string() -> String? {
            guard current == UInt8(ascii: "\"") else { return nil }
            index += 1
            let start = index
            while let byte = current {
                if byte == UInt8(ascii: "\"") {
                    let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                    index += 1
                    return text
                }
                guard byte >= 0x20 && byte < 0x7F && byte != UInt8(ascii: "\\") else { return nil }
                index += 1
            }
            return nil
        }
    }
}

/// Writes compact JSON objects field by field, escaping strings as RFC 8259 requires
/// (quotes, backslashes and control characters; `/` and non-ASCII text left as they are,
/// as `ProtocolJSON.encoder` writes them).
public struct FastJSONWriter: Sendable {
    public private(set) var bytes: [UInt8]
    private var first = true

    public init(capacity: Int = 256) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    public mutating func beginObject() {
        bytes.append(UInt8(ascii: "{"))
        first = true
    }

    public mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        first = false
    }

    /// Starts a field whose value the caller writes next (an object, or raw JSON).
    public mutating func key(_ name: String) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        appendString(name)
        bytes.append(UInt8(ascii: ":"))
    }

    public mutating func field(_ name: String, _ value: String) {
        key(name)
        appendString(value)
    }

    public mutating func field(_ name: String, _ value: String?) {
        if let value { field(name, value) }
    }

    public mutating func field(_ name: String, _ value: Int64) {
        key(name)
        bytes += String(value).utf8
    }

    public mutating func field(_ name: String, _ value: Int) {
        field(name, Int64(value))
    }

    /// A field whose value is JSON text already.
    public mutating func field(_ name: String, json: [UInt8]) {
        key(name)
        bytes += json
    }

    private mutating func appendString(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""):
                bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
            case UInt8(ascii: "\\"):
                bytes += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case 0x0A:
                bytes += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case 0x0D:
                bytes += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
            case 0x09:
                bytes += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
            case 0x08:
                bytes += [UInt8(ascii: "\\"), UInt8(ascii: "b")]
            case 0x0C:
                bytes += [UInt8(ascii: "\\"), UInt8(ascii: "f")]
            case ..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes += [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            default:
                bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}
