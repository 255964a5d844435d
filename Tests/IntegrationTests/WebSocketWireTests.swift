import Logging
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Synchronization
import TestWaiting
import Testing
import WhisperShared
@testable import GatewayService

/// The gateway's own WebSocket framing (`WebSocketWire`), held to NIO's codec
/// (`WireFrames`): what a client's codec writes is read back the same, whatever the
/// pieces it arrives in, and every rule of RFC 6455 the gateway keeps is refused from
/// the header alone.
@Suite struct WebSocketWireTests {
    private func parseAll(_ bytes: ByteBuffer, maxPayload: Int = 1 << 20) throws -> [WebSocketWire.ClientFrame] {
        var buffer = bytes
        var frames: [WebSocketWire.ClientFrame] = []
        while let frame = try WebSocketWire.nextClientFrame(&buffer, maxPayload: maxPayload) { frames.append(frame) }
        #expect(buffer.readableBytes == 0, "every byte read")
        return frames
    }

    @Test(arguments: [0, 1, 125, 126, 127, 65_535, 65_536, 200_000])
    func aClientFrameOfEverySizeIsReadAsNIOWroteIt(size: Int) throws {
        let payload = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let frames = try parseAll(WireFrames.clientBytes(.binary, payload, mask: [0x9A, 0x00, 0xFF, 0x3C]))
        #expect(frames.count == 1)
        #expect(frames.first?.payload == payload)
        #expect(frames.first?.opcode == .binary && frames.first?.fin == true)
    }

    @Test func aFrameInPiecesIsReadOnlyOnceWholeAndFramesInOneReadEachInTurn() throws {
        var bytes = try WireFrames.clientBytes(.text, Array("first".utf8), fin: false)
        var second = try WireFrames.clientBytes(.continuation, Array(repeating: 65, count: 300))
        var third = try WireFrames.clientBytes(.ping, [1, 2, 3])
        bytes.writeBuffer(&second)
        bytes.writeBuffer(&third)
        let all = Array(bytes.readableBytesView)
        // Cut anywhere: nothing is read past the cut, and nothing twice.
        for cut in 0...all.count {
            var buffer = ByteBuffer(bytes: all[..<cut])
            var frames: [WebSocketWire.ClientFrame] = []
            while let frame = try WebSocketWire.nextClientFrame(&buffer, maxPayload: 1 << 20) { frames.append(frame) }
            buffer.writeBytes(all[cut...])
            while let frame = try WebSocketWire.nextClientFrame(&buffer, maxPayload: 1 << 20) { frames.append(frame) }
            #expect(frames.map(\.opcode) == [.text, .continuation, .ping], "cut at \(cut)")
            #expect(frames.map(\.payload) == [Array("first".utf8), Array(repeating: 65, count: 300), [1, 2, 3]])
            #expect(frames.map(\.fin) == [false, true, true])
        }
    }

    @Test func whatTheGatewayRefusesIsRefusedFromTheHeader() throws {
        func refusal(_ bytes: [UInt8], maxPayload: Int = 1_000) -> WebSocketWire.Refusal? {
            var buffer = ByteBuffer(bytes: bytes)
            do {
                _ = try WebSocketWire.nextClientFrame(&buffer, maxPayload: maxPayload)
                return nil
            } catch {
                return error
            }
        }
        #expect(refusal([0x81, 0x05]) == .unmasked, "no mask bit")
        #expect(refusal([0xC1, 0x85]) == .unmasked, "an extension bit")
        #expect(refusal([0x83, 0x80]) == .unknownOpcode, "opcode 3")
        #expect(refusal([0x8B, 0x80]) == .unknownOpcode, "opcode 11")
        #expect(refusal([0x09, 0x80]) == .badControlFrame, "a ping without FIN")
        #expect(refusal([0x89, 0xFE]) == .badControlFrame, "a ping longer than 125")
        // Only the length: the payload's bytes never came.
        #expect(refusal([0x82, 0xFE, 0x03, 0xE9]) == .tooLarge, "1,001 bytes in a 16-bit length")
        #expect(refusal([0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0]) == .tooLarge, "a 64-bit length with its top bit set")
        #expect(refusal([0x82, 0xFE, 0x03, 0xE8]) == nil, "1,000 bytes: waits for the rest")
        #expect(refusal([0x82]) == nil, "one byte: waits")
        #expect(WebSocketWire.Refusal.tooLarge.code == .messageTooLarge)
        #expect(WebSocketWire.Refusal.unmasked.code == .protocolError)
    }

