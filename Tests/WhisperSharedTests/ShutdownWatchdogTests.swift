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

    @Test func aStopSignalEndsTheProcessOnceTheLimitHasPassed() {
        let firings = Firings()
        let watchdog = ShutdownWatchdog(signals: [SIGUSR2], limit: .milliseconds(300)) { firings.record() }
        let raised = ContinuousClock.now
        kill(getpid(), SIGUSR2)
        // A second signal while the first is being waited out does not start a second
        // timer (a moment later, so that Dispatch does not merge the two into one event).
        Thread.sleep(forTimeInterval: 0.1)
        kill(getpid(), SIGUSR2)
        let result = firings.semaphore.wait(timeout: .now() + .seconds(5))
        #expect(result == .success, "the watchdog did not fire within 5 s of the signal")
        // Long enough for a second timer to have fired too, had there been one.
        Thread.sleep(forTimeInterval: 0.6)
        let times = firings.times.withLock { $0 }
        #expect(times.count == 1)
        if let fired = times.first {
            #expect(fired - raised >= .milliseconds(300), "fired before the limit")
        }
        withExtendedLifetime(watchdog) {}
    }

    @Test func withoutAStopSignalNothingHappens() {
        let firings = Firings()
        let watchdog = ShutdownWatchdog(signals: [SIGUSR1], limit: .milliseconds(50)) { firings.record() }
        let result = firings.semaphore.wait(timeout: .now() + .milliseconds(500))
        #expect(result == .timedOut)
        #expect(firings.times.withLock { $0 }.isEmpty)
        withExtendedLifetime(watchdog) {}
    }
}
