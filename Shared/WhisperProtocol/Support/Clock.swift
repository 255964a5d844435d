import Foundation
import NIOCore
import NIOPosix

public enum Clock {
    /// Milliseconds since 1970, as every timestamp in the protocol.
    public static func millisecondsNow() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1000).rounded())
    }

    /// Whether `timestamp` (from a client) is within `TIMESTAMP_SKEW_MS` of `now`, for any
    /// value: the distance is worked out without overflow.
    public static func isWithinSkew(_ timestamp: Int64, of now: Int64, skew: Int64 = Int64(Limits.TIMESTAMP_SKEW_MS)) -> Bool {
        let (distance, overflow) = timestamp.subtractingReportingOverflow(now)
        return !overflow && distance >= -skew && distance <= skew
    }

    /// Milliseconds from `start` (a time another process wrote) to `now`: 0 when `start`
    /// lies ahead, Int64.max when the distance does not fit.
    public static func elapsedMilliseconds(since start: Int64, now: Int64 = millisecondsNow()) -> Int64 {
        let (distance, overflow) = now.subtractingReportingOverflow(start)
        if overflow { return start > now ? 0 : .max }
        return max(0, distance)
    }

    /// Milliseconds as nanoseconds for a histogram, saturating.
    public static func nanoseconds(ofMilliseconds milliseconds: Int64) -> Int64 {
        let (value, overflow) = milliseconds.multipliedReportingOverflow(by: 1_000_000)
        return overflow ? (milliseconds < 0 ? .min : .max) : value
    }

    /// Waits `duration` on a timer of NIO's event loops (the loops that run this
    /// process's tasks, `ServiceMain.useEventLoopsForConcurrency`). `Task.sleep` would
    /// also work, but its timer lives on a Dispatch queue: each wake-up there wakes a
    /// second thread, which then hands the task back to the event loop. For a loop that
    /// sleeps hundreds of times a second that doubles the thread switches. Throws
    /// `CancellationError` when the task is cancelled while waiting.
    public static func sleep(for duration: Duration) async throws {
        guard duration > .zero else {
            try Task.checkCancellation()
            return
        }
        let scheduled = MultiThreadedEventLoopGroup.singleton.any()
            .scheduleTask(in: .nanoseconds(duration.nanoseconds)) {}
        do {
            try await withTaskCancellationHandler {
                try await scheduled.futureResult.get()
            } onCancel: {
                scheduled.cancel()
            }
        } catch {
            throw CancellationError()
        }
    }
}
