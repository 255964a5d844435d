import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import Prometheus
import Synchronization
import WhisperShared

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

    /// Counts `channel` unless the cap is reached (nil); a counted one is released when it
    /// closes, with whatever else its `Hold` was given to let go of then.
    func take(_ channel: any Channel) -> Hold? {
        let taken = open.wrappingAdd(1, ordering: .relaxed).newValue
        guard taken <= limit else {
            open.wrappingSubtract(1, ordering: .relaxed)
            refused.increment()
            return nil
        }
        let hold = Hold()
        // The connection's one close callback: each further one would cost every open
        // socket a closure and a slot in the close future's list.
        channel.closeFuture.whenComplete { _ in
            self.open.wrappingSubtract(1, ordering: .relaxed)
            hold.closed()
        }
        return hold
    }

    /// What a counted connection lets go of when it closes, besides its place under the
    /// cap: its admission as a socket (`SocketAdmission`), once it has one. An admission
    /// given after the close is let go of at once.
    final class Hold: Sendable {
        private enum State {
            case open
            case admitted(SocketAdmission, address: String)
            case closed
        }

        private let state = Mutex(State.open)

        func admitted(by admission: SocketAdmission, address: String) {
            let earlier = state.withLock { state -> State in
                let earlier = state
                if case .closed = earlier { return earlier }
                state = .admitted(admission, address: address)
                return earlier
            }
            switch earlier {
            case .open: break
            case .admitted(let previous, let previousAddress): previous.release(previousAddress)
            case .closed: admission.release(address)
            }
        }

        fileprivate func closed() {
            if case .admitted(let admission, let address) = state.withLock({ state in defer { state = .closed }; return state }) {
                admission.release(address)
            }
        }
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
