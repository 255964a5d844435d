import Foundation
import Logging
import Synchronization
import PostgresNIO
import Prometheus
import ServiceLifecycle
import WhisperMessaging
import WhisperShared

struct GCMetrics: Sendable {
    let objects: Counter
    let bytes: Counter
    let failures: Counter
    let runs: Counter

    init(metrics: ServiceMetrics) {
        objects = metrics.counter("gc_attachments_deleted", help: "Attachment objects deleted from the store (and their rows).")
        bytes = metrics.counter("gc_attachment_bytes_deleted", help: "Declared bytes of the attachments deleted.")
        failures = metrics.counter("gc_delete_failures", help: "Object deletions the store refused; retried next run.")
        runs = metrics.counter("gc_runs", help: "Completed GC runs.")
    }
}

/// One pass over the attachments (docs/architecture.md, "Attachments and GC").
public struct AttachmentCollector: Sendable {
    let postgres: PostgresClient
    let redis: RedisClient
    let store: S3Client
    let batchSize: Int
    let recipientGrace: Duration
    var unsentLifetime: Duration = .seconds(GCWorkerSettings.defaultUnsentHours * 3_600)
    let metrics: GCMetrics
    let logger: Logger

    public struct RunResult: Sendable, Equatable {
        /// Recipient rows found taken (delivered, or gone from the pending queue).
        public var settled = 0
        public var deleted = 0
        public var bytes: Int64 = 0
    }

    /// Settles recipients, then deletes what may go, batch by batch, as of `now` (tests
    /// pass a later time to stand for the clock).
    public func run(now: Date = Date()) async throws -> RunResult {
        var result = RunResult()
        while true {
            let settled = try await settleRecipients(now: now)
            result.settled += settled
            if settled < batchSize { break }
        }
        while true {
            let (count, bytes) = try await deleteBatch(now: now)
            result.deleted += count
            result.bytes += bytes
            if count < batchSize { break }
        }
        metrics.runs.increment()
        return result
    }

    /// A recipient has taken an attachment once its message left the pending queue
    /// delivered (`pending:{W}:msg:<id>` state `delivered`), or is gone from it (the
    /// 72 hours passed): the key it travels with cannot be fetched again either way.
    func settleRecipients(now: Date) async throws -> Int {
        try await postgres.withTransaction(logger: logger) { connection in
            let cutoff = now.addingTimeInterval(-Double(recipientGrace.components.seconds))
            let rows = try await connection.query("""
                SELECT object_key, recipient_id, message_id::text FROM attachment_recipients
                WHERE acked_at IS NULL AND recorded_at <= \(cutoff)
                ORDER BY recorded_at LIMIT \(batchSize) FOR UPDATE SKIP LOCKED
                """, logger: logger)
            var candidates: [(String, String, String)] = []
            for try await row in rows.decode((String, String, String).self) { candidates.append(row) }
            guard !candidates.isEmpty else { return 0 }
            let states = try await redis.pipeline(candidates.map { _, recipient, messageId in
                RedisCommand("HGET", [PendingQueue.messageKey(recipient, messageId), "state"])
            })
            var taken = 0
            for (index, (objectKey, recipient, messageId)) in candidates.enumerated() {
                let state = states[index].string
                guard state == nil || state == "delivered" else { continue }
                if case .error = states[index] { continue }
                try await connection.query("""
                    UPDATE attachment_recipients SET acked_at = \(now)
                    WHERE object_key = \(objectKey) AND recipient_id = \(recipient) AND message_id = \(messageId)::uuid
                    """, logger: logger)
                taken += 1
            }
            return taken
        }
    }

    /// Claims up to a batch of attachments that may go (expired; rejected; never sent
    /// within `unsentLifetime`; sent, and taken by every recipient), deletes their
    /// objects, then their rows, in one
    /// transaction: another collector skips the claimed rows, and an object whose
    /// deletion failed keeps its row for the next run.
    func deleteBatch(now: Date) async throws -> (Int, Int64) {
        let unsentBefore = now.addingTimeInterval(-Double(unsentLifetime.components.seconds))
        return try await postgres.withTransaction(logger: logger) { connection in
            let rows = try await connection.query("""
                SELECT a.object_key, a.size_bytes FROM attachments a
                WHERE a.deleted_at IS NULL AND (
                    a.expires_at <= \(now) OR a.rejected_at IS NOT NULL
                    OR (a.created_at <= \(unsentBefore) AND NOT EXISTS (SELECT 1 FROM attachment_recipients r WHERE r.object_key = a.object_key))
                    OR (
                        EXISTS (SELECT 1 FROM attachment_recipients r WHERE r.object_key = a.object_key)
                        AND NOT EXISTS (SELECT 1 FROM attachment_recipients r WHERE r.object_key = a.object_key AND r.acked_at IS NULL)
                    )
                )
                ORDER BY a.created_at LIMIT \(batchSize) FOR UPDATE SKIP LOCKED
                """, logger: logger)
            var claimed: [(String, Int64)] = []
            for try await row in rows.decode((String, Int64).self) { claimed.append(row) }
            var deleted: [String] = []
            var bytes: Int64 = 0
            for (objectKey, size) in claimed {
                do {
                    try await store.delete(objectKey)
                    deleted.append(objectKey)
                    bytes = bytes.addingReportingOverflow(size).overflow ? bytes : bytes + size
                } catch {
                    metrics.failures.increment()
                    logger.warning("gc_delete_failed", metadata: ["objectKey": "\(objectKey)", "error": "\(error)"])
                }
            }
            if !deleted.isEmpty {
                try await connection.query("DELETE FROM attachments WHERE object_key = ANY(\(deleted))", logger: logger)
            }
            metrics.objects.increment(by: Int64(deleted.count))
            metrics.bytes.increment(by: bytes)
            // A batch where every deletion failed must not spin: report a short batch.
            return (deleted.isEmpty ? 0 : claimed.count, bytes)
        }
    }
}
