import Dispatch
import Foundation
import Synchronization
import Testing
@testable import WhisperShared

/// The watchdog fires from its own thread: these tests block the thread that raised the
/// signal (as a stalled event loop would be blocked) and wait for it there.
@Suite struct ShutdownWatchdogTests {
    final class Firings: Sendable {
        let times = Mutex<[ContinuousClock.Instant]>([])
        let semaphore = DispatchSemaphore(value: 0)

        func record() {
            times.withLock { $0.append(.now) }
            semaphore.signal()
        }
    }

    /// Polls `condition` every millisecond for up to five seconds.
    static func pollUntil(_ condition: () -> Bool) -> Bool {
        let deadline = ContinuousClock.now + .seconds(5)
        while !condition() {
            guard ContinuousClock.now < deadline else { return false }
            Thread.sleep(forTimeInterval: 0.001) // polling interval
        }
        return true
    }

    /// Runs after everything the watchdog's queue has due before `deadline`: its timers
    /// and this marker share the serial queue, which runs them in deadline order.
    static func afterTimersDue(by deadline: DispatchTime, on watchdog: ShutdownWatchdog) -> Bool {
        let marker = DispatchSemaphore(value: 0)
        watchdog.queue.asyncAfter(deadline: deadline) { marker.signal() }
        return marker.wait(timeout: .now() + .seconds(10)) == .success
    }

    @Test func aStopSignalEndsTheProcessOnceTheLimitHasPassed() {
        let firings = Firings()
        let limit = Duration.milliseconds(300)
        let watchdog = ShutdownWatchdog(signals: [SIGUSR2], limit: limit) { firings.record() }
        let raised = ContinuousClock.now
        kill(getpid(), SIGUSR2)
        // A second signal once the first was handled (two signals at once may reach
        // the handler as one event) does not start a second timer.
        #expect(Self.pollUntil { watchdog.signalsHandled.load(ordering: .relaxed) == 1 })
        kill(getpid(), SIGUSR2)
        #expect(Self.pollUntil { watchdog.signalsHandled.load(ordering: .relaxed) == 2 })
        let secondHandled = DispatchTime.now()
        let result = firings.semaphore.wait(timeout: .now() + .seconds(5))
        #expect(result == .success, "the watchdog did not fire within 5 s of the signal")
        // A timer started by the second signal would be due by then.
        #expect(Self.afterTimersDue(by: secondHandled + .nanoseconds(Int(limit.nanoseconds)), on: watchdog))
        let times = firings.times.withLock { $0 }
        #expect(times.count == 1)
        if let fired = times.first {
            #expect(fired - raised >= limit, "fired before the limit")
        }
        withExtendedLifetime(watchdog) {}
    }

    @Test func withoutAStopSignalNothingHappens() {
        let firings = Firings()
        let limit = Duration.milliseconds(50)
        let watchdog = ShutdownWatchdog(signals: [SIGUSR1], limit: limit) { firings.record() }
        #expect(Self.afterTimersDue(by: .now() + .nanoseconds(Int(limit.nanoseconds) * 2), on: watchdog))
        #expect(firings.times.withLock { $0 }.isEmpty)
        let handled = watchdog.signalsHandled.load(ordering: .relaxed)
        #expect(handled == 0)
        withExtendedLifetime(watchdog) {}
    }
}
