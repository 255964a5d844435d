/// A field that broke its schema rule; turned into `INVALID_PAYLOAD` naming the field.
public struct FieldViolation: Error, Sendable, Equatable {
    public var field: String
    public var rule: String

    public init(_ field: String, _ rule: String) {
        self.field = field
        self.rule = rule
    }
}

/// The string formats of docs/schemas/common.json, checked by hand-written scanners
/// (no regular expressions on the hot path). Each mirrors one `$defs` pattern.
public enum Format {
    /// `^WSP-[A-Z2-7]{4}-[A-Z2-7]{4}-[A-Z2-7]{4}$`
    public static func isWhisperID(_ value: String) -> Bool {
        let bytes = value.utf8
        guard bytes.count == 18 else { return false }
        for (index, byte) in bytes.enumerated() {
            switch index {
            case 0: guard byte == UInt8(ascii: "W") else { return false }
            case 1: guard byte == UInt8(ascii: "S") else { return false }
            case 2: guard byte == UInt8(ascii: "P") else { return false }
            case 3, 8, 13: guard byte == UInt8(ascii: "-") else { return false }
            default: guard isBase32(byte) else { return false }
            }
        }
        return true
    }

    static func isBase32(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) || (UInt8(ascii: "2")...UInt8(ascii: "7")).contains(byte)
    }

    /// `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`
    public static func isUUID(_ value: String) -> Bool {
        let bytes = value.utf8
        guard bytes.count == 36 else { return false }
        for (index, byte) in bytes.enumerated() {
            if index == 8 || index == 13 || index == 18 || index == 23 {
                guard byte == UInt8(ascii: "-") else { return false }
            } else {
                guard isHex(byte) else { return false }
            }
        }
        return true
    }

    static func isHex(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
            || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
            || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
    }

    /// `^grp-` followed by a UUID in lower case.
    public static func isGroupID(_ value: String) -> Bool {
        guard value.hasPrefix("grp-") else { return false }
        let rest = value.dropFirst(4)
        return isUUID(String(rest)) && !rest.utf8.contains { (UInt8(ascii: "A")...UInt8(ascii: "F")).contains($0) }
    }

    /// `value.lowercased()`, without building a new string when there is nothing to
    /// lower (an ID as clients and this server write it).
    public static func lowercased(_ value: String) -> String {
        value.utf8.contains { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") || $0 >= 0x80 } ? value.lowercased() : value
    }

    static func isBase64Character(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "/")
    }

    /// Standard base64 with padding, at least one byte encoded:
    /// `^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$`
    public static func isBase64(_ value: String) -> Bool {
        // A ciphertext is up to 64 KiB: read the string's own bytes, not a copy.
        var value = value
        return value.withUTF8 { bytes in
            guard !bytes.isEmpty, bytes.count % 4 == 0 else { return false }
            var padding = 0
            if bytes[bytes.count - 1] == UInt8(ascii: "=") { padding += 1 }
            if bytes[bytes.count - 2] == UInt8(ascii: "=") { padding += 1 }
            for byte in bytes[..<(bytes.count - padding)] where !isBase64Character(byte) {
                return false
            }
            return true
        }
    }

    /// Base64 that decodes to exactly `count` bytes, in canonical padded form.
    public static func isBase64(_ value: String, decodedLength count: Int) -> Bool {
        let expected = (count + 2) / 3 * 4
        guard value.utf8.count == expected, isBase64(value) else { return false }
        let padding = (3 - count % 3) % 3
        return value.utf8.suffix(padding).allSatisfy { $0 == UInt8(ascii: "=") }
            && !value.utf8.dropLast(padding).contains(UInt8(ascii: "="))
    }

    /// The number of bytes a valid base64 string decodes to.
    public static func decodedLength(ofBase64 value: String) -> Int {
        let count = value.utf8.count
        let padding = value.utf8.suffix(2).filter { $0 == UInt8(ascii: "=") }.count
        return count / 4 * 3 - padding
    }

    /// `^[A-Za-z0-9_-]{32,256}$`: the shape of the tokens this server issues. Clients
    /// treat tokens as opaque, so the schemas accept any string; a token of another
    /// shape is simply not a live session (`NOT_REGISTERED`), known without a lookup.
    public static func isSessionToken(_ value: String) -> Bool {
        let count = value.utf8.count
        guard (32...256).contains(count) else { return false }
        return value.utf8.allSatisfy {
            isBase64Character($0) && $0 != UInt8(ascii: "+") && $0 != UInt8(ascii: "/")
                || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_")
        }
    }

    /// Printable ASCII without spaces, as push tokens are.
    public static func isToken(_ value: String, maxLength: Int) -> Bool {
        let count = value.utf8.count
        return count >= 1 && count <= maxLength && value.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7f }
    }

    /// 0 ... 2^53-1 (JSON numbers stay exact there).
    public static func isTimestamp(_ value: Int64) -> Bool {
        value >= 0 && value <= 9_007_199_254_740_991
    }
}

/// Small helpers the payload types use to state their rules.
public struct Checker {
    public init() {}

    /// `rule` is built only for a violation (most rules interpolate a limit).
    public func require(_ condition: Bool, _ field: String, _ rule: @autoclosure () -> String) throws(FieldViolation) {
        if !condition { throw FieldViolation(field, rule()) }
    }

    public func whisperID(_ value: String, _ field: String) throws(FieldViolation) {
        try require(Format.isWhisperID(value), field, "must be a Whisper ID (WSP-XXXX-XXXX-XXXX)")
    }

    public func uuid(_ value: String, _ field: String) throws(FieldViolation) {
        try require(Format.isUUID(value), field, "must be a UUID")
    }

    public func base64(_ value: String, _ field: String, bytes: Int? = nil) throws(FieldViolation) {
        if let bytes {
            try require(Format.isBase64(value, decodedLength: bytes), field, "must be base64 of exactly \(bytes) bytes")
        } else {
            try require(Format.isBase64(value), field, "must be non-empty base64")
        }
    }

    public func timestamp(_ value: Int64, _ field: String) throws(FieldViolation) {
        try require(Format.isTimestamp(value), field, "must be milliseconds since 1970 (0...2^53-1)")
    }

    public func text(_ value: String, _ field: String, characters range: ClosedRange<Int>) throws(FieldViolation) {
        try require(range.contains(value.unicodeScalars.count), field, "must have \(range.lowerBound) to \(range.upperBound) characters")
    }

    public func whisperIDs(_ values: [String], _ field: String, count range: ClosedRange<Int>) throws(FieldViolation) {
        try require(range.contains(values.count), field, "must list \(range.lowerBound) to \(range.upperBound) Whisper IDs")
        for value in values {
            try whisperID(value, field)
        }
        try require(Set(values).count == values.count, field, "must not repeat a Whisper ID")
    }

    public func pushToken(_ value: String?, _ field: String) throws(FieldViolation) {
        guard let value else { return }
        try require(Format.isToken(value, maxLength: Limits.MAX_PUSH_TOKEN_CHARS), field, "must be 1 to \(Limits.MAX_PUSH_TOKEN_CHARS) printable characters")
    }
}
