import Logging
import NIOCore
import NIOEmbedded
import NIOWebSocket
import WhisperShared
@testable import GatewayService

/// WebSocket frames as bytes on the wire, made and read by NIO's own codec: the tests of
/// the gateway's framing (`WebSocketWire`, `SocketHandler`) hold it to an implementation
/// that is not its own.
enum WireFrames {
    /// The bytes a client sends for `frame` (give it a mask key).
    static func clientBytes(_ frame: WebSocketFrame) throws -> ByteBuffer {
        let encoder = EmbeddedChannel(handler: WebSocketFrameEncoder())
        defer { _ = try? encoder.finish() }
        try encoder.writeOutbound(frame)
        var bytes = ByteBuffer()
        while var part = try encoder.readOutbound(as: ByteBuffer.self) { bytes.writeBuffer(&part) }
        return bytes
    }

    static func clientBytes(_ opcode: WebSocketOpcode, _ payload: [UInt8], fin: Bool = true, mask: [UInt8] = [7, 1, 200, 99]) throws -> ByteBuffer {
        try clientBytes(WebSocketFrame(fin: fin, opcode: opcode, maskKey: WebSocketMaskingKey(mask), data: ByteBuffer(bytes: payload)))
    }

    /// The frames in bytes a server wrote (unmasked, as NIO's decoder reads them).
    static func serverFrames(_ bytes: ByteBuffer, maxFrameSize: Int = 1 << 24) throws -> [WebSocketFrame] {
        let decoder = EmbeddedChannel(handler: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: maxFrameSize)))
        defer { _ = try? decoder.finish() }
        try decoder.writeInbound(bytes)
        var frames: [WebSocketFrame] = []
        while let frame = try decoder.readInbound(as: WebSocketFrame.self) { frames.append(frame) }
        return frames
    }

    /// Every frame written to `channel` so far.
    static func written(to channel: EmbeddedChannel) throws -> [WebSocketFrame] {
        var frames: [WebSocketFrame] = []
        while let bytes = try channel.readOutbound(as: ByteBuffer.self) { frames += try serverFrames(bytes) }
        return frames
    }
}

extension ClientConnection {
    /// A client socket's connection on a test channel, with the gateway's usual limits.
    static func forTest(on channel: any Channel) -> ClientConnection {
        ClientConnection(
            channel: channel, remoteAddress: "127.0.0.1",
            terms: .init(logger: Logger(label: "test"), controlLimit: RateLimitRule("30/60s")!, refusalLimit: RateLimitRule("20/60s")!)
        )
    }
}