    /// Hostile bytes: random edits of valid frames, and random bytes, are refused,
    /// waited on or read, never a trap, and a frame read never holds more than the bound.
    @Test func randomEditsAreRefusedOrReadAndNeverTrap() throws {
        var generator = SystemRandomNumberGenerator()
        var valid = try WireFrames.clientBytes(.text, Array(repeating: 120, count: 200), fin: false)
        var more = try WireFrames.clientBytes(.continuation, Array(repeating: 121, count: 70_000))
        valid.writeBuffer(&more)
        more = try WireFrames.clientBytes(.connectionClose, [3, 232])
        valid.writeBuffer(&more)
        let original = Array(valid.readableBytesView)
        for round in 0..<3_000 {
            var bytes = original
            if round % 3 == 0 {
                bytes = (0..<Int.random(in: 0...64, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            } else {
                for _ in 0..<Int.random(in: 1...6, using: &generator) {
                    bytes[Int.random(in: 0..<min(bytes.count, 300), using: &generator)] = UInt8.random(in: 0...255, using: &generator)
                }
            }
            var buffer = ByteBuffer(bytes: bytes)
            do {
                while let frame = try WebSocketWire.nextClientFrame(&buffer, maxPayload: 100_000) {
                    #expect(frame.payload.count <= 100_000)
                }
            } catch {
                #expect([.protocolError, .messageTooLarge].contains(error.code))
            }
        }
    }

    @Test(arguments: [0, 125, 126, 65_535, 65_536, 300_000])
    func aServerFrameIsReadByNIOsDecoder(size: Int) throws {
        let payload = (0..<size).map { UInt8(truncatingIfNeeded: $0 &+ 3) }
        let bytes = WebSocketWire.serverFrame(.text, payload, allocator: ByteBufferAllocator())
        let frames = try WireFrames.serverFrames(bytes)
        #expect(frames.count == 1)
        #expect(frames.first.map { Array(buffer: $0.data) } == payload)
        #expect(frames.first?.opcode == .text && frames.first?.fin == true && frames.first?.maskKey == nil)
        #expect(bytes.readableBytes == size + (size < 126 ? 2 : size <= 65_535 ? 4 : 10), "the shortest length")
    }

    @Test func theUpgradeAnswersTheKeyAsRFC6455Shows() {
        // RFC 6455, section 1.3.
        #expect(SocketUpgrader<Int>.acceptValue(forKey: "dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
    }

    /// Through the socket's handler: a message split over reads, and several frames in
    /// one read, reach the inbox whole and in order; a control frame between fragments
    /// is answered; a frame past the bound closes the socket with 1009.
    @Test func theSocketPutsReadsAndFragmentsTogetherInOrder() async throws {
        let channel = EmbeddedChannel()
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        let connection = ClientConnection.forTest(on: channel)
        let handled = Mutex<(messages: [[UInt8]], closed: Bool)>(([], false))
        let settings = SocketHandler.Settings(
            pingInterval: .seconds(30), closeTimeout: .seconds(1), authenticationDeadline: .hours(1), maxMessageBytes: 1_000,
            onMessage: { bytes, _, _, _ in handled.withLock { $0.messages.append(bytes) }; return false },
            onClosed: { _ in handled.withLock { $0.closed = true } }
        )
        try channel.pipeline.syncOperations.addHandler(SocketHandler(connection: connection, settings: settings))
        var stream = try WireFrames.clientBytes(.text, Array("one".utf8))
        var part = try WireFrames.clientBytes(.text, Array(repeating: 66, count: 400), fin: false)
        stream.writeBuffer(&part)
        part = try WireFrames.clientBytes(.ping, [9])
        stream.writeBuffer(&part)
        part = try WireFrames.clientBytes(.continuation, Array(repeating: 67, count: 400))
        stream.writeBuffer(&part)
        let bytes = Array(stream.readableBytesView)
        // In reads of 7 bytes.
        for start in stride(from: 0, to: bytes.count, by: 7) {
            try channel.writeInbound(ByteBuffer(bytes: bytes[start..<min(start + 7, bytes.count)]))
        }
        let expected = [Array("one".utf8), Array(repeating: 66, count: 400) + Array(repeating: 67, count: 400)]
        try await waitUntil { handled.withLock { $0.messages.count } >= 2 }
        #expect(handled.withLock { $0.messages } == expected)
        let answers = try WireFrames.written(to: channel)
        #expect(answers.map(\.opcode) == [.pong])
        #expect(answers.first.map { Array(buffer: $0.data) } == [9])
        // 1,001 bytes: closed with 1009, and nothing after it is read.
        try channel.writeInbound(WireFrames.clientBytes(.text, Array(repeating: 1, count: 1_001)))
        try channel.writeInbound(WireFrames.clientBytes(.text, Array("late".utf8)))
        let close = try WireFrames.written(to: channel)
        #expect(close.map(\.opcode) == [.connectionClose])
        var data = close.first?.data ?? ByteBuffer()
        #expect(data.readWebSocketErrorCode() == .messageTooLarge)
        // The socket closed after its close frame; what it sent before is all there was.
        try await waitUntil { handled.withLock { $0.closed } }
        #expect(handled.withLock { $0.messages } == expected, "nothing after the protocol error")
        _ = try? channel.finish(acceptAlreadyClosed: true)
    }
}
