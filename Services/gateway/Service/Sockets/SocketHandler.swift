import Logging
import Prometheus
import NIOCore
import NIOWebSocket
import Synchronization
import WhisperShared

/// The WebSocket protocol of one client socket on its event loop (`WebSocketWire`): frames,
/// fragments (at most `maxMessageBytes`, else 1009), pings both ways, the close handshake,
/// and the sign-in deadline (4004). Complete messages go to its `SocketInbox`, handled by a
/// task that ends when the inbox is empty, so an idle socket holds no task or buffer.
final class SocketHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    /// Whole frames (`WebSocketWire.serverFrame`): whoever writes to a client socket's
    /// channel writes them.
    typealias OutboundOut = ByteBuffer

    /// Asks the handler to close with this code (sent by `ClientConnection.close`).
    struct CloseRequest: Sendable {
        let code: UInt16
        let reason: String
    }

    /// Shared by every socket of a gateway (one reference per socket, not a copy).
    final class Settings: Sendable {
        /// How often the server looks at the socket (`SocketLooks`, whose `interval` it
        /// is): it pings a client that sent nothing since the last look, and drops one
        /// that sent nothing (no pong, no frame) between two pings.
        let looks: SocketLooks
        /// How long a close the server started waits for the client's close frame.
        let closeTimeout: TimeAmount
        /// Time from the upgrade to holding a session.
        let authenticationDeadline: TimeAmount
        /// Largest message, fragments put together (and so the largest frame).
        let maxMessageBytes: Int
        /// Whether a listener device's socket holds a live-text place: one that does not
        /// by the sign-in deadline is closed like a socket without a session.
        let holdsLivePlace: @Sendable (ClientConnection) -> Bool
        /// Counts the times a socket's queue filled and its reading paused: its client
        /// sent faster than its frames were handled, and TCP now holds it back.
        let readsPaused: Counter?
        /// What handles each socket's messages, and what runs once each has closed.
        let onMessage: MessageHandler
        let onClosed: Farewell

        init(
            pingInterval: TimeAmount, closeTimeout: TimeAmount, authenticationDeadline: TimeAmount, maxMessageBytes: Int,
            holdsLivePlace: @escaping @Sendable (ClientConnection) -> Bool = { _ in false }, readsPaused: Counter? = nil,
            onMessage: @escaping MessageHandler, onClosed: @escaping Farewell
        ) {
            self.looks = SocketLooks(interval: pingInterval)
            self.closeTimeout = closeTimeout
            self.authenticationDeadline = authenticationDeadline
            self.maxMessageBytes = maxMessageBytes
            self.holdsLivePlace = holdsLivePlace
            self.readsPaused = readsPaused
            self.onMessage = onMessage
            self.onClosed = onClosed
        }
    }

    /// Handles one complete message of the socket (in arrival order, one at a time),
    /// with when it was read (`NIODeadline` uptime, ns). The closure hands the socket over
    /// to another task before the message is done with (`FrameTurn`); true when it did:
    /// the task that called stops there.
    typealias MessageHandler = @Sendable ([UInt8], UInt64, ClientConnection, @escaping @Sendable () -> Void) async -> Bool
    /// Runs once after the socket closed and every message read from it was handled.
    typealias Farewell = @Sendable (ClientConnection) async -> Void

    private let connection: ClientConnection
    private let settings: Settings

    /// The start of a frame whose bytes have not all come yet (at most one frame's).
    private var partial: ByteBuffer?
    /// A text or binary message whose later fragments have not all come yet.
    private var fragments: [UInt8]?
    /// The client broke the protocol: nothing more it sends is read.
    private var broken = false
    /// A ping went out and nothing came back since.
    private var awaitingAnswer = false
    /// Something came from the client since the last ping tick: it is alive, and needs
    /// no ping (apps that ping themselves more often than the server are never pinged).
    private var heardSinceTick = false
    /// This side sent its close frame: the next close frame ends the connection.
    private var closeSent = false
    /// Set while the socket is in its wheel (from `handlerAdded` to `stopTimers`): what
    /// `look` writes through.
    private var context: ChannelHandlerContext?
    /// The event loop's wheel of looks and this socket's place in it, while it has one.
    private var wheel: SocketLooks.Wheel?
    private var place = (slot: 0, index: 0)
    private var signInDeadline: Scheduled<Void>?
    private var closeDeadline: Scheduled<Void>?

    init(connection: ClientConnection, settings: Settings) {
        self.connection = connection
        self.settings = settings
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        let wheel = settings.looks.wheel(of: context.eventLoop)
        place = wheel.join(self)
        self.wheel = wheel
        let connection = connection
        let holdsLivePlace = settings.holdsLivePlace
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        signInDeadline = context.eventLoop.scheduleTask(in: settings.authenticationDeadline) {
            // What the scheduled task held is let go once it ran.
            bound.value.signInDeadline = nil
            // A listener device's socket acts without a session (live text), while it
            // holds a place in a conversation; one that holds none is closed, so devices
            // cannot keep sockets open for nothing.
            guard connection.whisperId == nil, !connection.isClosing else { return }
            if connection.liveDevice != nil, holdsLivePlace(connection) { return }
            connection.logger.info("socket_unauthenticated_timeout")
            connection.close(code: CloseCode.authenticationTimeout, reason: "no session on this socket in time")
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stopTimers()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let incoming = unwrapInboundIn(data)
        guard !broken else { return }
        awaitingAnswer = false
        heardSinceTick = true
        // `owned`: the buffer is this handler's own, not the read buffer NIO reuses.
        var buffer: ByteBuffer
        let owned: Bool
        if var held = partial {
            partial = nil
            var more = incoming
            held.writeBuffer(&more)
            (buffer, owned) = (held, true)
        } else {
            (buffer, owned) = (incoming, false)
        }
        do {
            while let frame = try WebSocketWire.nextClientFrame(&buffer, maxPayload: settings.maxMessageBytes) {
                handle(frame, context: context)
                if broken { return }
            }
        } catch {
            fail(context: context, error.code, error.reason)
            return
        }
        guard buffer.readableBytes > 0 else { return }
        if owned {
            buffer.discardReadBytes()
            partial = buffer
        } else {
            var kept = context.channel.allocator.buffer(capacity: buffer.readableBytes)
            kept.writeBuffer(&buffer)
            partial = kept
        }
    }

    private func handle(_ frame: WebSocketWire.ClientFrame, context: ChannelHandlerContext) {
        switch frame.opcode {
        case .text, .binary:
            guard fragments == nil else {
                fail(context: context, .protocolError, "a new message began before the last one ended")
                return
            }
            if frame.fin {
                deliver(frame.payload, context: context)
            } else {
                fragments = frame.payload
            }
        case .continuation:
            guard var message = fragments else {
                fail(context: context, .protocolError, "a continuation frame without a message")
                return
            }
            fragments = nil
            guard message.count <= settings.maxMessageBytes - frame.payload.count else {
                fail(context: context, .messageTooLarge, "message too large")
                return
            }
            message.append(contentsOf: frame.payload)
            if frame.fin {
                deliver(message, context: context)
            } else {
                fragments = message
            }
        case .ping:
            guard !closeSent else { return }
            context.writeAndFlush(wrapOutboundOut(WebSocketWire.serverFrame(.pong, frame.payload, allocator: context.channel.allocator)), promise: nil)
        case .pong:
            break
        case .connectionClose:
            receivedClose(frame.payload, context: context)
        default:
            fail(context: context, .protocolError, "unknown opcode")
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let request = event as? CloseRequest {
            sendClose(context: context, code: WebSocketErrorCode(codeNumber: Int(request.code)), reason: request.reason, closeNow: false)
        } else if event is ChannelShouldQuiesceEvent {
            // The server stops: what the drainer did not move elsewhere is closed here.
            connection.markClosing()
            sendClose(context: context, code: .goingAway, reason: "server shutting down", closeNow: false)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        stopTimers()
        partial = nil
        fragments = nil
        connection.markClosing()
        if connection.inbox.end() {
            startHandling()
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // The connection's errors (reset, broken pipe; frames the client got wrong are
        // answered in `channelRead`): the socket is done.
        connection.logger.debug("socket_error", metadata: ["error": "\(error)"])
        connection.markClosing()
        context.close(promise: nil)
    }

    // MARK: -

    private func deliver(_ message: [UInt8], context: ChannelHandlerContext) {
        guard !closeSent else { return }
        let arrival = connection.inbox.push(message)
        if arrival.pauseReading {
            settings.readsPaused?.increment()
            context.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        }
        if arrival.startHandling {
            startHandling(now: true)
        }
    }

    /// Starts the task that handles the inbox. `now`: it runs here, inside this read,
    /// until it first waits (`Task.immediate`), so that a frame read while the event loop
    /// has other work queued (replies from Redis, other sockets' answers) is decoded,
    /// checked and passed on before that work, not after it; what follows its first wait
    /// runs as any task does. Otherwise the task is queued on the event loop.
    private func startHandling(now: Bool = false) {
        Self.startHandling(connection, settings, now: now)
    }

    private static func startHandling(_ connection: ClientConnection, _ settings: Settings, now: Bool) {
        // A message that hands the socket over before it is done (`FrameTurn.release`):
        // what is queued, or read from now on, goes to a task of its own.
        let handOver: @Sendable () -> Void = {
            if connection.inbox.handOver() { startHandling(connection, settings, now: false) }
        }
        let handle: @Sendable () async -> Void = {
            while true {
                let (next, waitingSince) = connection.inbox.nextTimed()
                switch next {
                case .message(let bytes, let resumeReading):
                    if resumeReading {
                        connection.channel.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
                    }
                    if await settings.onMessage(bytes, waitingSince, connection, handOver) { return }
                case .idle:
                    return
                case .ended:
                    // Its messages still waiting for their stores are answered first.
                    await connection.turns.drained()
                    await settings.onClosed(connection)
                    return
                }
            }
        }
        if now {
            Task.immediate(operation: handle)
        } else {
            Task(operation: handle)
        }
    }

    /// The wheel moved this socket within its slot.
    func moved(to index: Int) {
        place.index = index
    }

    /// The periodic look (`SocketLooks`): pings a client heard nothing from since the
    /// last look, drops one whose ping went unanswered until this one.
    func look() {
        guard let context, !closeSent else { return }
        connection.forgetLapsedTrust()
        if signInDeadline != nil, connection.whisperId != nil {
            // Signed in: the deadline is met, and its timer is let go now rather than
            // held by an idle socket until it would have fired.
            signInDeadline?.cancel()
            signInDeadline = nil
        }
        if heardSinceTick {
            heardSinceTick = false
            return
        }
        // A socket whose reading is paused cannot show its pongs; it is not dead.
        if awaitingAnswer, !connection.inbox.isPaused {
            connection.logger.info("socket_ping_timeout")
            connection.markClosing()
            sendClose(context: context, code: .goingAway, reason: "ping timeout", closeNow: true)
            return
        }
        awaitingAnswer = true
        let payload = withUnsafeBytes(of: UInt64.random(in: .min ... .max)) { Array($0) }
        context.writeAndFlush(wrapOutboundOut(WebSocketWire.serverFrame(.ping, payload, allocator: context.channel.allocator)), promise: nil)
    }

    private func receivedClose(_ payload: [UInt8], context: ChannelHandlerContext) {
        connection.markClosing()
        guard !closeSent else {
            context.close(promise: nil)
            return
        }
        // The answer repeats the client's code (RFC 6455, 5.5.1).
        closeSent = true
        let answer = WebSocketWire.serverFrame(.connectionClose, payload.prefix(payload.count >= 2 ? 2 : 0), allocator: context.channel.allocator)
        closeAfterWriting(answer, context: context)
    }

    private func fail(context: ChannelHandlerContext, _ code: WebSocketErrorCode, _ reason: String) {
        connection.logger.info("socket_protocol_error", metadata: ["reason": "\(reason)"])
        connection.markClosing()
        broken = true
        partial = nil
        fragments = nil
        guard !closeSent else {
            context.close(promise: nil)
            return
        }
        sendClose(context: context, code: code, reason: reason, closeNow: true)
    }

    /// Sends the close frame once. `closeNow`: the connection closes once it is written
    /// (the client is at fault or gone); otherwise it waits for the client's close
    /// frame, `closeTimeout` at most.
    private func sendClose(context: ChannelHandlerContext, code: WebSocketErrorCode, reason: String, closeNow: Bool) {
        guard !closeSent, context.channel.isActive else { return }
        closeSent = true
        let frame = WebSocketWire.closeFrame(code, reason: reason, allocator: context.channel.allocator)
        if closeNow {
            closeAfterWriting(frame, context: context)
        } else {
            context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
            let channel = context.channel
            closeDeadline = context.eventLoop.scheduleTask(in: settings.closeTimeout) { channel.close(promise: nil) }
        }
    }

    private func closeAfterWriting(_ frame: ByteBuffer, context: ChannelHandlerContext) {
        let written = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(wrapOutboundOut(frame), promise: written)
        let channel = context.channel
        written.futureResult.whenComplete { _ in channel.close(promise: nil) }
    }

    private func stopTimers() {
        if let wheel {
            wheel.leave(place)
            self.wheel = nil
        }
        context = nil
        signInDeadline?.cancel()
        signInDeadline = nil
        closeDeadline?.cancel()
        closeDeadline = nil
    }
}
