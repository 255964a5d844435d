import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import Prometheus
import Synchronization
import WhisperShared

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
        if total >= maxTotal { return Self.answer(.instanceFull) }
        if fromAddress >= maxPerAddress { return Self.answer(.addressFull) }
        return nil
    }

    /// The HTTP answer to an upgrade refused with `decision`.
    static func answer(_ decision: Decision) -> HTTPError? {
        switch decision {
        case .admitted:
            nil
        case .instanceFull:
            HTTPError(.serviceUnavailable, headers: [.retryAfter: "5"], message: "this gateway is at its socket limit; try again")
        case .addressFull:
            HTTPError(.tooManyRequests, headers: [.retryAfter: "30"], message: "too many sockets from this address")
        }
    }
}

/// Upgrades refused for what the request says or the instance's state.
enum UpgradeRefusal {
    static let draining = HTTPError(.serviceUnavailable, headers: [.retryAfter: "1"], message: "this gateway is shutting down; connect again")

    /// With allowed origins configured, a request naming another origin (a page on
    /// another site) is refused; one without `Origin` (a native app) is not.
    static func origin(_ origin: String?, allowed: [String]) -> HTTPError? {
        guard !allowed.isEmpty, let origin, !allowed.contains(origin) else { return nil }
        return HTTPError(.forbidden, message: "this origin may not open a WebSocket here")
    }
}
