import Foundation
import Logging
import PostgresNIO
import Prometheus
import ServiceLifecycle
import WhisperMessaging
import WhisperShared

/// Settings of gc-worker (docs/configuration.md lists each variable).
public struct GCWorkerSettings: ServiceSettings {
    public static let serviceName = "gc-worker"
    public static let defaultPort = 8087
    public var common: CommonSettings
    public var s3: S3Settings
    /// Time between runs.
    public var interval: Duration
    /// Attachments claimed (and deleted) per transaction.
    public var batchSize: Int
    /// A recipient row younger than this is not settled yet: its message may still be
    /// on its way into the pending queue.
    public var recipientGrace: Duration
    /// Time between samples of the pending queues' total size (`PendingCensus`).
    public var pendingCensusInterval: Duration
    /// An upload that no message has named (no recipient recorded) is deleted this long
    /// after it was presigned: never-sent uploads cannot hold the bucket for 30 days.
    public var unsentLifetime: Duration = .seconds(GCWorkerSettings.defaultUnsentHours * 3_600)
    public static let defaultUnsentHours = 24
    /// A push-to-talk channel none of whose members has connected for this long lapses.
    public var pttIdleDays = 30

    public init(
        common: CommonSettings, s3: S3Settings, interval: Duration = .seconds(600), batchSize: Int = 200,
        recipientGrace: Duration = .seconds(600), pendingCensusInterval: Duration = .seconds(60)
    ) {
        self.pendingCensusInterval = pendingCensusInterval
        self.common = common
        self.s3 = s3
        self.interval = interval
        self.batchSize = batchSize
        self.recipientGrace = recipientGrace
    }

    public init(from settings: SettingsReader) {
        common = CommonSettings(service: Self.serviceName, defaultPort: Self.defaultPort, from: settings)
        s3 = S3Settings(from: settings)
        interval = .seconds(settings.int("gc.worker.interval.seconds", default: 600, range: 10...86_400))
        batchSize = settings.int("gc.worker.batch.size", default: 200, range: 1...10_000)
        recipientGrace = .seconds(settings.int("gc.worker.recipient.grace.seconds", default: 600, range: 0...86_400))
        pendingCensusInterval = .seconds(settings.int("gc.worker.pending.census.seconds", default: 60, range: 5...3_600))
        unsentLifetime = .seconds(settings.int("gc.worker.unsent.upload.hours", default: Self.defaultUnsentHours, range: 1...720) * 3_600)
        pttIdleDays = settings.int("gc.worker.ptt.idle.days", default: 30, range: 1...3_650)
    }
}

/// Assembles one gc-worker: deletes attachments that every recipient has taken, that
/// expired, or whose upload did not match its declaration, on a timer. Several may run:
/// each batch is claimed with `FOR UPDATE SKIP LOCKED`, so no two delete the same one.
public func buildGCWorker(settings: GCWorkerSettings, logger: Logger, onServerRunning: (@Sendable (Int) async -> Void)? = nil) -> HTTPServiceHandle {
    buildHTTPService(
        settings: settings.common,
        logger: logger,
        workers: { environment in
            [GCLoop(collector: AttachmentCollector(
                postgres: environment.postgres, redis: environment.redis, store: S3Client(signer: settings.s3.signer),
                batchSize: settings.batchSize, recipientGrace: settings.recipientGrace, unsentLifetime: settings.unsentLifetime,
                metrics: GCMetrics(metrics: environment.metrics), logger: environment.logger
            ), redis: environment.redis, interval: settings.interval, logger: environment.logger),
             PendingCensusLoop(redis: environment.redis, interval: settings.pendingCensusInterval, metrics: environment.metrics, logger: environment.logger),
             IdleChannelsLoop(
                channels: IdleChannels(postgres: environment.postgres, idleDays: settings.pttIdleDays, logger: environment.logger),
                interval: settings.interval, logger: environment.logger
             )]
        },
        onServerRunning: onServerRunning
    )
}

/// Runs the collector every `interval`, and whenever an operator asked for a run
/// (`GCRuns`, checked every `pollInterval`), until the service stops.
struct GCLoop: Service {
    let collector: AttachmentCollector
    let redis: RedisClient
    let interval: Duration
    var pollInterval: Duration = .seconds(1)
    let logger: Logger

    func run() async throws {
        await cancelWhenGracefulShutdown {
            var nextScheduled = ContinuousClock.now
            while !Task.isCancelled {
                do {
                    if let jobId = try await GCRuns.next(on: redis) {
                        try await runRequested(jobId)
                    } else if ContinuousClock.now >= nextScheduled {
                        nextScheduled = ContinuousClock.now + interval
                        let result = try await collector.run()
                        logger.info("gc_run_done", metadata: [
                            "settled": "\(result.settled)", "deleted": "\(result.deleted)", "bytes": "\(result.bytes)",
                        ])
                    }
                } catch RedisError.unavailable {
                    // Starting, stopping, or an outage the Redis client reports itself.
                } catch {
                    if Task.isCancelled { return }
                    logger.warning("gc_run_failed", metadata: ["error": "\(error)"])
                }
                try? await Clock.sleep(for: pollInterval)
            }
        }
    }

