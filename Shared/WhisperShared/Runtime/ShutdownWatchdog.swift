import Dispatch
import Foundation
import Logging
import Synchronization

/// Puts an upper bound on how long a process takes to stop once told to: a Dispatch signal
/// source and timer, outside the event loops (which a stuck task can block, as a known
/// `merge` lock on the single executor thread does), log `shutdown_stalled` and exit 1 when
/// the grace (`WHISPER_SHUTDOWN_GRACE_SECONDS`) and a margin have passed.
public final class ShutdownWatchdog: Sendable {
    /// Serial: the signal handler, the timer and `onStall` all run here.
    let queue: DispatchQueue
    /// Stop signals handled so far (tests wait on it instead of on time).
    let signalsHandled = Atomic<Int>(0)
    /// Set once in `init`, cancelled in `deinit`; Dispatch sources are thread-safe.
    nonisolated(unsafe) private let sources: [any DispatchSourceSignal]
    private let armed = Atomic<Bool>(false)
    private let limit: Duration
    private let onStall: @Sendable () -> Void

    /// Starts watching `signals`; `onStall` runs on the watchdog's queue when `limit`
    /// has passed since the first of them arrived.
    public init(
        signals: [Int32] = [SIGTERM, SIGINT, SIGQUIT],
        limit: Duration,
        onStall: @escaping @Sendable () -> Void
    ) {
        let queue = DispatchQueue(label: "whisper.shutdown-watchdog")
        self.queue = queue
        self.limit = limit
        self.onStall = onStall
        sources = signals.map { DispatchSource.makeSignalSource(signal: $0, queue: queue) }
        // Dispatch registers a signal source on its own thread; until it has, the
        // signal's default action (ending the process) still applies. Wait for it.
        let registered = DispatchGroup()
        for source in sources {
            registered.enter()
            source.setRegistrationHandler { registered.leave() }
            source.setEventHandler { [weak self] in self?.stopRequested() }
            source.resume()
        }
        _ = registered.wait(timeout: .now() + .seconds(5))
    }

    /// The watchdog of a service: `grace` for in-flight work plus `margin` for
    /// cancellation, then a critical log line and `_exit(1)`.
    public convenience init(grace: Duration, margin: Duration = .seconds(10), logger: Logger) {
        let limit = grace + margin
        self.init(limit: limit) {
            logger.critical("shutdown_stalled", metadata: [
                "afterSeconds": "\(limit.components.seconds)",
                "action": "exiting without finishing the graceful shutdown",
            ])
            _exit(1)
        }
    }

    deinit {
        for source in sources { source.cancel() }
    }

    private func stopRequested() {
        signalsHandled.add(1, ordering: .relaxed)
        guard armed.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else { return }
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(limit.nanoseconds)), execute: onStall)
    }
}
