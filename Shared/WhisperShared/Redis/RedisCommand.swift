import CHiredis
import NIOCore

/// A value that can stand as one argument of a Redis command.
public protocol RedisArgument: Sendable {
    /// The argument's bytes, as Redis receives them.
    var redisBytes: [UInt8] { get }
    /// Appends the same bytes to `bytes` (without building an array of their own,
    /// where the type can).
    func appendRedisBytes(to bytes: inout [UInt8])
    /// How many bytes `appendRedisBytes` appends.
    var redisByteCount: Int { get }
}

extension RedisArgument {
    public func appendRedisBytes(to bytes: inout [UInt8]) { bytes.append(contentsOf: redisBytes) }
    public var redisByteCount: Int { redisBytes.count }
}

extension String: RedisArgument {
    public var redisBytes: [UInt8] { Array(utf8) }
    public func appendRedisBytes(to bytes: inout [UInt8]) { bytes.append(contentsOf: utf8) }
    public var redisByteCount: Int { utf8.count }
}

extension Substring: RedisArgument {
    public var redisBytes: [UInt8] { Array(utf8) }
    public func appendRedisBytes(to bytes: inout [UInt8]) { bytes.append(contentsOf: utf8) }
    public var redisByteCount: Int { utf8.count }
}

extension Int: RedisArgument {
    public var redisBytes: [UInt8] { Array(String(self).utf8) }
    // A decimal Int has at most 20 characters: the String stays inline, no allocation.
    public func appendRedisBytes(to bytes: inout [UInt8]) { bytes.append(contentsOf: String(self).utf8) }
    public var redisByteCount: Int { String(self).utf8.count }
}

extension Int64: RedisArgument {
    public var redisBytes: [UInt8] { Array(String(self).utf8) }
    public func appendRedisBytes(to bytes: inout [UInt8]) { bytes.append(contentsOf: String(self).utf8) }
    public var redisByteCount: Int { String(self).utf8.count }
}

extension Array: RedisArgument where Element == UInt8 {
    public var redisBytes: [UInt8] { self }
    public func appendRedisBytes(to bytes: inout [UInt8]) { bytes.append(contentsOf: self) }
    public var redisByteCount: Int { count }
}

/// One Redis command: the name followed by its arguments, all binary safe. The
/// arguments are kept back to back in one array (with where each ends), so building a
/// command of twenty arguments costs two allocations, not one per argument.
public struct RedisCommand: Sendable {
    /// Every argument's bytes, the name first, one after another.
    private var storage: [UInt8]
    /// Where each argument ends in `storage`.
    private var ends: [Int]

    public init(_ name: String, _ arguments: [any RedisArgument]) {
        storage = []
        storage.reserveCapacity(arguments.reduce(name.utf8.count) { $0 + $1.redisByteCount })
        ends = []
        ends.reserveCapacity(arguments.count + 1)
        append(name)
        for argument in arguments {
            append(argument)
        }
    }

    public init(_ name: String, _ arguments: any RedisArgument...) {
        self.init(name, arguments)
    }

    /// Adds one argument at the end.
    public mutating func append(_ argument: some RedisArgument) {
        argument.appendRedisBytes(to: &storage)
        ends.append(storage.count)
    }

    /// Adds arguments at the end, in order.
    public mutating func append(contentsOf arguments: [any RedisArgument]) {
        storage.reserveCapacity(storage.count + arguments.reduce(0) { $0 + $1.redisByteCount })
        ends.reserveCapacity(ends.count + arguments.count)
        for argument in arguments {
            append(argument)
        }
    }

    /// The name and arguments, each as its bytes.
    public var arguments: [[UInt8]] {
        ends.indices.map { Array(storage[start(of: $0)..<ends[$0]]) }
    }

    private func start(of index: Int) -> Int { index == 0 ? 0 : ends[index - 1] }

    /// The command name, for logs and metrics (never the arguments: they may hold tokens).
    public var name: String {
        guard let end = ends.first else { return "" }
        return String(decoding: storage[..<end], as: UTF8.self)
    }

    /// Appends the wire form of the command, produced by hiredis's command formatter.
    func encode(into buffer: inout ByteBuffer) {
        let count = ends.count
        guard count > 0 else { return }
        storage.withUnsafeBufferPointer { base in
            // Never empty: the name comes first. An empty last argument points just past
            // the end, where hiredis reads nothing (its length is 0).
            guard let start = base.baseAddress else { return }
            withUnsafeTemporaryAllocation(of: UnsafePointer<CChar>?.self, capacity: count) { argv in
                withUnsafeTemporaryAllocation(of: Int.self, capacity: count) { lengths in
                    var begin = 0
                    for index in 0..<count {
                        let end = ends[index]
                        argv.initializeElement(at: index, to: UnsafeRawPointer(start + begin).assumingMemoryBound(to: CChar.self))
                        lengths.initializeElement(at: index, to: end - begin)
                        begin = end
                    }
                    var target: UnsafeMutablePointer<CChar>?
                    let length = redisFormatCommandArgv(&target, Int32(count), argv.baseAddress, lengths.baseAddress)
                    guard length > 0, let target else { return }
                    buffer.writeBytes(UnsafeRawBufferPointer(start: target, count: Int(length)))
                    redisFreeCommand(target)
                }
            }
        }
    }
}
