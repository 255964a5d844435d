import Foundation
import Logging
import Synchronization
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
    /// The key directory's signer keys (`GC_WORKER_KT_VRF_KEY`, `GC_WORKER_KT_SIGNING_KEYS`): only
    /// gc-workers hold them.
    public var directorySigner: DirectorySigner
    /// Time between the directory's epochs when identities wait (docs/key-transparency.md).
    public var directoryInterval: Duration = .milliseconds(GCWorkerSettings.defaultDirectoryIntervalMilliseconds)
    public static let defaultDirectoryIntervalMilliseconds = 2_000
    /// Entries one epoch takes at most.
    public var directoryBatch = 5_000
    /// An epoch is published at least this often, changes or not.
    public var directoryHeadMaxAge: Duration = KeyDirectory.longestEpochInterval
    /// The deletion journal's keys (`GC_WORKER_JOURNAL_KEYS`): only gc-workers hold them.
    public var journalKeys: JournalKeys
    /// Time between copies of new deletions to the deletion journal.
    public var journalInterval: Duration = .seconds(5)
    /// Time between walks of the whole deletion journal (one also at each start).
    public var journalReapplyInterval: Duration = .seconds(24 * 3_600)

    public init(
        common: CommonSettings, s3: S3Settings, directorySigner: DirectorySigner, journalKeys: JournalKeys, interval: Duration = .seconds(600),
        batchSize: Int = 200, recipientGrace: Duration = .seconds(600), pendingCensusInterval: Duration = .seconds(60)
    ) {
        self.directorySigner = directorySigner
        self.journalKeys = journalKeys
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
        let vrf = settings.requiredSeeds("gc.worker.kt.vrf.key")
        let signing = settings.requiredSeeds("gc.worker.kt.signing.keys")
        if let vrf, vrf.count != 1 { settings.reject("gc.worker.kt.vrf.key", because: "must be one key (the directory's VRF key never changes)") }
        // With either missing the settings are invalid and the service does not start.
        directorySigner = DirectorySigner(vrfSeed: vrf?.first ?? [UInt8](repeating: 0, count: 32), signingSeeds: signing ?? [[UInt8](repeating: 0, count: 32)])
        directoryInterval = settings.milliseconds(
            "gc.worker.kt.interval.ms", default: .milliseconds(Self.defaultDirectoryIntervalMilliseconds), range: 100...60_000
        )
        directoryBatch = settings.int("gc.worker.kt.batch", default: 5_000, range: 1...100_000)
        directoryHeadMaxAge = settings.seconds(
            "gc.worker.kt.head.max.age.seconds", default: KeyDirectory.longestEpochInterval,
            range: 10...Int(KeyDirectory.longestEpochInterval.components.seconds)
        )
        // Missing, the settings are invalid and the service does not start.
        journalKeys = JournalKeys(secrets: settings.requiredSeeds("gc.worker.journal.keys") ?? [[UInt8](repeating: 0, count: 32)])
        journalInterval = settings.seconds("gc.worker.journal.interval.seconds", default: journalInterval, range: 1...3_600)
        journalReapplyInterval = .seconds(
            settings.int("gc.worker.journal.reapply.hours", default: 24, range: 1...720) * 3_600
        )
    }
}

/// Assembles one gc-worker: deletes attachments that every recipient has taken, that
/// expired, or whose upload did not match its declaration, on a timer; publishes the key
/// directory's epochs; keeps the deletion journal; lets idle push-to-talk channels lapse. Several may run:
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
             DirectoryLoop.periodic(
                publisher: DirectoryPublisher(
                    postgres: environment.postgres, signer: settings.directorySigner, batchSize: settings.directoryBatch,
                    headMaxAge: settings.directoryHeadMaxAge, logger: environment.logger
                ),
                store: DirectoryStore(postgres: environment.postgres, logger: environment.logger), metrics: environment.metrics,
                interval: settings.directoryInterval, logger: environment.logger
             ),
             DeletionJournalLoop.periodic(
                journal: DeletionJournal(
                    postgres: environment.postgres, redis: environment.redis, store: S3Client(signer: settings.s3.signer),
                    keys: settings.journalKeys, instanceID: settings.common.instanceID, logger: environment.logger
                ),
                interval: settings.journalInterval, reapplyInterval: settings.journalReapplyInterval, metrics: environment.metrics,
                logger: environment.logger
             ),
             IdleChannelsLoop.periodic(
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
        let nextScheduled = Mutex(ContinuousClock.now)
        try await Periodic(every: pollInterval, failure: "gc_run_failed", logger: logger) {
            if let jobId = try await GCRuns.next(on: redis) {
                try await runRequested(jobId)
            } else if nextScheduled.withLock({ due in
                guard ContinuousClock.now >= due else { return false }
                due = ContinuousClock.now + interval
                return true
            }) {
                let result = try await collector.run()
                logger.info("gc_run_done", metadata: [
                    "settled": "\(result.settled)", "deleted": "\(result.deleted)", "bytes": "\(result.bytes)",
                ])
            }
            return nil
        }.run()
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
