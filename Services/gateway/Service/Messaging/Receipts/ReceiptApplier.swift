import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization
import WhisperMessaging
import WhisperShared

/// A receipt's last step, the acknowledgement script, run for many receipts at once:
/// with the gateway's next message store (`SendDesk`), or alone at most `maxWait` after
/// the first (a timer on the event loop that a store cancels), at once when `batchMax`
/// wait, and before a page of pending messages is fetched (`flush`). Why nothing is lost
/// on the way: docs/architecture.md, "Through the router stream", step 7.
final class ReceiptApplier: Service, Sendable {
    private let pending: PendingQueue
    private let memory: ReceiptMemory
    private let logger: Logger
    let maxWait: Duration
    static let batchMax = 64
    private struct State {
        var waiting: [PendingQueue.ReceiptApplication] = []
        /// The flush due `maxWait` after the first of `waiting` was added.
        var timer: Scheduled<Void>?
        var stopped = false
    }

    private let state = Mutex(State())
    let loop: any EventLoop

    init(
        pending: PendingQueue, memory: ReceiptMemory, maxWait: Duration, logger: Logger,
        loop: any EventLoop = MultiThreadedEventLoopGroup.singleton.any()
    ) {
        self.pending = pending
        self.memory = memory
        self.maxWait = maxWait
        self.logger = logger
        self.loop = loop
    }

    /// Queues one receipt's application. Run at once when `maxWait` is zero, and while
    /// this gateway has not yet taught Redis the script (its first receipt after a
    /// start), so that later ones can go in other writes.
    func add(_ application: PendingQueue.ReceiptApplication) async {
        let queued = state.withLock { state in
            guard maxWait > .zero, !state.stopped, pending.appliesAlongside else { return false }
            state.waiting.append(application)
            return true
        }
        guard queued else {
            await apply([application])
            return
        }
        schedule()
    }

    /// Arms the timer for what waits, or flushes at once when `batchMax` wait.
    private func schedule() {
        let now = state.withLock { state -> Bool in
            if state.waiting.count >= Self.batchMax {
                state.timer?.cancel()
                state.timer = nil
                return true
            }
            if !state.waiting.isEmpty, state.timer == nil {
                state.timer = loop.scheduleTask(in: .nanoseconds(maxWait.nanoseconds)) { [self] in
                    self.state.withLock { $0.timer = nil }
                    Task { await self.flush() }
                }
            }
            return false
        }
        if now { Task { await flush() } }
    }

    /// Takes what waits, for a caller about to write to Redis anyway: it sends
    /// `PendingQueue.applyCommand` for each with its own command, and reports the
    /// replies with `returned`.
    func take() -> [PendingQueue.ReceiptApplication] {
        state.withLock { state in
            state.timer?.cancel()
            state.timer = nil
            defer { state.waiting.removeAll(keepingCapacity: true) }
            return state.waiting
        }
    }

    /// Reports on applications taken with `take` and sent: their replies, in order, or
    /// nil when the write failed. Those with an error reply (`NOSCRIPT` after a Redis
    /// restart, say) or whose write failed wait again, to go on their own.
    func returned(_ taken: [PendingQueue.ReceiptApplication], replies: [RESPValue]?) {
        let failed = replies.map { replies in
            zip(taken, replies).compactMap { application, reply in
                if case .error = reply { return application }
                return nil
            }
        } ?? taken
        guard !failed.isEmpty else { return }
        state.withLock { $0.waiting.append(contentsOf: failed) }
        schedule()
    }

    /// Runs what waits now.
    func flush() async {
        await apply(take())
    }

    func run() async throws {
        try? await gracefulShutdown()
        // Stopping: what waits is applied before the Redis client goes, and later
        // receipts (sockets still draining) are applied at once.
        state.withLock { $0.stopped = true }
        await flush()
    }

    private func apply(_ batch: [PendingQueue.ReceiptApplication]) async {
        guard !batch.isEmpty else { return }
        do {
            try await pending.applyReceipts(batch)
        } catch {
            // The messages stay pending and come again with the next fetch, when their
            // receipts are looked up again.
            logger.warning("receipt_apply_failed", metadata: ["count": "\(batch.count)", "error": "\(error)"])
            for application in batch { memory.release(application) }
        }
    }
}
