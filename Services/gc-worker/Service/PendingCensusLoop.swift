import Foundation
import Logging
import Synchronization
import PostgresNIO
import Prometheus
import ServiceLifecycle
import WhisperMessaging
import WhisperShared

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
        // Until Redis answers (the start, an outage), try again within a second.
        try await Periodic(every: interval, failure: "pending_census_failed", unavailableRetry: .seconds(1), logger: logger) {
            let now = Clock.millisecondsNow()
            let mine = try await redis.send("SET", Self.lockKey, "1", "NX", "PX", Int(interval.milliseconds)).string == "OK"
            guard let sample = mine ? try await PendingCensus.sample(on: redis) : try await PendingCensus.latest(on: redis) else {
                return .seconds(1)
            }
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
            return nil
        }.run()
    }
}
