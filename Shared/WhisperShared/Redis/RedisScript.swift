import Crypto

/// A Lua script run with EVALSHA; `sha1` is what Redis names it by.
public struct RedisScript: Sendable {
    public let source: String
    public let sha1: String

    public init(_ source: String) {
        self.source = source
        self.sha1 = Insecure.SHA1.hash(data: Array(source.utf8)).hexString
    }

    /// `EVALSHA` of this script with `keys` and `arguments`, to send alone or with others.
    public func evalsha(keys: [String], arguments: [any RedisArgument] = []) -> RedisCommand {
        var command = RedisCommand("EVALSHA", [sha1, keys.count])
        for key in keys {
            command.append(key)
        }
        command.append(contentsOf: arguments)
        return command
    }
}

extension RedisScript {
    /// `delete-if-equals.lua` (its header says what it takes and answers).
    public static let deleteIfEquals = RedisScript(LuaSource.deleteIfEquals)
}
