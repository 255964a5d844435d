import Logging
import ServiceLifecycle
import WhisperShared

/// On shutdown: stop taking new sockets (`/ready` 503, upgrades refused), tell every
/// client to reconnect elsewhere, and wait a bounded time for them to go before the
/// server closes what is left.
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
        let notice = Reconnect(reason: "server_shutdown", retryAfterMs: reconnectDelayMs)
        for connection in open {
            connection.send(notice)
        }
        let deadline = ContinuousClock.now + timeout
        var remaining = connections.count
        while ContinuousClock.now < deadline, remaining > 0 {
            try? await Task.sleep(for: .milliseconds(50))
            remaining = connections.count
        }
        logger.info("gateway_drained", metadata: ["remaining": "\(remaining)"])
    }
}
