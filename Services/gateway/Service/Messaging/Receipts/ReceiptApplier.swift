import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization
import WhisperMessaging
import WhisperShared

/// A receipt's last step (the acknowledgement script: `delivered` takes the message out
/// of the recipient's queue), run for many receipts at once. By then the receipt was
/// given to its sender (stored, or taken by the sender's socket), so nothing is on this
/// step's path and it can wait for other work: waiting applications go out in the same
/// write as the gateway's next message store (`SendDesk`), or by themselves at most
/// `maxWait` after the first of them, or at once when `batchMax` wait. The wait is a
/// timer on NIO's event loop that a store taking the applications cancels, so under
/// load no timer fires and nothing wakes for it. Under
/// `appendfsync always` every Redis write round costs an fsync; carried with a store,
/// an application costs neither a round trip nor an fsync of its own.
///
/// Until its application runs, a message stays pending: a gateway that dies first
/// leaves it to be fetched and acknowledged again (its sender may get the receipt
/// twice, which clients take as a state), as a gateway dying between the steps always
/// did. A repeat of a receipt whose application waits here is known as a repeat
/// (`ReceiptMemory`) and dropped, as Redis would once it ran; one whose application
/// failed is forgotten there, so its repeat is looked up again. Before the gateway asks for a
/// page of pending messages for a socket, it runs what waits (`flush`), so a client
/// never fetches a message it has just acknowledged on this gateway.
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
