import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import WhisperMessaging
import WhisperShared

/// Reads one shard of `stream:push` as a consumer of `push-senders` and turns each job into
/// at most one provider request. A job is acknowledged only once finished (delivered, not
/// needed, retried later or dead-lettered), and one left by a dead push-sender is claimed
/// after `claimAfter`: at least once, so a wake-up may rarely go twice.
struct PushWorker: Service, CustomStringConvertible {
    var description: String { "PushWorker(\(consumerName), \(streamKey))" }

    /// The shard's key.
    let streamKey: String
    /// A connection of its own: XREADGROUP blocks.
    let reader: RedisClient
    let redis: RedisClient
    let devices: DeviceDirectory
    let apns: (any PushProvider)?
    let fcm: (any PushProvider)?
    let consumerName: String
    let settings: PushSenderSettings
    let metrics: PushMetrics
    let logger: Logger
    /// Requests open per provider, at most `inFlightPerProvider` each.
    let providerSlots: [String: Slots]

    /// Jobs being handled at once, at most: reading stops while this many are open.
    var maxJobs: Int { max(settings.batchSize, settings.inFlightPerProvider) * 2 }

    var stream: StreamGroupReader {
        StreamGroupReader(
            stream: streamKey, group: PushStream.group, consumer: consumerName, reader: reader, redis: redis, logger: logger,
            events: "push"
        )
    }

