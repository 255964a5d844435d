import Crypto

/// Whisper IDs: `WSP-XXXX-XXXX-XXXX`, twelve characters of the RFC 4648 Base32
/// alphabet (`A-Z 2-7`). The first ten are random (50 bits); the last two are a
/// checksum: the first 10 bits of SHA-256 over the ASCII of the first ten, as two
/// Base32 characters. A mistyped character is caught with probability 1023/1024.
public enum WhisperID {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    /// A new random Whisper ID with a valid checksum.
    public static func generate() -> String {
        let random = SecureBytes.random(10)
        let body = random.map { alphabet[Int($0 & 0x1f)] }
        return format(body: body)
    }

    /// The two checksum characters for a ten-character body.
    static func checksum(_ body: [UInt8]) -> [UInt8] {
        let digest = Array(SHA256.hash(data: body))
        let bits = (Int(digest[0]) << 2) | (Int(digest[1]) >> 6)
        return [alphabet[bits >> 5], alphabet[bits & 0x1f]]
    }

    static func format(body: [UInt8]) -> String {
        let all = body + checksum(body)
        let text = String(decoding: all, as: UTF8.self)
        let chars = Array(text)
        return "WSP-" + String(chars[0..<4]) + "-" + String(chars[4..<8]) + "-" + String(chars[8..<12])
    }

    /// True for a well-formed Whisper ID whose checksum matches.
    public static func isValid(_ value: String) -> Bool {
        guard Format.isWhisperID(value) else { return false }
        let characters = Array(value.utf8).filter { $0 != UInt8(ascii: "-") }.dropFirst(3)
        let body = Array(characters.prefix(10))
        return Array(characters.suffix(2)) == checksum(body)
    }

    /// Upper-cases and re-inserts dashes in what a person typed ("wsp abcd efgh ijkl").
    public static func normalize(_ typed: String) -> String? {
        let compact = typed.uppercased().filter { $0.isLetter || $0.isNumber }
        guard compact.hasPrefix("WSP"), compact.count == 15 else { return nil }
        let chars = Array(compact.dropFirst(3))
        let candidate = "WSP-" + String(chars[0..<4]) + "-" + String(chars[4..<8]) + "-" + String(chars[8..<12])
        return isValid(candidate) ? candidate : nil
    }
}
