import Logging
import Synchronization
import WhisperShared

/// Publishes the key directory's epochs every `interval` (several gc-workers may run:
/// one publishes at a time, the others find the lock held and wait for the next tick).
/// The signer's public keys are recorded first; a VRF key other than the directory's
/// stops publishing (logged each tick) rather than relabel everyone. Each tick sets
/// `whisper_kt_head_age_seconds` to the newest head's age, whoever published it:
/// clients refuse a head older than `KeyDirectory.staleHeadAge`, so an operator must
/// hear of a directory that stopped publishing before they do.
enum DirectoryLoop {
    static func periodic(publisher: DirectoryPublisher, store: DirectoryStore, metrics: ServiceMetrics, interval: Duration, logger: Logger) -> Periodic {
        let recorded = Mutex(false)
        let headAge = metrics.gauge("kt_head_age_seconds", help: "Age of the key directory's newest head (clients refuse one older than 2 h 10 min).")
        return Periodic(every: interval, failure: "kt_publish_failed", logger: logger) {
            if !recorded.withLock({ $0 }) {
                try await publisher.recordKeys()
                recorded.withLock { $0 = true }
            }
            let newest: DirectoryHead?
            if let published = try await publisher.publish() {
                logger.info("kt_epoch_published", metadata: ["epoch": "\(published.head.epoch)", "changes": "\(published.changes)"])
                newest = published.head
            } else {
                newest = try await store.head()
            }
            if let newest {
                headAge.set(Double(max(0, newest.age())) / 1_000)
            }
            return nil
        }
    }
}
