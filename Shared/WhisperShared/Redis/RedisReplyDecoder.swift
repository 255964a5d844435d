import CHiredis
import NIOCore

/// hiredis's reply reader: bytes in, `RESPValue`s out. It only parses; it never touches
/// a socket. Arrays are bounded (`maxElements`): hiredis allocates an array's element
/// table as soon as it reads the header, and the hiredis in Debian (0.14) has no bound
/// of its own, so one header could ask for gigabytes. Past the bound, and for a
/// negative count, the reply is an error instead.
public final class RESPReader {
    private let reader: UnsafeMutablePointer<redisReader>

    /// Far above any reply this project asks for (a page, a batch of entries).
    public static let maxElements = 1 << 20

    public init() {
        reader = redisReaderCreate()
        reader.pointee.fn = boundedReplyFunctions
    }

    deinit {
        redisReaderFree(reader)
    }

    public func feed(_ bytes: UnsafeRawBufferPointer) throws {
        guard !bytes.isEmpty else { return }
        guard redisReaderFeed(reader, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), bytes.count) == REDIS_OK else {
            throw RedisError.protocolViolation(readerError)
        }
    }

    /// The next complete reply, or nil until more bytes arrive.
    public func next() throws -> RESPValue? {
        var reply: UnsafeMutableRawPointer?
        guard redisReaderGetReply(reader, &reply) == REDIS_OK else {
            throw RedisError.protocolViolation(readerError)
        }
        guard let reply else { return nil }
        defer { freeReplyObject(reply) }
        return RESPValue(reply: reply.assumingMemoryBound(to: redisReply.self))
    }

    private var readerError: String {
        withUnsafeBytes(of: &reader.pointee.errstr) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
    }
}

/// Turns bytes from a Redis socket into `RESPValue`s (`RESPReader`), on the channel's
/// event loop without blocking anything.
final class RedisReplyDecoder: ByteToMessageDecoder {
    typealias InboundOut = RESPValue

    private let reader = RESPReader()

    func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        let count = buffer.readableBytes
        if count > 0 {
            try buffer.withUnsafeReadableBytes { try reader.feed($0) }
            buffer.moveReaderIndex(forwardBy: count)
        }
        while let value = try reader.next() {
            context.fireChannelRead(wrapInboundOut(value))
        }
        return .needMoreData
    }

    func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        try decode(context: context, buffer: &buffer)
    }
}

/// hiredis's own reply constructors, but for arrays longer than `RESPReader.maxElements`
/// (or of a negative length), which get no object: the reader reports that as an error.
private let hiredisReplyFunctions: redisReplyObjectFunctions = {
    let reader = redisReaderCreate()
    defer { redisReaderFree(reader) }
    return reader!.pointee.fn.pointee
}()

nonisolated(unsafe) private let boundedReplyFunctions: UnsafeMutablePointer<redisReplyObjectFunctions> = {
    var functions = hiredisReplyFunctions
    functions.createArray = { task, elements in
        guard elements >= 0, elements <= RESPReader.maxElements else { return nil }
        return hiredisReplyFunctions.createArray(task, elements)
    }
    let pointer = UnsafeMutablePointer<redisReplyObjectFunctions>.allocate(capacity: 1)
    pointer.initialize(to: functions)
    return pointer
}()