    func run() async throws {
        // Each job is a lane of its own: jobs are handled at once, up to `maxJobs`.
        let jobs = Lanes<PushJob>(limit: maxJobs)
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                await loop(jobs: jobs) { job in
                    group.addTask {
                        await handle(job.entry)
                        jobs.finished(job)
                    }
                }
            }
            // Stopping: what finished is acknowledged; the rest is claimed elsewhere.
            try? await acknowledge(jobs.takeFinished())
        }
    }

    /// Reads while there is room, so a slow or stalled provider holds up only the jobs
    /// waiting for it, not the stream; acknowledges what finished with each read.
    private func loop(jobs: Lanes<PushJob>, start: (PushJob) -> Void) async {
        let stream = self.stream
        var lastClaim = ContinuousClock.now
        // Each job waits for room before it starts, claimed ones too: never more than
        // `maxJobs` in hand.
        func begin(_ entries: [StreamGroupReader.Entry]) async {
            for entry in entries {
                await jobs.waitForRoom()
                let job = PushJob(entry: Entry(id: entry.id, job: entry.fields.flatMap(PushStream.Job.init(fields:)), fields: entry.fields ?? []))
                if jobs.add(job) { start(job) }
            }
        }
        await stream.loop {
            try await moveDueRetries()
            await jobs.waitForRoom()
            let done = jobs.takeFinished()
            let entries: [StreamGroupReader.Entry]
            do {
                entries = try await stream.read(count: min(settings.batchSize, jobs.room), blockMs: 500, acknowledging: done)
            } catch {
                // Kept for the next turn: not handled a second time once Redis is back.
                jobs.restore(done)
                throw error
            }
            await begin(entries)
            if ContinuousClock.now - lastClaim >= settings.claimAfter / 2 {
                var claimed: [StreamGroupReader.Entry] = []
                // One of our own still in flight for that long (a stalled provider) is not abandoned.
                try await stream.claim(idle: settings.claimAfter, count: settings.batchSize, isOurs: jobs.isHandling) { page in
                    claimed += page
                    return claimed.count < settings.batchSize
                }
                if !claimed.isEmpty { logger.info("push_claimed_jobs", metadata: ["count": "\(claimed.count)"]) }
                await begin(claimed)
                lastClaim = ContinuousClock.now
            }
        }
    }

    typealias Entry = (id: String, job: PushStream.Job?, fields: [RESPValue])

    /// Acknowledges and deletes finished jobs in one write.
    private func acknowledge(_ ids: [String]) async throws {
        try await stream.acknowledge(ids)
    }

    private func handle(_ entry: Entry) async {
        guard let job = entry.job else {
            // A claimed entry that was deleted meanwhile: already finished elsewhere.
            if entry.fields.isEmpty { return }
            logger.error("push_job_malformed", metadata: ["entryId": "\(entry.id)"])
            await deadLetter(fields: entry.fields.compactMap(\.string), reason: "malformed", attempts: 0)
            return
        }
        do {
            try await handle(job)
        } catch {
            // Redis or Postgres failed: tried again later like a provider failure.
            logger.warning("push_job_failed", metadata: ["kind": "\(job.kind.rawValue)", "error": "\(error)"])
            await scheduleRetryOrGiveUp(job, after: nil, reason: "infrastructure: \(error)", provider: nil)
        }
    }

    private func handle(_ job: PushStream.Job) async throws {
        metrics.pickedUp(afterMs: Clock.millisecondsNow() &- job.at, firstAttempt: job.attempt == 0)
        switch try await gate(job) {
        case .online:
            metrics.skipped("online")
            return
        case .coalesced:
            metrics.coalesced.increment()
            return
        case .send:
            break
        }
        guard let device = try await devices.activeDevice(of: job.to) else {
            metrics.skipped("no_device")
            return
        }
        let provider: (any PushProvider)?
        let token: String?
        let kind: DeviceDirectory.TokenKind
        switch (device.platform, job.kind) {
        case (.ios, .call):
            provider = apns
            (token, kind) = (device.voipToken, .voip)
        case (.ios, .message):
            provider = apns
            (token, kind) = (device.pushToken, .push)
        case (.android, _):
            provider = fcm
            (token, kind) = (device.pushToken, .push)
        }
        guard let token, !token.isEmpty else {
            metrics.skipped("no_token")
            return
        }
        guard let provider else {
            await deadLetter(job, reason: "provider_not_configured", attempts: job.attempt)
            return
        }
        let slot = providerSlots[provider.name]
        await slot?.acquire()
        let started = ContinuousClock.now
        let raw = await provider.send(Wakeup(job: job, token: token, tokenKind: kind), ttl: job.kind == .call ? settings.callTTL : settings.messageTTL)
        metrics.providerLatency(provider.name, ContinuousClock.now - started)
        slot?.release()
        let tokenHash = ProviderHTTP.tokenHash(token)
        // A provider's or the HTTP client's text could quote the request; it never
        // carries the token into a log line or the dead-letter stream.
        let answer = raw.redacting(token, as: tokenHash)
        switch answer {
        case .delivered:
            metrics.sent(provider.name, "delivered")
            logger.debug("push_sent", metadata: ["provider": "\(provider.name)", "kind": "\(job.kind.rawValue)", "token": "\(tokenHash)"])
        case .retry(let after, let reason):
            metrics.sent(provider.name, "retry")
            logger.info("push_retry", metadata: [
                "provider": "\(provider.name)", "reason": "\(reason)", "attempt": "\(job.attempt + 1)", "token": "\(tokenHash)",
            ])
            await scheduleRetryOrGiveUp(job, after: after, reason: reason, provider: provider.name)
        case .deadToken(let reason):
            metrics.sent(provider.name, "dead_token")
            let removed = try await devices.removeToken(token, kind: kind, of: job.to)
            _ = try? await redis.send("DEL", PushStream.wokenKey(job.to))
            logger.info("push_token_removed", metadata: [
                "provider": "\(provider.name)", "reason": "\(reason)", "token": "\(tokenHash)", "removed": "\(removed)",
            ])
        case .failed(let reason):
            metrics.sent(provider.name, "failed")
            await deadLetter(job, reason: reason, attempts: job.attempt + 1)
        }
    }

    enum Gate: Equatable {
        case send, online, coalesced
    }

    /// Whether the wake-up is needed: not when a socket of the identity is live, and for
    /// a message not while an earlier wake-up in the window is unanswered. Calls are
    /// never coalesced; a retry is not coalesced with its own first attempt.
    private func gate(_ job: PushStream.Job) async throws -> Gate {
        let coalesce = job.kind == .message && job.attempt == 0 && settings.coalesceWindow > .zero
        let reply = try await redis.evaluate(
            Self.gateScript, keys: [RedisKeys.presence(job.to), PushStream.wokenKey(job.to)],
            arguments: [coalesce ? 1 : 0, max(1, Int(settings.coalesceWindow.milliseconds))]
        )
        switch reply.int ?? 0 {
        case 1: return .online
        case 2: return .coalesced
        default: return .send
        }
    }

    /// `push-gate.lua` (its header says what it takes and answers).
    static let gateScript = RedisScript(LuaSource.pushGate)

    // MARK: - Retries and dead letters

    private func scheduleRetryOrGiveUp(_ job: PushStream.Job, after hint: Duration?, reason: String, provider: String?) async {
        let attempts = job.attempt + 1
        guard attempts < settings.maxAttempts else {
            await deadLetter(job, reason: reason, attempts: attempts)
            return
        }
        var delay = Self.backoff(attempt: attempts, initial: settings.retryInitial, maximum: settings.retryMaximum)
        if let hint, hint > delay { delay = hint }
        var next = job
        next.attempt = attempts
        let due = Clock.millisecondsNow() &+ Int64(delay.milliseconds)
        // A member of its own even for the same job twice: the nonce keeps both.
        let member = Self.encodeMember(next.fields.map { String(decoding: $0.redisBytes, as: UTF8.self) } + ["n", RandomID.uuid()])
        do {
            try await redis.send("ZADD", PushStream.retryKey(of: streamKey), due, member)
            if let provider { metrics.retried(provider) }
        } catch {
            // Not acknowledged either (the batch's acknowledgement fails the same way):
            // claimed and tried again after `claimAfter`.
            logger.warning("push_retry_schedule_failed", metadata: ["error": "\(error)"])
        }
    }

    /// The delay before attempt `attempt` (1 for the first retry): doubling from
    /// `initial` up to `maximum`, with "equal jitter" (half fixed, half random).
    static func backoff(attempt: Int, initial: Duration, maximum: Duration) -> Duration {
        let exponent = min(max(attempt - 1, 0), 30)
        let base = min(initial.milliseconds * Double(1 << exponent), maximum.milliseconds)
        return .milliseconds(Int64(base / 2 + Double.random(in: 0...(base / 2))))
    }

    private func deadLetter(_ job: PushStream.Job, reason: String, attempts: Int) async {
        // The wake-up never went out: the next message may try again at once.
        if job.kind == .message { _ = try? await redis.send("DEL", PushStream.wokenKey(job.to)) }
        var first = job
        first.attempt = 0
        await deadLetter(fields: first.fields.map { String(decoding: $0.redisBytes, as: UTF8.self) }, reason: reason, attempts: attempts)
    }

    private func deadLetter(fields: [String], reason: String, attempts: Int) async {
        metrics.deadLettered(reason)
        logger.warning("push_dead_lettered", metadata: ["reason": "\(reason)", "attempts": "\(attempts)"])
        do {
            let replies = try await redis.pipeline(PushStream.deadLetter(fields, reason: reason, attempts: attempts, of: streamKey, now: Clock.millisecondsNow()))
            for case .error(let message) in replies {
                logger.error("push_dead_letter_failed", metadata: ["error": "\(message)"])
            }
        } catch {
            logger.error("push_dead_letter_failed", metadata: ["error": "\(error)"])
        }
    }

    /// Moves retries that are due back into the stream (a bounded batch per call).
    private func moveDueRetries() async throws {
        try await redis.evaluate(
            Self.moveDueScript, keys: [PushStream.retryKey(of: streamKey), streamKey],
            arguments: [Clock.millisecondsNow(), 500, PushStream.maxLength]
        )
    }

    /// `push-move-due.lua` (its header says what it takes and answers).
    static let moveDueScript = RedisScript(LuaSource.pushMoveDue)

    static func encodeMember(_ fields: [String]) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: fields, options: [])) ?? Data("[]".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}

/// A counting semaphore for tasks (requests open per provider): `acquire` waits while
/// none is free.
final class Slots: Sendable {
    private struct State {
        var free: Int
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state: Mutex<State>

    init(_ count: Int) {
        state = Mutex(State(free: max(1, count)))
    }

    func acquire() async {
        if state.withLock({ state in
            guard state.free > 0 else { return false }
            state.free -= 1
            return true
        }) { return }
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.free > 0 {
                    state.free -= 1
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    func release() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if !state.waiters.isEmpty { return state.waiters.removeFirst() }
            state.free += 1
            return nil
        }
        waiter?.resume()
    }
}

/// A push job as `Lanes` holds it: each is a lane of its own.
struct PushJob: LaneItem {
    var entry: PushWorker.Entry
    var id: String { entry.id }
    var lane: String { entry.id }
}
