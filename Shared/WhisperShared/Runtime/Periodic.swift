import Logging
import ServiceLifecycle

/// Work a service repeats until it stops: `tick`, then the delay it returned (nil:
/// `interval`). A throwing tick is logged as `failure` unless the service is stopping or
/// Redis is unavailable (then the next tick may wait `unavailableRetry`).
public struct Periodic: Service {
    public let interval: Duration
    /// Whether the first tick waits an interval (work that keeps up what exists) or
    /// runs at once (work that catches up).
    public let waitsFirst: Bool
    let failure: String
    let unavailableRetry: Duration?
    let logger: Logger
    let tick: @Sendable () async throws -> Duration?

    public init(
        every interval: Duration, waitingFirst waitsFirst: Bool = false, failure: String, unavailableRetry: Duration? = nil, logger: Logger,
        _ tick: @escaping @Sendable () async throws -> Duration?
    ) {
        self.unavailableRetry = unavailableRetry
        self.interval = interval
        self.waitsFirst = waitsFirst
        self.failure = failure
        self.logger = logger
        self.tick = tick
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            if waitsFirst { try? await Clock.sleep(for: interval) }
            while !Task.isCancelled {
                var next = interval
                do {
                    next = try await tick() ?? interval
                } catch RedisError.unavailable {
                    // Reported by the Redis client itself.
                    next = unavailableRetry ?? interval
                } catch {
                    if Task.isCancelled { return }
                    logger.warning("\(failure)", metadata: ["error": "\(error)"])
                }
                try? await Clock.sleep(for: next)
            }
        }
    }
}
