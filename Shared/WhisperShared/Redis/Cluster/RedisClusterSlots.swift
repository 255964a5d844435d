/// Which of Redis Cluster's 16,384 hash slots a key belongs to, as the Redis Cluster
/// specification defines it: CRC16 (the XMODEM variant: polynomial 0x1021, initial
/// value 0) of the key, modulo 16,384; when the key holds `{` followed later by `}`
/// with at least one byte between them, only the bytes between the first `{` and the
/// first `}` after it (the hash tag) are hashed, so keys sharing a tag share a slot.
public enum RedisClusterSlots {
    public static let count = 16_384

    public static func slot(of key: some Collection<UInt8>) -> Int {
        Int(crc16(hashed(key)) & 0x3FFF)
    }

    public static func slot(of key: String) -> Int { slot(of: Array(key.utf8)) }

    /// The part of the key that is hashed.
    static func hashed<C: Collection<UInt8>>(_ key: C) -> C.SubSequence {
        guard let open = key.firstIndex(of: UInt8(ascii: "{")) else { return key[...] }
        let afterOpen = key.index(after: open)
        guard let close = key[afterOpen...].firstIndex(of: UInt8(ascii: "}")), close != afterOpen else { return key[...] }
        return key[afterOpen..<close]
    }

    /// CRC16/XMODEM, bit by bit (keys are short; no table to keep).
    static func crc16(_ bytes: some Sequence<UInt8>) -> UInt16 {
        var crc: UInt16 = 0
        for byte in bytes {
            crc ^= UInt16(byte) << 8
            for _ in 0..<8 {
                crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1
            }
        }
        return crc
    }
}

extension RedisCommand {
    /// The key that decides which node a command goes to in a cluster (its first key; a
    /// script's first key; a stream read's first stream; a sharded channel), or nil for
    /// a command that names no key (it may go to any node).
    public var routingKey: [UInt8]? {
        let arguments = self.arguments
        guard let first = arguments.first else { return nil }
        switch String(decoding: first, as: UTF8.self).uppercased() {
        case "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO":
            guard arguments.count > 3, let keys = Int(String(decoding: arguments[2], as: UTF8.self)), keys > 0 else { return nil }
            return arguments[3]
        case "XGROUP", "XINFO", "OBJECT":
            // A subcommand first, then the key.
            return arguments.count > 2 ? arguments[2] : nil
        case "MEMORY":
            guard arguments.count > 2, String(decoding: arguments[1], as: UTF8.self).uppercased() == "USAGE" else { return nil }
            return arguments[2]
        case "XREAD", "XREADGROUP":
            guard let streams = arguments.firstIndex(where: { String(decoding: $0, as: UTF8.self).uppercased() == "STREAMS" }),
                  streams + 1 < arguments.count else { return nil }
            return arguments[streams + 1]
        case "PING", "ECHO", "SCRIPT", "CONFIG", "CLIENT", "ACL", "INFO", "CLUSTER", "PUBLISH", "SUBSCRIBE", "UNSUBSCRIBE",
             "PSUBSCRIBE", "PUNSUBSCRIBE", "AUTH", "SELECT", "HELLO", "TIME", "WAIT", "WAITAOF", "DBSIZE", "FLUSHALL", "FLUSHDB",
             "COMMAND", "ASKING", "READONLY", "READWRITE", "MULTI", "EXEC", "DISCARD", "SCAN", "KEYS", "RANDOMKEY", "LASTSAVE",
             "MEMORY", "SLOWLOG", "LATENCY", "FUNCTION", "SHUTDOWN", "FAILOVER", "ROLE", "MONITOR", "DEBUG", "SAVE", "BGSAVE",
             "BGREWRITEAOF", "QUIT", "RESET":
            return nil
        default:
            return arguments.count > 1 ? arguments[1] : nil
        }
    }
}
