import Logging
import ServiceLifecycle
import WhisperShared

/// Reads the router stream as one consumer of the group `routers`, hands each entry to
/// the `MessageRouter`, and acknowledges what it handled. Entries another router took
/// and left unacknowledged for `claimAfter` (it crashed) are claimed and handled again.
struct StreamConsumer: Service {
    /// A connection of its own: XREADGROUP blocks, and must not hold up other commands.
    let reader: RedisClient
    let redis: RedisClient
    let router: MessageRouter
    let consumerName: String
    let settings: RouterSettings
    let logger: Logger

    func run() async throws {
        try await cancelWhenGracefulShutdown {
            var backoff = Backoff(policy: .init(initial: .milliseconds(50), maximum: .seconds(2)))
            var lastClaim = ContinuousClock.now
            var groupReady = false
            while !Task.isCancelled {
                do {
                    if !groupReady {
                        try await ensureGroup()
                        groupReady = true
                    }
                    let reply = try await reader.send(RedisCommand("XREADGROUP", [
                        "GROUP", RouterStream.group, consumerName, "COUNT", settings.batchSize, "BLOCK", 1000,
                        "STREAMS", RouterStream.key, ">",
                    ]))
                    let entries = Self.entries(ofReadReply: reply)
                    if !entries.isEmpty {
                        await handle(entries, redelivery: false)
                    }
                    if ContinuousClock.now - lastClaim >= settings.claimAfter / 2 {
                        try await claimAbandoned()
                        lastClaim = ContinuousClock.now
                    }
                    backoff.reset()
                } catch RedisError.server(let message) where message.hasPrefix("NOGROUP") {
                    groupReady = false
                } catch {
                    let delay = backoff.next()
                    logger.warning("router_read_failed", metadata: ["error": "\(error)", "retryInMs": "\(Int(delay.milliseconds))"])
                    try? await Task.sleep(for: delay)
                }
            }
        }
    }

    private func ensureGroup() async throws {
        do {
            try await redis.send("XGROUP", "CREATE", RouterStream.key, RouterStream.group, "0", "MKSTREAM")
        } catch RedisError.server(let message) where message.hasPrefix("BUSYGROUP") {
            // Another router made it first.
        }
    }

    /// Takes over entries idle longer than `claimAfter`, a page at a time.
    private func claimAbandoned() async throws {
        var start = "0-0"
        for _ in 0..<20 {
            let reply = try await redis.send(RedisCommand("XAUTOCLAIM", [
                RouterStream.key, RouterStream.group, consumerName, Int(settings.claimAfter.milliseconds), start,
                "COUNT", settings.batchSize,
            ]))
            guard let parts = reply.array, parts.count >= 2, let next = parts[0].string else { return }
            var entries = Self.entries(parts[1])
            if !entries.isEmpty {
                logger.info("router_claimed_entries", metadata: ["count": "\(entries.count)"])
                entries = try await dropPoisoned(entries)
                await handle(entries, redelivery: true)
            }
            if next == "0-0" { return }
            start = next
        }
    }

    /// An entry that failed `maxDeliveries` times will not succeed by trying again (its
    /// failure is not an outage): its client gets INTERNAL_ERROR, the entry is logged
    /// and acknowledged. A resend by the client starts afresh.
    private func dropPoisoned(_ entries: [(id: String, entry: RouterStream.Entry?)]) async throws -> [(id: String, entry: RouterStream.Entry?)] {
        guard let first = entries.first?.id, let last = entries.last?.id else { return entries }
        let reply = try await redis.send(RedisCommand("XPENDING", [RouterStream.key, RouterStream.group, first, last, entries.count * 2]))
        var deliveries: [String: Int64] = [:]
        for item in reply.array ?? [] {
            if let fields = item.array, fields.count == 4, let id = fields[0].string, let count = fields[3].int {
                deliveries[id] = count
            }
        }
        var kept: [(id: String, entry: RouterStream.Entry?)] = []
        var dropped: [String] = []
        for item in entries {
            guard (deliveries[item.id] ?? 0) > Self.maxDeliveries else {
                kept.append(item)
                continue
            }
            dropped.append(item.id)
            logger.error("router_entry_abandoned", metadata: ["entryId": "\(item.id)", "deliveries": "\(deliveries[item.id] ?? 0)"])
            if let entry = item.entry {
                let frame = ServerFrameCodec.encodeError(.internalError, "the server could not handle this frame; send it again", requestId: entry.requestId)
                try? await GatewayCommand(kind: .deliver, connId: entry.connId, frame: frame).publish(to: entry.gateway, on: redis)
            }
        }
        if !dropped.isEmpty {
            try await redis.send(RedisCommand("XACK", [RouterStream.key, RouterStream.group] + dropped))
        }
        return kept
    }

    static let maxDeliveries: Int64 = 10

    /// Handles a batch: one sender's entries in order, different senders at once; then
    /// acknowledges every entry that was handled (refusals included).
    private func handle(_ entries: [(id: String, entry: RouterStream.Entry?)], redelivery: Bool) async {
        var bySender: [String: [(String, RouterStream.Entry)]] = [:]
        var done: [String] = []
        for (id, entry) in entries {
            guard let entry else {
                logger.error("router_entry_malformed", metadata: ["entryId": "\(id)"])
                done.append(id)
                continue
            }
            bySender[entry.whisperId, default: []].append((id, entry))
        }
        let handled = await withTaskGroup(of: [String].self) { group in
            for (_, queue) in bySender {
                group.addTask {
                    var ok: [String] = []
                    for (id, entry) in queue {
                        do {
                            let start = ContinuousClock.now
                            router.metrics.pickedUp(afterMs: Clock.millisecondsNow() - entry.receivedAt)
                            try await router.handle(entry, redelivery: redelivery)
                            router.metrics.handled(in: .now - start)
                            ok.append(id)
                        } catch {
                            logger.warning("router_entry_failed", metadata: ["entryId": "\(id)", "type": "\(entry.type.rawValue)", "error": "\(error)"])
                            break
                        }
                    }
                    return ok
                }
            }
            var all: [String] = []
            for await ids in group { all += ids }
            return all
        }
        done += handled
        guard !done.isEmpty else { return }
        do {
            try await redis.send(RedisCommand("XACK", [RouterStream.key, RouterStream.group] + done))
        } catch {
            // Unacknowledged entries are claimed and handled again; handling is idempotent.
            logger.warning("router_ack_failed", metadata: ["count": "\(done.count)", "error": "\(error)"])
        }
    }

    static func entries(ofReadReply reply: RESPValue) -> [(id: String, entry: RouterStream.Entry?)] {
        guard let streams = reply.array else { return [] }
        return streams.flatMap { stream -> [(id: String, entry: RouterStream.Entry?)] in
            guard let parts = stream.array, parts.count == 2 else { return [] }
            return entries(parts[1])
        }
    }

    static func entries(_ list: RESPValue) -> [(id: String, entry: RouterStream.Entry?)] {
        (list.array ?? []).compactMap { item in
            guard let parts = item.array, parts.count == 2, let id = parts[0].string else { return nil }
            // A claimed entry that was deleted meanwhile comes back with no fields.
            guard let fields = parts[1].array else { return (id, nil) }
            return (id, RouterStream.Entry(fields: fields))
        }
    }
}
