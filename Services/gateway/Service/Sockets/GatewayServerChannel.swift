import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOWebSocket
import WhisperShared

/// What each TCP connection of the gateway becomes: a client WebSocket at `/ws`, else plain
/// HTTP (health, readiness, metrics). Each is counted against `ConnectionCap` as accepted
/// and must finish its upgrade within `handshakeTimeout`; an upgraded socket is served by
/// NIO handlers alone (`SocketHandler`), with no task while it is idle.
struct GatewayServerChannel: ServerChildChannel, HTTPChannelHandler {
    enum Negotiated: Sendable {
        case webSocket
        case http(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
        /// An upgrade request that was refused, with the answer that says why.
        case refused(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, HTTPError)
    }

    struct Value: ServerChildChannelValue {
        let negotiated: EventLoopFuture<Negotiated>
        let channel: any Channel
    }

    /// hummingbird's router, behind `sendingUpgradesToANewConnection`.
    let responder: Responder
    let handshakeTimeout: Duration
    let cap: ConnectionCap
    /// The client's address (`ClientAddress`) and why this upgrade request may not become
    /// a socket (path, origin, draining, caps), or nil when it may; runs on the
    /// connection's event loop.
    let admit: @Sendable (HTTPRequestHead, any Channel, ConnectionCap.Hold) -> (address: String, refusal: HTTPError?, liveDevice: String?)
    /// Adds the socket's handlers once the upgrade is answered (on the event loop), with
    /// the client's address `admit` found.
    let upgraded: @Sendable (any Channel, String, String?) throws -> Void

