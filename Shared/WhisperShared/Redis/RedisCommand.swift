import CHiredis
import NIOCore

/// A value that can stand as one argument of a Redis command.
public protocol RedisArgument: Sendable {
    var redisBytes: [UInt8] { get }
}

extension String: RedisArgument {
    public var redisBytes: [UInt8] { Array(utf8) }
}

extension Substring: RedisArgument {
    public var redisBytes: [UInt8] { Array(utf8) }
}

extension Int: RedisArgument {
    public var redisBytes: [UInt8] { Array(String(self).utf8) }
}

extension Int64: RedisArgument {
    public var redisBytes: [UInt8] { Array(String(self).utf8) }
}

extension Array: RedisArgument where Element == UInt8 {
    public var redisBytes: [UInt8] { self }
}

/// One Redis command: the name followed by its arguments, all binary safe.
public struct RedisCommand: Sendable {
    public var arguments: [[UInt8]]

    public init(_ name: String, _ arguments: [any RedisArgument]) {
        self.arguments = [Array(name.utf8)] + arguments.map(\.redisBytes)
    }

    public init(_ name: String, _ arguments: any RedisArgument...) {
        self.init(name, arguments)
    }

    /// The command name, for logs and metrics (never the arguments: they may hold tokens).
    public var name: String {
        String(decoding: arguments.first ?? [], as: UTF8.self)
    }

    /// Appends the wire form of the command, produced by hiredis's command formatter.
    func encode(into buffer: inout ByteBuffer) {
        // One contiguous copy of every argument, so that hiredis gets a stable argv.
        var storage: [UInt8] = []
        storage.reserveCapacity(arguments.reduce(1) { $0 + $1.count })
        var offsets: [Int] = []
        offsets.reserveCapacity(arguments.count)
        for argument in arguments {
            offsets.append(storage.count)
            storage.append(contentsOf: argument)
        }
        storage.append(0)
        let lengths = arguments.map(\.count)
        storage.withUnsafeBufferPointer { base in
            let start = UnsafeRawPointer(base.baseAddress!)
            var argv: [UnsafePointer<CChar>?] = offsets.map {
                (start + $0).assumingMemoryBound(to: CChar.self)
            }
            var target: UnsafeMutablePointer<CChar>?
            let count = Int32(argv.count)
            let length = argv.withUnsafeMutableBufferPointer { argvPointer in
                lengths.withUnsafeBufferPointer { lengthPointer in
                    redisFormatCommandArgv(&target, count, argvPointer.baseAddress, lengthPointer.baseAddress)
                }
            }
            guard length > 0, let target else { return }
            buffer.writeBytes(UnsafeRawBufferPointer(start: target, count: Int(length)))
            redisFreeCommand(target)
        }
    }
}
