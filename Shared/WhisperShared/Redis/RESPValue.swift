import CHiredis

/// One reply from Redis, copied out of hiredis's reply tree into Swift values.
public enum RESPValue: Sendable, Equatable {
    case simpleString(String)
    case error(String)
    case integer(Int64)
    case bulkString([UInt8])
    case null
    case array([RESPValue])

    /// Copies a hiredis reply (and its children). The caller still owns and frees `reply`.
    init(reply: UnsafePointer<redisReply>) {
        let r = reply.pointee
        switch r.type {
        case REDIS_REPLY_STRING:
            self = .bulkString(Self.bytes(r.str, count: r.len))
        case REDIS_REPLY_STATUS:
            self = .simpleString(String(decoding: Self.bytes(r.str, count: r.len), as: UTF8.self))
        case REDIS_REPLY_ERROR:
            self = .error(String(decoding: Self.bytes(r.str, count: r.len), as: UTF8.self))
        case REDIS_REPLY_INTEGER:
            self = .integer(Int64(r.integer))
        case REDIS_REPLY_ARRAY:
            var elements: [RESPValue] = []
            elements.reserveCapacity(Int(r.elements))
            for index in 0..<Int(r.elements) {
                if let child = r.element[index] {
                    elements.append(RESPValue(reply: child))
                } else {
                    elements.append(.null)
                }
            }
            self = .array(elements)
        default:
            self = .null
        }
    }

    private static func bytes(_ pointer: UnsafeMutablePointer<CChar>?, count: Int) -> [UInt8] {
        guard let pointer, count > 0 else { return [] }
        return pointer.withMemoryRebound(to: UInt8.self, capacity: count) {
            Array(UnsafeBufferPointer(start: $0, count: count))
        }
    }
}

extension RESPValue {
    /// The value as text: bulk and simple strings, and integers in decimal.
    public var string: String? {
        switch self {
        case .bulkString(let bytes): String(decoding: bytes, as: UTF8.self)
        case .simpleString(let text): text
        case .integer(let value): String(value)
        default: nil
        }
    }

    public var bytes: [UInt8]? {
        switch self {
        case .bulkString(let bytes): bytes
        case .simpleString(let text): Array(text.utf8)
        default: nil
        }
    }

    public var int: Int64? {
        switch self {
        case .integer(let value): value
        case .bulkString, .simpleString: string.flatMap { Int64($0) }
        default: nil
        }
    }

    public var array: [RESPValue]? {
        if case .array(let values) = self { return values }
        return nil
    }

    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }
}
