import Logging
import Synchronization
import WhisperMessaging
import WhisperShared

/// Keeps the deletion journal (`DeletionJournal`): copies new deletions to the object
/// store every `interval`, and applies the whole journal once the loop starts (a restore
/// is followed by a start: docs/operations.md, "Restore") and every `reapplyInterval`
/// after (a database restored under a running gc-worker is caught within it). Every
/// gc-worker runs it: the copies are claimed row by row, and applying twice finds the
/// second time nothing to do.
enum DeletionJournalLoop {
    static func periodic(journal: DeletionJournal, interval: Duration, reapplyInterval: Duration, logger: Logger) -> Periodic {
        let nextReapply = Mutex<ContinuousClock.Instant?>(nil)
        return Periodic(every: interval, failure: "deletion_journal_failed", logger: logger) {
            if nextReapply.withLock({ due in due.map { ContinuousClock.now >= $0 } ?? true }) {
                _ = try await journal.reapply()
                nextReapply.withLock { $0 = ContinuousClock.now + reapplyInterval }
            }
            let written = try await journal.write()
            if written > 0 { logger.info("deletion_journal_written", metadata: ["deletions": "\(written)"]) }
            return nil
        }
    }
}
