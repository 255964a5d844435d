import NIOCore
import NIOEmbedded
import Testing
@testable import WhisperShared

@Suite struct RedisCodecTests {
    @Test func commandsAreFormattedAsRESPArrays() {
        var buffer = ByteBufferAllocator().buffer(capacity: 64)
        RedisCommand("SET", "key", [UInt8]([0, 13, 10, 255])).encode(into: &buffer)
        let expected: [UInt8] = Array("*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$4\r\n".utf8) + [0, 13, 10, 255] + Array("\r\n".utf8)
        #expect(Array(buffer.readableBytesView) == expected)
    }

    @Test func emptyArgumentsAreKept() {
        var buffer = ByteBufferAllocator().buffer(capacity: 16)
        RedisCommand("ECHO", "").encode(into: &buffer)
        #expect(String(buffer: buffer) == "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n")
    }

    @Test func argumentsAppendedOneByOneEncodeAsGivenAtOnce() {
        let body: [UInt8] = [0, 13, 10, 255, 36]
        let given: [any RedisArgument] = ["key", 42, Int64(-7), "", Substring("sub"), body, ""]
        var appended = RedisCommand("EVALSHA", ["key"])
        appended.append(42)
        appended.append(contentsOf: [Int64(-7), "", Substring("sub")])
        appended.append(body)
        appended.append("")
        var once = ByteBufferAllocator().buffer(capacity: 64)
        RedisCommand("EVALSHA", given).encode(into: &once)
        var stepwise = ByteBufferAllocator().buffer(capacity: 64)
        appended.encode(into: &stepwise)
        let expected = "*8\r\n$7\r\nEVALSHA\r\n$3\r\nkey\r\n$2\r\n42\r\n$2\r\n-7\r\n$0\r\n\r\n$3\r\nsub\r\n$5\r\n"
        #expect(Array(once.readableBytesView) == Array(expected.utf8) + body + Array("\r\n$0\r\n\r\n".utf8))
        #expect(Array(stepwise.readableBytesView) == Array(once.readableBytesView))
        #expect(appended.name == "EVALSHA")
        #expect(appended.arguments == [Array("EVALSHA".utf8), Array("key".utf8), Array("42".utf8), Array("-7".utf8), [], Array("sub".utf8), body, []])
    }

    @Test func repliesSplitAcrossReadsAreReassembled() throws {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(RedisReplyDecoder()))
        let wire = "+OK\r\n-ERR wrong\r\n:42\r\n$5\r\nhello\r\n$-1\r\n*3\r\n$1\r\na\r\n:7\r\n*0\r\n"
        for byte in Array(wire.utf8) {
            try channel.writeInbound(ByteBuffer(bytes: [byte]))
        }
        var replies: [RESPValue] = []
        while let reply = try channel.readInbound(as: RESPValue.self) {
            replies.append(reply)
        }
        #expect(replies == [
            .simpleString("OK"),
            .error("ERR wrong"),
            .integer(42),
            .bulkString(Array("hello".utf8)),
            .null,
            .array([.bulkString([UInt8(ascii: "a")]), .integer(7), .array([])]),
        ])
        _ = try channel.finish()
    }

    @Test func aProtocolViolationIsAnError() {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(RedisReplyDecoder()))
        #expect(throws: RedisError.self) {
            try channel.writeInbound(ByteBuffer(string: "?what\r\n"))
        }
    }

    @Test func scriptsAreNamedByTheirSHA1() {
        #expect(RedisScript("return 1").sha1 == "e0e1f9fabfc9d4800c877a703b823ac0578ff8db")
    }
}
