import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore
import Prometheus
import Synchronization
import WhisperShared

/// The gateway's server channel with a deadline in front: every TCP connection must
/// finish its WebSocket upgrade within `timeout` of opening, or it is closed. A client
/// that sends its headers a byte at a time, or nothing at all, holds a connection for
/// that long at most. The deadline is lifted once the socket is a WebSocket
/// (`HandshakeDeadline.lift(on:)`); plain HTTP connections (health checks, metrics
/// scrapes) keep it and are closed when it passes, which their clients absorb by
/// connecting again.
///
/// It also counts every accepted connection (`ConnectionCap`): past the cap a new one is
/// closed at once, before it costs more than its file descriptor for a moment, so that
/// clients can never use up the process's descriptors (at `EMFILE` parts of the runtime
/// trap, and the process would stop for everyone).
struct HandshakeDeadlineChannel<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value
    let base: Base
    let timeout: Duration
    let cap: ConnectionCap

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        guard cap.take(channel) else {
            channel.close(promise: nil)
            return channel.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel)
        }
        let timeout = TimeAmount.nanoseconds(Int64(clamping: timeout.nanoseconds))
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(HandshakeDeadline(timeout: timeout), name: HandshakeDeadline.name, position: .first)
        }.flatMap {
            base.setup(channel: channel, logger: logger)
        }
    }

    func handle(value: Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}

/// Closes its channel when the deadline passes, unless removed first.
final class HandshakeDeadline: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    static let name = "whisper-handshake-deadline"
    private let timeout: TimeAmount
    private var timer: Scheduled<Void>?

    init(timeout: TimeAmount) {
        self.timeout = timeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let channel = context.channel
        timer = context.eventLoop.scheduleTask(in: timeout) {
            channel.close(promise: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        context.fireChannelInactive()
    }

    /// The socket became a WebSocket: no deadline any more.
    static func lift(on channel: any Channel) async {
        try? await channel.pipeline.removeHandler(name: name).get()
    }
}

extension HTTPServerBuilder {
    /// `http1WebSocketUpgrade(webSocketRouter:configuration:)` behind a handshake deadline.
    static func guardedWebSocketUpgrade<Builder: HTTPResponderBuilder & _HB_SendableMetatype>(
        webSocketRouter: Builder, configuration: HTTP1WebSocketUpgradeChannel.Configuration, handshakeTimeout: Duration,
        connectionCap: ConnectionCap
    ) -> HTTPServerBuilder where Builder.Responder.Context: WebSocketRequestContext {
        let webSocketResponder = webSocketRouter.buildResponder()
        return .init { responder in
            HandshakeDeadlineChannel(
                base: HTTP1WebSocketUpgradeChannel(responder: responder, webSocketResponder: webSocketResponder, configuration: configuration),
                timeout: handshakeTimeout,
                cap: connectionCap
            )
        }
    }
}

/// TCP connections open on this instance (WebSockets, upgrades in progress, health
/// checks), at most `limit`.
final class ConnectionCap: Sendable {
    let limit: Int
    private let open = Atomic<Int>(0)
    let refused: Counter

    init(limit: Int, metrics: ServiceMetrics) {
        self.limit = limit
        refused = metrics.counter("gateway_connections_refused", help: "TCP connections closed on accept because the instance was at its connection cap.")
    }

    /// Counts `channel` unless the cap is reached; a counted one is released when it closes.
    func take(_ channel: any Channel) -> Bool {
        let taken = open.wrappingAdd(1, ordering: .relaxed).newValue
        guard taken <= limit else {
            open.wrappingSubtract(1, ordering: .relaxed)
            refused.increment()
            return false
        }
        channel.closeFuture.whenComplete { _ in self.open.wrappingSubtract(1, ordering: .relaxed) }
        return true
    }

    var count: Int { open.load(ordering: .relaxed) }

    /// The cap for this process: the configured one, or what its open-file limit leaves
    /// after `reserve` descriptors for everything else (Redis, Postgres, HTTP clients,
    /// logs, /proc), whichever is lower. The soft limit is raised to the hard one first.
    static func limit(configured: Int, reserve: Int = 512) -> (limit: Int, files: Int) {
        let files = OpenFileLimit.raiseToMaximum()
        let available = max(64, files - reserve)
        return (configured > 0 ? min(configured, available) : available, files)
    }
}

/// Sockets open on this instance, in all and per client address, counted from the
/// moment an upgrade is admitted until its connection closes. Past either cap an
/// upgrade is refused with an HTTP status, before any WebSocket exists.
final class SocketAdmission: Sendable {
    let maxTotal: Int
    let maxPerAddress: Int
    private let state = Mutex<(total: Int, perAddress: [String: Int])>((0, [:]))

    init(maxTotal: Int, maxPerAddress: Int) {
        self.maxTotal = maxTotal
        self.maxPerAddress = maxPerAddress
    }

    enum Decision: Equatable {
        case admitted
        case instanceFull
        case addressFull
    }

    /// Counts a socket for `address` unless a cap is reached; an admitted one is
    /// released when `channel` closes, however the upgrade ends.
    func admit(_ address: String, channel: any Channel) -> Decision {
        let decision: Decision = state.withLock { state in
            guard state.total < maxTotal else { return .instanceFull }
            let current = state.perAddress[address, default: 0]
            guard current < maxPerAddress else { return .addressFull }
            state.total += 1
            state.perAddress[address] = current + 1
            return .admitted
        }
        if decision == .admitted {
            channel.closeFuture.whenComplete { _ in self.release(address) }
        }
        return decision
    }

    private func release(_ address: String) {
        state.withLock { state in
            state.total = max(0, state.total - 1)
            let remaining = state.perAddress[address, default: 1] - 1
            state.perAddress[address] = remaining > 0 ? remaining : nil
        }
    }

    var total: Int { state.withLock { $0.total } }

    /// Why an upgrade from `address` would be refused now, as the HTTP answer.
    func refusal(for address: String) -> HTTPError? {
        let (total, fromAddress) = state.withLock { ($0.total, $0.perAddress[address, default: 0]) }
        if total >= maxTotal {
            return HTTPError(.serviceUnavailable, headers: [.retryAfter: "5"], message: "this gateway is at its socket limit; try again")
        }
        if fromAddress >= maxPerAddress {
            return HTTPError(.tooManyRequests, headers: [.retryAfter: "30"], message: "too many sockets from this address")
        }
        return nil
    }
}

/// Upgrades refused for what the request says.
enum UpgradeRefusal {
    /// With allowed origins configured, a request naming another origin (a page on
    /// another site) is refused; one without `Origin` (a native app) is not.
    static func origin(of request: Request, allowed: [String]) -> HTTPError? {
        guard !allowed.isEmpty, let origin = request.headers[.origin], !allowed.contains(origin) else { return nil }
        return HTTPError(.forbidden, message: "this origin may not open a WebSocket here")
    }
}
