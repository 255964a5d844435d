import NIOCore
import Logging
import Synchronization
import ServiceLifecycle
import WhisperMessaging
import WhisperShared

/// Reads one shard of the router stream as a consumer of the group `routers`, hands
/// entries to the `MessageRouter` in per-sender lanes, acknowledges what it handled, and
/// claims entries another router left for `claimAfter`. One slow entry delays only its
/// sender's (docs/architecture.md, "Through the router stream").
struct StreamConsumer: Service {
    /// The shard's key.
    let streamKey: String
    /// A connection of its own: XREADGROUP blocks, and must not hold up other commands.
    let reader: RedisClient
    let redis: RedisClient
    let router: MessageRouter
    let consumerName: String
    let settings: RouterSettings
    let logger: Logger

    /// Entries read but not yet handled, at most.
    var maxInFlight: Int { settings.batchSize * 4 }

    var stream: StreamGroupReader {
        StreamGroupReader(
            stream: streamKey, group: RouterStream.group, consumer: consumerName, reader: reader, redis: redis, logger: logger,
            events: "router"
        )
    }

    func run() async throws {
        let lanes = EntryLanes(limit: maxInFlight)
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask { await acknowledge(from: lanes) }
                await read(into: lanes, starting: { sender in
                    group.addTask { await drain(sender, in: lanes) }
                })
                group.cancelAll()
            }
            // What finished while stopping is acknowledged, not handled again elsewhere.
            let rest = lanes.takeFinished()
            if !rest.isEmpty {
                try? await acknowledge(rest)
            }
        }
    }

    /// The read loop: new entries, and now and then entries a dead router left.
    private func read(into lanes: EntryLanes, starting startLane: (String) -> Void) async {
        let stream = self.stream
        var lastClaim = ContinuousClock.now
        /// Set after a read that did not fill its batch: when the next one may go out.
        var lingerUntil: ContinuousClock.Instant?
        await stream.loop {
            await lanes.waitForRoom()
            if let lingerUntil {
                try? await Clock.sleep(for: lingerUntil - .now)
            }
            let readStart = ContinuousClock.now
            let count = min(settings.batchSize, lanes.room)
            // What finished since the last read goes with it. (The acknowledging task
            // takes what a read blocked on an idle stream would hold back.)
            let entries = try await stream.read(count: count, blockMs: 1000, acknowledging: lanes.takeFinished())
            lingerUntil = settings.readLinger > .zero && entries.count < count ? readStart + settings.readLinger : nil
            submit(Self.parsed(entries), redelivery: false, to: lanes, starting: startLane)
            if ContinuousClock.now - lastClaim >= settings.claimAfter / 2 {
                try await claimAbandoned(into: lanes, starting: startLane)
                lastClaim = ContinuousClock.now
            }
        }
    }

    private func submit(
        _ entries: [(id: String, entry: RouterStream.Entry?)], redelivery: Bool, to lanes: EntryLanes, starting startLane: (String) -> Void
    ) {
        for (id, entry) in entries {
            guard let entry else {
                logger.error("router_entry_malformed", metadata: ["entryId": "\(id)"])
                lanes.finished(unreadable: id)
                continue
            }
            if lanes.add(EntryLanes.Item(id: id, entry: entry, redelivery: redelivery)) {
                startLane(entry.whisperId)
            }
        }
    }

    /// Handles one sender's entries in order until its lane is empty. After a failure
    /// (an outage) the rest of the lane is left unacknowledged, to be claimed again in
    /// order, rather than handled out of order now.
    private func drain(_ sender: String, in lanes: EntryLanes) async {
        while let item = lanes.next(for: sender) {
            do {
                let start = ContinuousClock.now
                router.metrics.pickedUp(afterMs: Clock.elapsedMilliseconds(since: item.entry.receivedAt))
                try await router.handle(item.entry, redelivery: item.redelivery)
                router.metrics.handled(in: .now - start)
                lanes.finished(item)
            } catch {
                logger.warning("router_entry_failed", metadata: [
                    "entryId": "\(item.id)", "type": "\(item.entry.type.rawValue)", "error": "\(error)",
                ])
                lanes.abandon(sender)
                return
            }
        }
    }

    /// Acknowledges handled entries (refusals included) that no read took along: each
    /// read carries what finished before it, so this task only acts when entries
    /// finished while the reader waits on an idle stream, `ackInterval` after the first
    /// of them. Nothing waits for an acknowledgement (the client was answered when the
    /// entry was handled); a router that dies before it leaves those entries to be
    /// claimed and handled again, which is idempotent.
    private func acknowledge(from lanes: EntryLanes) async {
        for await _ in lanes.acknowledgements {
            // Cancelled while waiting (shutting down): `run` acknowledges what is left.
            try? await Clock.sleep(for: settings.ackInterval)
            let ids = lanes.takeFinished()
            guard !ids.isEmpty else { continue }
            do {
                try await acknowledge(ids)
            } catch {
                // Unacknowledged entries are claimed and handled again; handling is idempotent.
                logger.warning("router_ack_failed", metadata: ["count": "\(ids.count)", "error": "\(error)"])
            }
        }
    }

    /// Acknowledges and deletes, in one write: a handled entry has nothing left to give
    /// (its message is stored for the recipient, its answer sent), so the stream keeps
    /// only what is not handled yet and no routed ciphertext stays in Redis. The cap of
    /// `RouterStream.maxLength` is then a bound on the backlog, not on history.
    private func acknowledge(_ ids: [String]) async throws {
        try await stream.acknowledge(ids)
    }

    /// Takes over entries idle longer than `claimAfter`, a page at a time.
    private func claimAbandoned(into lanes: EntryLanes, starting startLane: (String) -> Void) async throws {
        // An entry of ours still being handled is not abandoned.
        try await stream.claim(idle: settings.claimAfter, count: settings.batchSize, isOurs: lanes.isHandling) { claimed in
            logger.info("router_claimed_entries", metadata: ["count": "\(claimed.count)"])
            submit(try await dropPoisoned(Self.parsed(claimed)), redelivery: true, to: lanes, starting: startLane)
            return true
        }
    }

    /// An entry that failed `maxDeliveries` times will not succeed by trying again (its
    /// failure is not an outage): its client gets INTERNAL_ERROR, the entry is logged
    /// and acknowledged. A resend by the client starts afresh.
    private func dropPoisoned(_ entries: [(id: String, entry: RouterStream.Entry?)]) async throws -> [(id: String, entry: RouterStream.Entry?)] {
        guard let first = entries.first?.id, let last = entries.last?.id else { return entries }
        let reply = try await redis.send(RedisCommand("XPENDING", [streamKey, RouterStream.group, first, last, entries.count * 2]))
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
                _ = try? await GatewayCommand(kind: .deliver, connId: entry.connId, frame: frame).publish(to: entry.gateway, on: redis)
            }
        }
        if !dropped.isEmpty {
            try await acknowledge(dropped)
        }
        return kept
    }

    static let maxDeliveries: Int64 = 10

    /// Entries as the router handles them: nil for one that cannot be read (malformed,
    /// or deleted meanwhile).
    static func parsed(_ entries: [StreamGroupReader.Entry]) -> [(id: String, entry: RouterStream.Entry?)] {
        entries.map { ($0.id, $0.fields.flatMap(RouterStream.Entry.init(fields:))) }
    }
}

/// A routed entry in its sender's lane.
struct RoutedEntry: LaneItem {
    var id: String
    var entry: RouterStream.Entry
    var redelivery: Bool

    var lane: String { entry.whisperId }
}

/// The entries a router is handling: a lane per sender (`Lanes`).
typealias EntryLanes = Lanes<RoutedEntry>
