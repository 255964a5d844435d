import Logging
import Synchronization
import WhisperShared

/// When the gateway's subscription comes back after a loss, what was published meanwhile is
/// gone, and an open socket has no reason to fetch: every socket is told `reconnect`
/// (`frames_missed`), each after its own random delay, so the clients fetch what waits and
/// ask again for presence, live places and floors.
final class MissedFrames: Sendable {
    /// The clients come back at about this many a second...
    static let reconnectsPerSecond = 2_000
    /// ...over at most this long: a gateway with few sockets has them back at once.
    static let maximumSpread: Duration = .seconds(5)

    /// How long the reconnects of `sockets` clients are spread over.
    static func spread(sockets: Int) -> Duration {
        min(maximumSpread, .milliseconds(sockets * 1_000 / reconnectsPerSecond))
    }

    private let connections: ConnectionRegistry
    private let logger: Logger
    /// Whether the subscription was confirmed before: the first time nothing was missed.
    private let subscribedBefore = Atomic<Bool>(false)

    init(connections: ConnectionRegistry, logger: Logger) {
        self.connections = connections
        self.logger = logger
    }

    /// Every channel is subscribed (at start, and after each reconnect of the subscriber).
    func subscribed() {
        guard subscribedBefore.exchange(true, ordering: .relaxed) else { return }
        let open = connections.all()
        logger.warning("gateway_frames_missed", metadata: ["connections": "\(open.count)"])
        let spreadMs = Int(Self.spread(sockets: open.count).milliseconds)
        for connection in open {
            connection.send(Reconnect(reason: Reconnect.framesMissed, retryAfterMs: Int.random(in: 0...spreadMs)))
        }
    }
}
