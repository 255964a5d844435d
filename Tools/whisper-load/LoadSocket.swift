import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import WhisperClient
import WhisperShared

/// What one load socket does once bound to its session.
struct LoadRole: Sendable {
    enum Kind: Sendable {
        /// Sends to `peer` on `pace`.
        case sender(peer: PeerKeys, pace: SendPace)
        /// Acknowledges every message from `peer`; measures those that arrive after `measureFrom`.
        case recipient(peer: PeerKeys, verify: Bool, measureFrom: ContinuousClock.Instant)
        /// An idle app: bound, holding its presence, sending a `ping` frame every
        /// `pingEvery` (the SDK's default is 20 s), from a random phase.
        case idle(pingEvery: TimeAmount)
    }

    var whisperId: String
    var keys: WhisperKeys
    var sessionToken: String
    var kind: Kind
    var stats: Stats
    /// A sender's messages made before the run (signed, sealed and encoded, each frame
    /// with its messageId as its requestId), sent in order; past them, messages are
    /// made as they are sent.
    var prepared: [PreparedMessage] = []
}

/// One load message with its frame (whose requestId is the messageId), made ahead of
/// its send or as it is sent.
struct PreparedMessage: Sendable {
    var message: SendMessage
    var frame: [UInt8]

    /// One message from `sender` to `peer` (an Ed25519 signature and a seal).
    init(from sender: (whisperId: String, keys: WhisperKeys), to peer: PeerKeys, sessionToken: String, key: ConversationKey?) {
        message = MessageCrypto.makeMessage(Array("load test message payload".utf8), from: sender, to: peer, sessionToken: sessionToken, key: key)
        frame = ClientFrameCodec.encode(message, requestId: message.messageId)
    }

    /// `count` messages made now; the work of a client that is not this machine's to
    /// measure.
    static func make(_ count: Int, from sender: (whisperId: String, keys: WhisperKeys), to peer: PeerKeys, sessionToken: String) -> [PreparedMessage] {
        let key = ConversationKey(mine: sender.keys, peer: peer)
        return (0..<max(0, count)).map { _ in PreparedMessage(from: sender, to: peer, sessionToken: sessionToken, key: key) }
    }
}

/// The client side of a WebSocket's messages, for the generator's socket handlers:
/// answers pings, closes on the server's close, and puts fragmented messages together.
struct WebSocketMessages {
    private var fragments: ByteBuffer?

    /// The complete text or binary message `frame` ends, if any.
    mutating func read(_ frame: WebSocketFrame, context: ChannelHandlerContext) -> ByteBuffer? {
        switch frame.opcode {
        case .ping:
            context.writeAndFlush(NIOAny(WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: frame.unmaskedData)), promise: nil)
        case .connectionClose:
            context.close(promise: nil)
        case .text, .binary:
            if frame.fin { return frame.unmaskedData }
            fragments = frame.unmaskedData
        case .continuation:
            var data = frame.unmaskedData
            fragments?.writeBuffer(&data)
            if frame.fin, let whole = fragments {
                fragments = nil
                return whole
            }
        default:
            break
        }
        return nil
    }

    /// Writes one text message (masked, as a client must).
    static func write(_ data: ByteBuffer, context: ChannelHandlerContext) {
        context.writeAndFlush(NIOAny(WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: data)), promise: nil)
    }
}

/// The generator's WebSocket: the same frames as the SDK (`ClientFrameCodec`,
/// `ServerFrameCodec`, `MessageCrypto`), but handled on the socket's event loop as they
/// arrive, with no task, actor hop or continuation per frame. The generator shares the
/// machine with the servers it measures; the SDK's per-frame concurrency machinery cost
/// it about as much CPU as one of the gateways.
enum LoadSocket {
    /// Opens a socket to `url` (`ws://host:port/path`), binds it to the role's session
    /// with a `fetch_pending` (a socket's first valid session binds it and makes it the
    /// identity's live one), and returns once that was answered. The role then runs by
    /// itself until the channel is closed.
    static func open(url: String, role: LoadRole, on eventLoop: any EventLoop) async throws -> any Channel {
        try await open(url: url, on: eventLoop) { bound in LoadSocketHandler(role: role, bound: bound) }
    }

