import Logging
import Synchronization
import WhisperShared

/// Publishes the key directory's epochs every `interval` (several gc-workers may run:
/// one publishes at a time, the others find the lock held and wait for the next tick).
/// The signer's public keys are recorded first; a VRF key other than the directory's
/// stops publishing (logged each tick) rather than relabel everyone.
enum DirectoryLoop {
    static func periodic(publisher: DirectoryPublisher, interval: Duration, logger: Logger) -> Periodic {
        let recorded = Mutex(false)
        return Periodic(every: interval, failure: "kt_publish_failed", logger: logger) {
            if !recorded.withLock({ $0 }) {
                try await publisher.recordKeys()
                recorded.withLock { $0 = true }
            }
            if let published = try await publisher.publish() {
                logger.info("kt_epoch_published", metadata: ["epoch": "\(published.head.epoch)", "changes": "\(published.changes)"])
            }
            return nil
        }
    }
}
