import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import Prometheus
import Synchronization
import WhisperShared

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
    /// released when its connection closes (`hold`), however the upgrade ends.
    func admit(_ address: String, hold: ConnectionCap.Hold) -> Decision {
        let decision: Decision = state.withLock { state in
            guard state.total < maxTotal else { return .instanceFull }
            let current = state.perAddress[address, default: 0]
            guard current < maxPerAddress else { return .addressFull }
            state.total += 1
            state.perAddress[address] = current + 1
            return .admitted
        }
        if decision == .admitted {
            hold.admitted(by: self, address: address)
        }
        return decision
    }

    func release(_ address: String) {
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
    /// While its Redis subscription is down (Redis restarting, failing over) the gateway
    /// could not pass on the answers routers publish for a new socket (its sign-in's
    /// fetch among them), so it takes none: the client tries again, here or elsewhere.
    static let unsubscribed = HTTPError(.serviceUnavailable, headers: [.retryAfter: "1"], message: "this gateway cannot reach Redis just now; connect again")

    /// With allowed origins configured, a request naming another origin (a page on
    /// another site) is refused; one without `Origin` (a native app) is not.
    static func origin(_ origin: String?, allowed: [String]) -> HTTPError? {
        guard !allowed.isEmpty, let origin, !allowed.contains(origin) else { return nil }
        return HTTPError(.forbidden, message: "this origin may not open a WebSocket here")
    }
}
