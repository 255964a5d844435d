import CHiredis
import NIOCore

/// Turns bytes from a Redis socket into `RESPValue`s with hiredis's reply reader.
///
/// The reader only parses; it never touches a socket, so it runs on the channel's
/// event loop without blocking anything.
final class RedisReplyDecoder: ByteToMessageDecoder {
    typealias InboundOut = RESPValue

    private let reader: UnsafeMutablePointer<redisReader>

    init() {
        self.reader = redisReaderCreate()
    }

    deinit {
        redisReaderFree(reader)
    }

    func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        let count = buffer.readableBytes
        if count > 0 {
            let status = buffer.withUnsafeReadableBytes { bytes in
                redisReaderFeed(reader, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), bytes.count)
            }
            buffer.moveReaderIndex(forwardBy: count)
            guard status == REDIS_OK else { throw RedisError.protocolViolation(readerError) }
        }
        while true {
            var reply: UnsafeMutableRawPointer?
            guard redisReaderGetReply(reader, &reply) == REDIS_OK else {
                throw RedisError.protocolViolation(readerError)
            }
            guard let reply else { break }
            let value = RESPValue(reply: reply.assumingMemoryBound(to: redisReply.self))
            freeReplyObject(reply)
            context.fireChannelRead(wrapInboundOut(value))
        }
        return .needMoreData
    }

    func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        try decode(context: context, buffer: &buffer)
    }

    private var readerError: String {
        withUnsafeBytes(of: &reader.pointee.errstr) { raw in
            String(cString: raw.baseAddress!.assumingMemoryBound(to: CChar.self))
        }
    }
}