    /// Opens a WebSocket to `url` (`ws://host:port/path`, asking for `subprotocol` when
    /// given) with the handler `makeHandler` makes, which succeeds the promise it is given
    /// once its socket is ready for the load (signed in), and returns then.
    static func open(
        url: String, subprotocol: String? = nil, on eventLoop: any EventLoop,
        makeHandler: @escaping @Sendable (EventLoopPromise<Void>) -> some ChannelHandler
    ) async throws -> any Channel {
        guard let parsed = URL(string: url), let host = parsed.host else { throw LoadSocketError.badURL(url) }
        let port = parsed.port ?? 80
        let path = parsed.path.isEmpty ? "/" : parsed.path
        let bound = eventLoop.makePromise(of: Void.self)
        let channel = try await ClientBootstrap(group: eventLoop)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                let upgrader = NIOWebSocketClientUpgrader(maxFrameSize: 1 << 22, automaticErrorHandling: true) { channel, _ in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(makeHandler(bound))
                    }
                }
                return channel.eventLoop.makeCompletedFuture {
                    let requester = UpgradeRequester(host: "\(host):\(port)", path: path, subprotocol: subprotocol)
                    try channel.pipeline.syncOperations.addHTTPClientHandlers(
                        withClientUpgrade: (upgraders: [upgrader], completionHandler: { _ in })
                    )
                    try channel.pipeline.syncOperations.addHandler(requester)
                }
            }
            .connect(host: host, port: port)
            .get()
        channel.closeFuture.whenComplete { _ in bound.fail(LoadSocketError.closed) }
        try await bound.futureResult.get()
        return channel
    }
}

enum LoadSocketError: Error {
    case badURL(String)
    case closed
    case refused(String)
}

