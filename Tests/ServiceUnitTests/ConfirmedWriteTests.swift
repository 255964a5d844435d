import Logging
import NIOCore
import NIOEmbedded
import NIOWebSocket
import TestWaiting
import Testing
import WhisperShared
@testable import GatewayService

/// `ClientConnection.sendConfirmed`, on which a gateway relies to skip storing a
/// receipt for a sender whose socket it holds: `true` only when the socket took the
/// frame, so a `false` is stored and nothing is lost.
@Suite struct ConfirmedWriteTests {
    private let frame = Array(#"{"type":"message_delivered","payload":{}}"#.utf8)

    private func connection(on channel: NIOAsyncTestingChannel) -> ClientConnection {
        ClientConnection(
            channel: channel, remoteAddress: "127.0.0.1",
            terms: .init(
                logger: Logger(label: "test"),
                controlLimit: RateLimitRule(capacity: 10, period: .seconds(60)), refusalLimit: RateLimitRule(capacity: 10, period: .seconds(60))
            )
        )
    }

    @Test func aSocketWithRoomTakesTheFrameAndSaysSo() async throws {
        let channel = NIOAsyncTestingChannel()
        let connection = connection(on: channel)
        #expect(await connection.sendConfirmed(frame, within: .milliseconds(50)))
        let bytes = try #require(try await channel.readOutbound(as: ByteBuffer.self))
        // One whole text frame, read back by NIO's own decoder.
        let decoder = EmbeddedChannel(handler: ByteToMessageHandler(WebSocketFrameDecoder()))
        try decoder.writeInbound(bytes)
        let written = try #require(try decoder.readInbound(as: WebSocketFrame.self))
        #expect(Array(buffer: written.data) == frame)
        #expect(written.opcode == .text && written.fin)
        _ = try decoder.finish()
    }

    @Test func aSocketWithFramesWaitingIsNotTried() async throws {
        let channel = NIOAsyncTestingChannel()
        let connection = connection(on: channel)
        channel.isWritable = false
        #expect(await connection.sendConfirmed(frame, within: .milliseconds(50)) == false)
        #expect(try await channel.readOutbound(as: ByteBuffer.self) == nil)
    }

    @Test func aClosingSocketIsNotTried() async throws {
        let channel = NIOAsyncTestingChannel()
        let connection = connection(on: channel)
        connection.close(code: 1001, reason: "test")
        #expect(await connection.sendConfirmed(frame, within: .milliseconds(50)) == false)
    }

    @Test func aWriteThatDoesNotCompleteInTimeIsReportedAsNotTaken() async throws {
        let channel = NIOAsyncTestingChannel()
        let holder = HoldingWrites()
        try await channel.pipeline.addHandler(holder)
        let connection = connection(on: channel)
        let frame = self.frame
        let answer = Task { await connection.sendConfirmed(frame, within: .milliseconds(50)) }
        // The write reached the handler, which holds it: only the deadline can answer.
        try await waitUntil { try await channel.eventLoop.submit { holder.held.count }.get() == 1 }
        await channel.testingEventLoop.advanceTime(by: .milliseconds(60))
        #expect(await answer.value == false)
        // Completing the write afterwards changes nothing (and does not trap).
        try await channel.eventLoop.submit { holder.held.forEach { $0.succeed() } }.get()
    }

    @Test func aWriteThatFailsIsReportedAsNotTaken() async throws {
        let channel = NIOAsyncTestingChannel()
        let holder = HoldingWrites()
        try await channel.pipeline.addHandler(holder)
        let connection = connection(on: channel)
        let frame = self.frame
        let answer = Task { await connection.sendConfirmed(frame, within: .seconds(3_600)) }
        try await waitUntil { try await channel.eventLoop.submit { holder.held.count }.get() == 1 }
        try await channel.eventLoop.submit { holder.held.forEach { $0.fail(ChannelError.ioOnClosedChannel) } }.get()
        #expect(await answer.value == false)
    }
}

/// Keeps every write's promise without completing it (a socket that does not drain).
private final class HoldingWrites: ChannelOutboundHandler, @unchecked Sendable {
    typealias OutboundIn = ByteBuffer
    var held: [EventLoopPromise<Void>] = []

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if let promise { held.append(promise) }
    }

    func flush(context: ChannelHandlerContext) {}
}
