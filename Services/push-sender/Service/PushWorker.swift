import Foundation
import Logging
import ServiceLifecycle
import WhisperShared

/// Reads `stream:push` as one consumer of the group `push-senders` and turns each job
/// into at most one provider request. A job is acknowledged (and deleted from the
/// stream) only once it is finished: delivered, not needed (the recipient is online,
/// coalesced, has no device or token), scheduled for a retry, or dead-lettered. Jobs
/// another push-sender left unacknowledged for `claimAfter` (it died) are claimed and
/// handled here. A job is handled at least once; a wake-up may, rarely, go out twice.
struct PushWorker: Service, CustomStringConvertible {
    var description: String { "PushWorker(\(consumerName))" }

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

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await loop()
        }
    }

    private func loop() async {
        var backoff = Backoff(policy: .init(initial: .milliseconds(50), maximum: .seconds(2)))
        var groupReady = false
        var readerConnected = false
        var lastClaim = ContinuousClock.now
        while !Task.isCancelled {
            do {
                if !groupReady {
                    try await ensureGroup()
                    groupReady = true
                }
                try await moveDueRetries()
                let reply = try await reader.send(RedisCommand("XREADGROUP", [
                    "GROUP", PushStream.group, consumerName, "COUNT", settings.batchSize, "BLOCK", 500,
                    "STREAMS", PushStream.key, ">",
                ]))
                readerConnected = true
                let entries = Self.entries(ofReadReply: reply)
                if !entries.isEmpty {
                    try await handle(entries)
                }
                if ContinuousClock.now - lastClaim >= settings.claimAfter / 2 {
                    try await claimAbandoned()
                    lastClaim = ContinuousClock.now
                }
                backoff.reset()
            } catch RedisError.server(let message) where message.hasPrefix("NOGROUP") {
                groupReady = false
            } catch RedisError.unavailable where !readerConnected {
                try? await Clock.sleep(for: .milliseconds(20))
            } catch {
                if Task.isCancelled { break }
                let delay = backoff.next()
                logger.warning("push_read_failed", metadata: ["error": "\(error)", "retryInMs": "\(Int(delay.milliseconds))"])
                try? await Task.sleep(for: delay)
            }
        }
    }

    private func ensureGroup() async throws {
        do {
            try await redis.send("XGROUP", "CREATE", PushStream.key, PushStream.group, "0", "MKSTREAM")
        } catch RedisError.server(let message) where message.hasPrefix("BUSYGROUP") {
            // Another push-sender made it first.
        }
    }

    /// Handles a batch, at most `inFlightPerProvider` jobs at once, then acknowledges
    /// and deletes every entry of it in one write.
    private func handle(_ entries: [(id: String, job: PushStream.Job?, fields: [RESPValue])]) async throws {
        let limit = max(1, settings.inFlightPerProvider)
        await withTaskGroup(of: Void.self) { group in
            var running = 0
            for entry in entries {
                if running >= limit {
                    await group.next()
                    running -= 1
                }
                running += 1
                group.addTask { await handle(entry) }
            }
        }
        let ids = entries.map(\.id)
        _ = try await redis.pipeline([
            RedisCommand("XACK", [PushStream.key, PushStream.group] + ids),
            RedisCommand("XDEL", [PushStream.key] + ids),
        ])
    }

    private func handle(_ entry: (id: String, job: PushStream.Job?, fields: [RESPValue])) async {
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
        let started = ContinuousClock.now
        let answer = await provider.send(Wakeup(job: job, token: token, tokenKind: kind), ttl: job.kind == .call ? settings.callTTL : settings.messageTTL)
        metrics.providerLatency(provider.name, ContinuousClock.now - started)
        let tokenHash = ProviderHTTP.tokenHash(token)
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
            try? await redis.send("DEL", PushStream.wokenKey(job.to))
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

    /// KEYS: presence, woken marker (one identity's slot). ARGV: 1 to coalesce, window ms.
    /// Returns 1 (online), 2 (coalesced) or 0 (send).
    static let gateScript = RedisScript("""
        if redis.call('EXISTS', KEYS[1]) == 1 then return 1 end
        if ARGV[1] == '1' then
            if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then return 2 end
        end
        return 0
        """)

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
            try await redis.send("ZADD", PushStream.retryKey, due, member)
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
            try await redis.send(RedisCommand("XADD", [
                PushStream.deadKey, "MAXLEN", "~", PushStream.deadMaxLength, "*",
            ] + fields.prefix(16 - fields.count % 2).map { String($0.prefix(256)) as any RedisArgument } + [
                "reason", String(reason.prefix(300)), "attempts", attempts, "failedAt", Clock.millisecondsNow(),
            ]))
        } catch {
            logger.error("push_dead_letter_failed", metadata: ["error": "\(error)"])
        }
    }

    /// Moves retries that are due back into the stream (a bounded batch per call).
    private func moveDueRetries() async throws {
        try await redis.evaluate(
            Self.moveDueScript, keys: [PushStream.retryKey, PushStream.key],
            arguments: [Clock.millisecondsNow(), 500, PushStream.maxLength]
        )
    }

    /// KEYS: retry set, push stream (one slot). ARGV: now ms, batch, stream cap.
    static let moveDueScript = RedisScript("""
        local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
        for _, member in ipairs(due) do
            local ok, fields = pcall(cjson.decode, member)
            if ok and type(fields) == 'table' and #fields % 2 == 0 and #fields > 0 then
                redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', unpack(fields))
            end
            redis.call('ZREM', KEYS[1], member)
        end
        return #due
        """)

    static func encodeMember(_ fields: [String]) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: fields, options: [])) ?? Data("[]".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    // MARK: - Claims

    private func claimAbandoned() async throws {
        var start = "0-0"
        for _ in 0..<20 {
            let reply = try await redis.send(RedisCommand("XAUTOCLAIM", [
                PushStream.key, PushStream.group, consumerName, Int(settings.claimAfter.milliseconds), start, "COUNT", settings.batchSize,
            ]))
            guard let parts = reply.array, parts.count >= 2, let next = parts[0].string else { return }
            let entries = Self.entries(parts[1])
            if !entries.isEmpty {
                logger.info("push_claimed_jobs", metadata: ["count": "\(entries.count)"])
                try await handle(entries)
            }
            if next == "0-0" { return }
            start = next
        }
    }

    static func entries(ofReadReply reply: RESPValue) -> [(id: String, job: PushStream.Job?, fields: [RESPValue])] {
        guard let streams = reply.array else { return [] }
        return streams.flatMap { stream -> [(id: String, job: PushStream.Job?, fields: [RESPValue])] in
            guard let parts = stream.array, parts.count == 2 else { return [] }
            return entries(parts[1])
        }
    }

    static func entries(_ list: RESPValue) -> [(id: String, job: PushStream.Job?, fields: [RESPValue])] {
        (list.array ?? []).compactMap { item in
            guard let parts = item.array, parts.count == 2, let id = parts[0].string else { return nil }
            // A claimed entry deleted meanwhile comes back without fields: nothing to do.
            guard let fields = parts[1].array else { return (id, nil, []) }
            return (id, PushStream.Job(fields: fields), fields)
        }
    }
}
