import Logging
import ServiceLifecycle
import Synchronization
import WhisperMessaging
import WhisperShared

/// Removes stored receipts once their sockets have taken them (`OwedFrames`), a
/// batch per Redis round trip: what was written while one batch was on its way goes in
/// the next. A receipt whose removal fails stays stored and comes again with the
/// owner's next `fetch_pending`; none is lost.
final class ReceiptSettler: Service, Sendable {
    private let receipts: OwedFrames
    private let logger: Logger
    private let waiting = Mutex<[StoredReceipt]>([])
    private let ticks: AsyncStream<Void>
    private let tick: AsyncStream<Void>.Continuation

    init(receipts: OwedFrames, logger: Logger) {
        self.receipts = receipts
        self.logger = logger
        (ticks, tick) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// Called on the event loop once a receipt's frame was written to its socket.
    func settle(_ receipt: StoredReceipt) {
        waiting.withLock { $0.append(receipt) }
        tick.yield()
    }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            for await _ in self.ticks {
                await self.settleWaiting()
            }
        }
        // Stopping: what was written meanwhile is settled too.
        await settleWaiting()
    }

    private func settleWaiting() async {
        let batch = waiting.withLock { waiting in
            defer { waiting.removeAll(keepingCapacity: true) }
            return waiting
        }
        guard !batch.isEmpty else { return }
        do {
            try await receipts.settle(batch)
        } catch {
            logger.warning("receipt_settle_failed", metadata: ["count": "\(batch.count)", "error": "\(error)"])
        }
    }
}
