import NIOCore
import NIOPosix

/// The servers' sleep: on NIO's event loops, not Dispatch. Server-only, so it lives here
/// and not in WhisperProtocol, which the client SDK builds on.
extension Clock {
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
