import Logging
import ServiceLifecycle
import WhisperShared

/// On shutdown: stop taking new sockets (`/ready` 503, upgrades refused), tell every
/// client to reconnect elsewhere, wait a bounded time for them to go, then close what
/// is left and wait until each closed socket has given up its presence.
struct ConnectionDrainer: Service {
    let flag: DrainFlag
    let connections: ConnectionRegistry
    let timeout: Duration
    let reconnectDelayMs: Int
    let logger: Logger

    func run() async throws {
        do {
            try await gracefulShutdown()
        } catch {
            return
        }
        flag.startDraining()
        let open = connections.all()
        logger.info("gateway_draining", metadata: ["connections": "\(open.count)"])
        let notice = Reconnect(reason: Reconnect.serverShutdown, retryAfterMs: reconnectDelayMs)
        for connection in open {
            connection.send(notice)
        }
        var remaining = await waitForSockets(upTo: timeout)
        logger.info("gateway_drained", metadata: ["remaining": "\(remaining)"])
        guard remaining > 0 else { return }
        // What is left is closed here (1001), and each socket gives up its presence
        // before the server and the Redis clients stop: the close handshake waits
        // `timeout` at most, the rest is a few Redis commands per socket.
        for connection in connections.all() {
            connection.close(code: CloseCode.goingAway, reason: "server shutting down")
        }
        remaining = await waitForSockets(upTo: timeout + .seconds(5))
        if remaining > 0 {
            logger.warning("gateway_sockets_left_open", metadata: ["remaining": "\(remaining)"])
        }
    }

    private func waitForSockets(upTo limit: Duration) async -> Int {
        let deadline = ContinuousClock.now + limit
        var remaining = connections.count
        while ContinuousClock.now < deadline, remaining > 0 {
            try? await Task.sleep(for: .milliseconds(20))
            remaining = connections.count
        }
        return remaining
    }
}
