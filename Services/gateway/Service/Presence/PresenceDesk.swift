import Prometheus
import WhisperShared

/// Presence (docs/protocol.md section 8): a socket watches direct peers and is told when
/// one comes online or goes offline, nothing else. Subscriptions live in the watched
/// identity's slot (`watchers:{W}`), so whichever gateway sees W change finds the sockets
/// to tell in one script; only direct peers are recorded, so strangers learn nothing.
struct PresenceDesk: Sendable {
    /// A subscription lasts as long as the socket that made it, and at most this long.
    static let lifetime: Duration = .seconds(86_400)
    /// Sockets that may watch one identity at once; past it new subscriptions are not
    /// recorded (the snapshot is still answered) until old ones end.
    static let watchersMax = 1_000

    let redis: RedisClient
    let instanceID: String
    /// Presence events one identity's comings and goings may cause (each tells all its watchers).
    let eventsPerIdentity: RateLimitRule
    private let sent: Counter
    private let limited: Counter

    init(redis: RedisClient, instanceID: String, eventsPerIdentity: RateLimitRule, metrics: ServiceMetrics) {
        self.redis = redis
        self.instanceID = instanceID
        self.eventsPerIdentity = eventsPerIdentity
        let help = "presence changes by outcome: sent (to every watcher) or limited (over the identity's limit, not sent)."
        sent = metrics.counter("gateway_presence_events", help: help, labels: [("outcome", "sent")])
        limited = metrics.counter("gateway_presence_events", help: help, labels: [("outcome", "limited")])
    }

    /// Replaces the socket's subscriptions with the direct peers among `whisperIds` and
    /// returns their presence now.
    func subscribe(_ whisperIds: [String], watcher: String, on connection: ClientConnection) async throws -> PresenceSnapshot {
        var seen: Set<String> = [watcher]
        let targets = whisperIds.filter { seen.insert($0).inserted }
        let relations = try await Peers.exchanged(watcher, with: targets, on: redis)
        let peers = zip(targets, relations).filter(\.1).map(\.0)

        let now = Clock.millisecondsNow()
        let value = "\(now &+ Int64(Self.lifetime.milliseconds)) " + PresenceRecord(gateway: instanceID, connId: connection.id).encoded
        let previous = connection.replaceWatched(with: peers)
        let dropped = previous.filter { !peers.contains($0) }
        let statuses = try await withThrowingTaskGroup(of: (String, Bool).self) { group in
            for peer in peers {
                group.addTask {
                    let reply = try await redis.evaluate(
                        Self.watchScript, keys: [RedisKeys.watchers(peer), RedisKeys.presence(peer)],
                        arguments: [watcher, value, now, Self.watchersMax, Int(Self.lifetime.milliseconds)]
                    )
                    return (peer, (reply.array?.last?.int ?? 0) > 0)
                }
            }
            for peer in dropped {
                group.addTask {
                    try await redis.evaluate(Self.unwatchScript, keys: [RedisKeys.watchers(peer)], arguments: [watcher, " \(connection.id)"])
                    return ("", false)
                }
            }
            var statuses: [String: Bool] = [:]
            for try await (peer, online) in group where !peer.isEmpty { statuses[peer] = online }
            return statuses
        }
        return PresenceSnapshot(peers: peers.map { PresenceSnapshot.Peer(whisperId: $0, status: statuses[$0] == true ? .online : .offline) })
    }

    /// Ends the socket's subscriptions (it closed).
    func unsubscribeAll(_ watcher: String, on connection: ClientConnection) async {
        let watched = connection.replaceWatched(with: [])
        guard !watched.isEmpty else { return }
        await withTaskGroup(of: Void.self) { group in
            for peer in watched {
                group.addTask {
                    _ = try? await redis.evaluate(Self.unwatchScript, keys: [RedisKeys.watchers(peer)], arguments: [watcher, " \(connection.id)"])
                }
            }
        }
    }

    /// Tells the sockets watching `whisperId` that it came online or went offline,
    /// unless its bucket of presence events is empty (then nobody is told; the next
    /// change that gets through, or a new subscription's snapshot, says how it is).
    func announce(_ whisperId: String, _ status: PresenceStatus) async throws {
        let now = Clock.millisecondsNow()
        let reply = try await redis.evaluate(
            Self.announceScript, keys: [RedisKeys.watchers(whisperId), RedisKeys.rateLimit(whisperId, Limit.presenceEventsPerIdentity.bucket)],
            arguments: RateLimiter.arguments(eventsPerIdentity) + [now]
        )
        guard let parts = reply.array, let outcome = parts.first?.int else { throw RedisError.unexpectedReply("presence announce") }
        guard outcome == 1 else {
            if outcome == 0 { limited.increment() }
            return
        }
        let sockets = parts.dropFirst().compactMap { $0.string.flatMap(PresenceRecord.init(encoded:)) }
        guard !sockets.isEmpty else { return }
        try await SocketFanOut.deliver(ServerFrameCodec.encode(PresenceUpdate(whisperId: whisperId, status: status, timestamp: now)), to: sockets, on: redis)
        sent.increment()
    }

    /// `presence-watch.lua` (its header says what it takes and answers).
    static let watchScript = RedisScript(LuaSource.presenceWatch)

    /// `presence-unwatch.lua` (its header says what it takes and answers).
    static let unwatchScript = RedisScript(LuaSource.presenceUnwatch)

    /// `presence-announce.lua` (its header says what it takes and answers).
    static let announceScript = RedisScript(RateLimiter.bucketLua + LuaSource.presenceAnnounce)
}
