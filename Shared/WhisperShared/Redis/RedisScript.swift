import Crypto

/// A Lua script run with EVALSHA; `sha1` is what Redis names it by.
public struct RedisScript: Sendable {
    public let source: String
    public let sha1: String

    public init(_ source: String) {
        self.source = source
        self.sha1 = Insecure.SHA1.hash(data: Array(source.utf8)).hexString
    }
}
