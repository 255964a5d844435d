import Logging
import Synchronization
import WhisperShared

/// Publishes the key directory's epochs every `interval` (one gc-worker at a time, under a
/// lock), refusing to run with a VRF key other than the directory's, and sets
/// `whisper_kt_head_age_seconds` each tick: clients refuse a head older than
/// `KeyDirectory.staleHeadAge`, so the operator must hear first.
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
