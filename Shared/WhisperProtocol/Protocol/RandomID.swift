/// Random (version 4) UUIDs in lower case, the form the protocol's IDs take.
///
/// Foundation's `UUID()` on Linux opens, reads and closes `/dev/urandom` for every ID;
/// a client that makes a messageId and a requestId per message paid three system calls
/// for each. These come from the system generator (`getrandom`, no file opened).
public enum RandomID {
    public static func uuid() -> String {
        var generator = SystemRandomNumberGenerator()
        return uuid(using: &generator)
    }

    /// RFC 9562 section 5.4: 122 random bits, version nibble 4, variant bits 10.
    public static func uuid<G: RandomNumberGenerator>(using generator: inout G) -> String {
        let high = (generator.next() as UInt64) & 0xFFFF_FFFF_FFFF_0FFF | 0x0000_0000_0000_4000
        let low = (generator.next() as UInt64) & 0x3FFF_FFFF_FFFF_FFFF | 0x8000_0000_0000_0000
        return String(unsafeUninitializedCapacity: 36) { out in
            var position = 0
            func put(_ word: UInt64, nibbles range: StrideThrough<Int>) {
                for shift in range {
                    if position == 8 || position == 13 || position == 18 || position == 23 {
                        out[position] = UInt8(ascii: "-")
                        position += 1
                    }
                    out[position] = digits[Int((word >> UInt64(shift)) & 0xF)]
                    position += 1
                }
            }
            put(high, nibbles: stride(from: 60, through: 0, by: -4))
            put(low, nibbles: stride(from: 60, through: 0, by: -4))
            return position
        }
    }

    /// 15 characters of `0-9a-z` (77 random bits): an ID that Swift keeps inside the
    /// string itself, with no allocation, for IDs held per open socket (`connId`).
    public static func short() -> String {
        var generator = SystemRandomNumberGenerator()
        return short(using: &generator)
    }

    public static func short<G: RandomNumberGenerator>(using generator: inout G) -> String {
        String(unsafeUninitializedCapacity: shortLength) { out in
            for index in 0..<shortLength { out[index] = digits[Int(generator.next(upperBound: UInt64(digits.count)))] }
            return shortLength
        }
    }

    /// The digits of both forms: a UUID's hex digits are the first 16.
    private static let digits: [UInt8] = Array("0123456789abcdefghijklmnopqrstuvwxyz".utf8)

    /// The longest string Swift stores inline on 64-bit platforms.
    public static let shortLength = 15
}