/// Sends the HTTP request that asks for the WebSocket upgrade once connected; stays in
/// the pipeline afterwards, passing frames on.
private final class UpgradeRequester: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    typealias OutboundOut = HTTPClientRequestPart

    let host: String
    let path: String
    let subprotocol: String?

    init(host: String, path: String, subprotocol: String?) {
        self.host = host
        self.path = path
        self.subprotocol = subprotocol
    }

    func channelActive(context: ChannelHandlerContext) {
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: host)
        headers.add(name: "Content-Length", value: "0")
        if let subprotocol { headers.add(name: "Sec-WebSocket-Protocol", value: subprotocol) }
        context.write(wrapOutboundOut(.head(HTTPRequestHead(version: .http1_1, method: .GET, uri: path, headers: headers))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.fireChannelRead(data)
    }

    /// A refused upgrade ends here: close, so that `open` fails.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// One party of the load on its socket. All of its state lives on the channel's event loop.
private final class LoadSocketHandler: ChannelInboundHandler, PacedSender {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    let role: LoadRole
    let bound: EventLoopPromise<Void>
    /// The request that binds the socket; its answer starts the role.
    let bindRequestId = RandomID.uuid()
    var started = false
    var messages = WebSocketMessages()

    /// The shared key with the peer (`crypto_box_beforenm`), for sealing and opening
    /// (nil for an unusable peer key: `MessageCrypto` then works from the key pair each time).
    let conversation: ConversationKey?
    // Sender state.
    var inFlight: [String: ContinuousClock.Instant] = [:]
    let pace: SendPace
    var paceState = PaceState()
    var unanswered: Int { inFlight.count }
    var nextPrepared = 0
    var bindAttempts = 0
    /// An idle socket's pings.
    var pinger: RepeatedTask?

    init(role: LoadRole, bound: EventLoopPromise<Void>) {
        self.role = role
        self.bound = bound
        let peer: PeerKeys?
        switch role.kind {
        case .sender(let to, let pace):
            peer = to
            self.pace = pace
        case .recipient(let from, _, _):
            peer = from
            pace = SendPace(perSecond: 0, phase: 0, arrivals: .even, window: 0, end: .now)
        case .idle:
            peer = nil
            pace = SendPace(perSecond: 0, phase: 0, arrivals: .even, window: 0, end: .now)
        }
        conversation = peer.flatMap { ConversationKey(mine: role.keys, peer: $0) }
    }

    func handlerAdded(context: ChannelHandlerContext) {
        requestBind(context: context)
    }

    private func requestBind(context: ChannelHandlerContext) {
        let fetch = FetchPending(protocolVersion: 1, cryptoVersion: 1, sessionToken: role.sessionToken, .init(cursor: nil, limit: 1))
        write(ClientFrameCodec.encode(fetch, requestId: bindRequestId), context: context)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if let message = messages.read(unwrapInboundIn(data), context: context) {
            handle(Array(message.readableBytesView), context: context)
        }
    }

    private func handle(_ bytes: [UInt8], context: ChannelHandlerContext) {
        guard let frame = try? ServerFrameCodec.decode(bytes) else {
            role.stats.failed("unreadable frame")
            return
        }
        if !started {
            guard frame.requestId == bindRequestId else { return }
            // A busy server (its backlog at the limit) asks to come back: as a client does.
            if frame.type == .error, frame.payload(as: ErrorPayload.self)?.code == .rateLimited, bindAttempts < 100 {
                bindAttempts += 1
                let loop = context.eventLoop
                let handlerContext = NIOLoopBound(context, eventLoop: loop)
                loop.scheduleTask(in: .milliseconds(100)) { self.requestBind(context: handlerContext.value) }
                return
            }
            guard frame.type == .pendingMessages else {
                bound.fail(LoadSocketError.refused(frame.type.rawValue))
                context.close(promise: nil)
                return
            }
            started = true
            bound.succeed()
            start(context: context)
            return
        }
        switch frame.type {
        case .messageReceived:
            guard case .recipient(let peer, let verify, let measureFrom) = role.kind,
                  let message = frame.payload(as: MessageReceived.self) else { return }
            if verify {
                guard (try? MessageCrypto.open(message, by: (role.whisperId, role.keys), sender: peer, key: conversation)) != nil else {
                    role.stats.failed("undecryptable")
                    return
                }
            }
            role.stats.received(message, measure: ContinuousClock.now >= measureFrom)
            let receipt = DeliveryReceipt(
                protocolVersion: 1, cryptoVersion: 1, sessionToken: role.sessionToken, .init(messageId: message.messageId,
                from: role.whisperId, to: message.from, status: .delivered, timestamp: Clock.millisecondsNow())
            )
            write(ClientFrameCodec.encode(receipt), context: context)
        case .messageAccepted, .error:
            guard let requestId = frame.requestId, let sentAt = inFlight.removeValue(forKey: requestId) else { return }
            if frame.type == .messageAccepted {
                role.stats.accepted(after: .now - sentAt)
            } else {
                // The code and what the message says, up to its first number or ';'
                // ("RATE_LIMITED the server is busy"), so that kinds add up.
                let error = frame.payload(as: ErrorPayload.self)
                let what = error?.message.prefix { $0 != ";" && !$0.isNumber }.trimmingCharacters(in: .whitespaces) ?? ""
                role.stats.failed("refused " + (error?.code.rawValue ?? "?") + (what.isEmpty ? "" : " (\(what))"))
            }
            answered(context: context)
        default:
            break
        }
    }

    private func start(context: ChannelHandlerContext) {
        switch role.kind {
        case .sender:
            startSending(context: context)
        case .idle(let every):
            let ping = context.channel.allocator.buffer(bytes: ClientFrameCodec.encode(Ping()))
            let handlerContext = NIOLoopBound(context, eventLoop: context.eventLoop)
            let phase = TimeAmount.nanoseconds(Int64.random(in: 0..<max(1, every.nanoseconds)))
            pinger = context.eventLoop.scheduleRepeatedTask(initialDelay: phase, delay: every) { _ in
                WebSocketMessages.write(ping, context: handlerContext.value)
            }
        case .recipient:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        pinger?.cancel()
        pinger = nil
        context.fireChannelInactive()
    }

    func sendOne(context: ChannelHandlerContext) {
        guard case .sender(let peer, _) = role.kind else { return }
        send(to: peer, context: context)
    }

    private func send(to peer: PeerKeys, context: ChannelHandlerContext) {
        let prepared: PreparedMessage
        if nextPrepared < role.prepared.count {
            prepared = role.prepared[nextPrepared]
            nextPrepared += 1
        } else {
            prepared = PreparedMessage(from: (role.whisperId, role.keys), to: peer, sessionToken: role.sessionToken, key: conversation)
        }
        role.stats.sending(prepared.message)
        inFlight[prepared.message.messageId] = .now
        write(prepared.frame, context: context)
    }

    private func write(_ bytes: [UInt8], context: ChannelHandlerContext) {
        WebSocketMessages.write(context.channel.allocator.buffer(bytes: bytes), context: context)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