    init(
        responder: @escaping Responder, handshakeTimeout: Duration, cap: ConnectionCap,
        admit: @escaping @Sendable (HTTPRequestHead, any Channel, ConnectionCap.Hold) -> (address: String, refusal: HTTPError?, liveDevice: String?),
        upgraded: @escaping @Sendable (any Channel, String, String?) throws -> Void
    ) {
        self.responder = Self.sendingUpgradesToANewConnection(responder)
        self.handshakeTimeout = handshakeTimeout
        self.cap = cap
        self.admit = admit
        self.upgraded = upgraded
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        guard let hold = cap.take(channel) else {
            channel.close(promise: nil)
            return channel.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel)
        }
        let timeout = TimeAmount(handshakeTimeout)
        return channel.eventLoop.makeCompletedFuture {
            // A channel keeps its last receive buffer for the next read, at the largest
            // size it has needed. Starting small keeps an idle socket's at what its
            // upgrade and sign-in took; a busy socket's grows as NIO's does. One read
            // per wake-up: with more, a request longer than the first buffer is read
            // again while the HTTP decoder still holds that buffer, and NIO then keeps
            // both for the socket's life.
            try channel.syncOptions?.setOption(ChannelOptions.recvAllocator, value: Self.receiveBuffers)
            try channel.syncOptions?.setOption(ChannelOptions.maxMessagesPerRead, value: 1)
            let pipeline = channel.pipeline.syncOperations
            try pipeline.addHandler(HandshakeDeadline(timeout: timeout), name: HandshakeDeadline.name, position: .first)
            let admit = self.admit
            let upgraded = self.upgraded
            let refusal = NIOLoopBoundBox<HTTPError?>(nil, eventLoop: channel.eventLoop)
            let address = NIOLoopBoundBox<String?>(nil, eventLoop: channel.eventLoop)
            let device = NIOLoopBoundBox<String?>(nil, eventLoop: channel.eventLoop)
            let upgrader = SocketUpgrader<Negotiated>(
                shouldUpgrade: { channel, head in
                    let decision = admit(head, channel, hold)
                    (address.value, refusal.value, device.value) = (decision.address, decision.refusal, decision.liveDevice)
                    return channel.eventLoop.makeSucceededFuture(refusal.value == nil ? HTTPHeaders() : nil)
                },
                upgradePipelineHandler: { channel, _ in
                    channel.eventLoop.makeCompletedFuture {
                        // A WebSocket now: no handshake deadline any more.
                        _ = channel.pipeline.syncOperations.removeHandler(name: HandshakeDeadline.name)
                        try upgraded(channel, address.value ?? ClientAddress.of(channel), device.value)
                        return .webSocket
                    }
                }
            )
            let notUpgraded = NIOTypedHTTPServerUpgradeConfiguration<Negotiated>(
                upgraders: [upgrader],
                notUpgradingCompletionHandler: { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let pipeline = channel.pipeline.syncOperations
                        try pipeline.addHandler(HTTP1ToHTTPServerCodec(secure: false))
                        try pipeline.addHandler(HTTPConnectionStateHandler(idleTimeout: nil, logger: logger))
                        let http = try NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>(
                            wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true)
                        )
                        if let refused = refusal.value { return .refused(http, refused) }
                        return .http(http)
                    }
                }
            )
            var configuration = NIOUpgradableHTTPServerPipelineConfiguration<Negotiated>(upgradeConfiguration: notUpgraded)
            // As hummingbird's own HTTP/1 channel: its async channel orders requests and
            // answers errors; header names and values are checked by HTTP types.
            configuration.enablePipelining = false
            configuration.enableErrorHandling = false
            configuration.enableResponseHeaderValidation = false
            let negotiated = try pipeline.configureUpgradableHTTPServerPipeline(configuration: configuration)
            return Value(negotiated: negotiated, channel: channel)
        }
    }

    /// Receive buffers of 256 bytes at first, doubled for a read that fills one and
    /// halved after two reads of half or less (64 bytes to 64 KiB).
    static let receiveBuffers = AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 256, maximum: 65_536)

    func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.negotiated.get() {
            case .webSocket:
                // Served by its handlers from here on; nothing to wait for.
                return
            case .http(let http):
                await handleHTTP(asyncChannel: http, logger: logger)
            case .refused(let http, let refusal):
                try await Self.answer(refusal, on: http)
            }
        } catch {
            logger.debug("connection_setup_failed", metadata: ["error": "\(error)"])
        }
    }

    /// Answers a refused upgrade with its status and reason (the body hummingbird gives
    /// an `HTTPError`) and closes the connection: the request it came with was taken by
    /// the upgrade attempt, so it cannot go to the router.
    static func answer(_ refusal: HTTPError, on http: NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>) async throws {
        struct Body: Encodable {
            struct Reason: Encodable { let message: String }
            let error: Reason
        }
        let body = try JSONEncoder().encode(Body(error: .init(message: refusal.body ?? refusal.status.reasonPhrase)))
        var headers = refusal.headers
        headers[.connection] = "close"
        headers[.contentType] = "application/json; charset=utf-8"
        headers[.contentLength] = "\(body.count)"
        try await http.executeThenClose { _, outbound in
            try await outbound.write(contentsOf: [
                .head(HTTPResponse(status: refusal.status, headerFields: headers)),
                .body(ByteBuffer(bytes: body)),
                .end(nil),
            ])
        }
    }

    /// NIO upgrades only on a connection's first request: an upgrade request that comes
    /// on a kept-alive HTTP connection is sent to the same path with `Connection: close`
    /// (307), so the client asks again on a new connection, where it is admitted or
    /// answered with its reason.
    static func sendingUpgradesToANewConnection(_ responder: @escaping Responder) -> Responder {
        struct ClosedAfterRedirect: Error {}
        return { request, writer, channel in
            guard request.headers[.upgrade]?.lowercased() == "websocket" else {
                try await responder(request, writer, channel)
                return
            }
            let target = request.uri.query.map { "\(request.uri.path)?\($0)" } ?? request.uri.path
            try await writer.writeResponse(HTTPResponse(status: .temporaryRedirect, headerFields: [
                .connection: "close", .location: target, .contentLength: "0",
            ]))
            throw ClosedAfterRedirect()
        }
    }
}
