import Logging
import Synchronization
import WhisperMessaging
import WhisperShared

/// Keeps the deletion journal: copies new deletions to the object store every `interval`,
/// applies the whole journal at start and every `reapplyInterval` (catching a restore), on
/// every gc-worker at once (rows are claimed; a second application finds nothing), and sets
/// `whisper_gc_deletion_journal_unreadable` to the objects no configured key opens.
enum DeletionJournalLoop {
    static func periodic(journal: DeletionJournal, interval: Duration, reapplyInterval: Duration, metrics: ServiceMetrics, logger: Logger) -> Periodic {
        let nextReapply = Mutex<ContinuousClock.Instant?>(nil)
        let unreadable = metrics.gauge(
            "gc_deletion_journal_unreadable",
            help: "Deletion journal objects that no key in GC_WORKER_JOURNAL_KEYS opened at the last walk (a key dropped too early, or objects not the journal's)."
        )
        return Periodic(every: interval, failure: "deletion_journal_failed", logger: logger) {
            if nextReapply.withLock({ due in due.map { ContinuousClock.now >= $0 } ?? true }) {
                unreadable.set(Double(try await journal.reapply().unreadable))
                nextReapply.withLock { $0 = ContinuousClock.now + reapplyInterval }
            }
            let written = try await journal.write()
            if written > 0 { logger.info("deletion_journal_written", metadata: ["deletions": "\(written)"]) }
            return nil
        }
    }
}