    private func runRequested(_ jobId: String) async throws {
        try await GCRuns.update(jobId, [("state", "running"), ("startedAt", Clock.millisecondsNow())], on: redis)
        do {
            let result = try await collector.run()
            try await GCRuns.update(jobId, [
                ("state", "done"), ("finishedAt", Clock.millisecondsNow()), ("settled", result.settled), ("deleted", result.deleted),
                ("bytes", result.bytes),
            ], on: redis)
            logger.info("gc_run_done", metadata: [
                "jobId": "\(jobId)", "settled": "\(result.settled)", "deleted": "\(result.deleted)", "bytes": "\(result.bytes)",
            ])
        } catch {
            try? await GCRuns.update(jobId, [("state", "failed"), ("finishedAt", Clock.millisecondsNow()), ("error", "\(error)")], on: redis)
            throw error
        }
    }
}

/// Samples the pending queues' total (`PendingCensus`) every `interval` for
/// `GET /admin/stats` and the `whisper_pending_messages` gauge. With several gc-workers,
/// one samples per interval (a lock key with the interval as its expiry); every one
/// shows the latest sample in its gauges.
struct PendingCensusLoop: Service {
    let redis: RedisClient
    let interval: Duration
    let messages: Gauge
    let queues: Gauge
    let age: Gauge
    let logger: Logger

    static let lockKey = "stats:pending:lock"

    init(redis: RedisClient, interval: Duration, metrics: ServiceMetrics, logger: Logger) {
        self.redis = redis
        self.interval = interval
        self.logger = logger
        messages = metrics.gauge("pending_messages", help: "Messages waiting in all pending queues together (sampled every GC_WORKER_PENDING_CENSUS_SECONDS).")
        queues = metrics.gauge("pending_queues", help: "Identities with at least one message waiting (same sample).")
        age = metrics.gauge("pending_census_age_seconds", help: "Age of the pending-queue sample the gauges show.")
    }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                // Until Redis answers (the start, an outage), try again within a second.
                var next = Duration.seconds(1)
                do {
                    let now = Clock.millisecondsNow()
                    let mine = try await redis.send("SET", Self.lockKey, "1", "NX", "PX", Int(interval.milliseconds)).string == "OK"
                    let sample = mine ? try await PendingCensus.sample(on: redis) : try await PendingCensus.latest(on: redis)
                    if let sample {
                        messages.set(Double(sample.messages))
                        queues.set(Double(sample.queues))
                        // The sample's time comes from Redis: no value of it may trap.
                        let (elapsed, overflow) = now.subtractingReportingOverflow(sample.sampledAt)
                        age.set(overflow ? 0 : Double(max(0, elapsed)) / 1_000)
                        if mine {
                            logger.info("pending_census", metadata: [
                                "messages": "\(sample.messages)", "queues": "\(sample.queues)", "tookMs": "\(sample.tookMs)",
                            ])
                        }
                    }
                    next = sample == nil ? .seconds(1) : interval
                } catch RedisError.unavailable {
                } catch {
                    if Task.isCancelled { return }
                    logger.warning("pending_census_failed", metadata: ["error": "\(error)"])
                    next = interval
                }
                try? await Clock.sleep(for: next)
            }
        }
    }
}

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

/// One pass over the attachments (spec 6.5).
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

/// Push-to-talk channels that lapsed: none of their members connected for `idleDays`
/// (the gateway marks a member's channels when it connects). Deleted with their members;
/// their Redis keys (floor, queue, announcement) lapse by themselves.
public struct IdleChannels: Sendable {
    let postgres: PostgresClient
    let idleDays: Int
    let logger: Logger

    public init(postgres: PostgresClient, idleDays: Int, logger: Logger) {
        self.postgres = postgres
        self.idleDays = idleDays
        self.logger = logger
    }

    /// Deletes up to 1,000 lapsed channels; returns how many.
    public func lapse() async throws -> Int {
        let rows = try await postgres.query(
            """
            DELETE FROM ptt_channels WHERE channel_id IN (
                SELECT channel_id FROM ptt_channels WHERE last_active_at < now() - make_interval(days => \(Int32(clamping: idleDays))) LIMIT 1000
            ) RETURNING channel_id
            """,
            logger: logger
        )
        var count = 0
        for try await _ in rows.decode(String.self) { count += 1 }
        return count
    }
}

/// Runs `IdleChannels` every `interval` (several gc-workers may: a deletion is once).
struct IdleChannelsLoop: Service {
    let channels: IdleChannels
    let interval: Duration
    let logger: Logger

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    let lapsed = try await channels.lapse()
                    if lapsed > 0 { logger.info("ptt_channels_lapsed", metadata: ["count": "\(lapsed)"]) }
                } catch {
                    if Task.isCancelled { return }
                    logger.warning("ptt_lapse_failed", metadata: ["error": "\(error)"])
                }
                try? await Clock.sleep(for: interval)
            }
        }
    }
}
