import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization

/// The Redis client every service uses: one pipelined connection, reopened with backoff, so
/// a Redis restart needs no service restart; while it is down commands fail at once
/// (`RedisError.unavailable`). With `clusterSeeds` it speaks to a Redis Cluster
/// (`RedisCluster`). Run it in the service's group before anything that uses it.
public final class RedisClient: Service, Sendable {
    private enum State {
        case idle
        case connected(RedisConnection)
        case disconnected
        case shutdown
    }

    public let configuration: RedisConfiguration
    private let eventLoopGroup: any EventLoopGroup
    private let logger: Logger
    private let state = Mutex<State>(.idle)
    private let scripts = Mutex<Set<String>>([])
    /// What this client went through, for `/metrics` (`whisper_redis_*`).
    public let statistics = RedisClientStatistics()
    /// In cluster mode, the cluster's nodes.
    let cluster: RedisCluster?
    private let clusterReady = Atomic<Bool>(false)
    private let replicaWaits = ReplicaWaits()
    static let clusterRefreshInterval: Duration = .seconds(10)

    public init(
        configuration: RedisConfiguration,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger
    ) {
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
        cluster = configuration.clusterSeeds.isEmpty
            ? nil : RedisCluster(seeds: configuration.clusterSeeds, configuration: configuration, eventLoopGroup: eventLoopGroup, logger: logger)
    }

    /// True while a connection is open (in cluster mode: while the slot map is known).
    public var isConnected: Bool {
        if cluster != nil { return clusterReady.load(ordering: .relaxed) }
        return state.withLock { if case .connected(let c) = $0 { c.isActive } else { false } }
    }

    public func run() async throws {
        if let cluster {
            try await runCluster(cluster)
            return
        }
        try await cancelWhenGracefulShutdown {
            var backoff = Backoff(policy: self.configuration.reconnectBackoff)
            while !Task.isCancelled {
                do {
                    let connection = try await RedisConnection.connect(to: self.configuration, eventLoopGroup: self.eventLoopGroup)
                    let accepted = self.state.withLock { state -> Bool in
                        if case .shutdown = state { return false }
                        state = .connected(connection)
                        return true
                    }
                    guard accepted else {
                        await connection.close()
                        return
                    }
                    self.statistics.connects.add(1, ordering: .relaxed)
                    if backoff.attempt > 0 {
                        self.logger.info("redis_reconnected", metadata: ["attempts": "\(backoff.attempt)"])
                    } else {
                        self.logger.debug("redis_connected")
                    }
                    backoff.reset()
                    await withTaskCancellationHandler {
                        try? await connection.channel.closeFuture.get()
                    } onCancel: {
                        connection.channel.close(promise: nil)
                    }
                    self.state.withLock { state in
                        if case .connected = state { state = .disconnected }
                    }
                    // A Redis that restarted knows no scripts: each is taught again with its
                    // first call, in the same write (so `written` holds after a restart).
                    self.scripts.withLock { $0.removeAll() }
                    if !Task.isCancelled {
                        self.statistics.losses.add(1, ordering: .relaxed)
                        self.logger.warning("redis_connection_lost")
                    }
                } catch {
                    self.statistics.failedConnects.add(1, ordering: .relaxed)
                    self.state.withLock { state in
                        if case .idle = state { state = .disconnected }
                    }
                    let delay = backoff.next()
                    self.logger.warning(
                        "redis_connect_failed",
                        metadata: ["error": "\(error)", "retryInMs": "\(Int(delay.milliseconds))"]
                    )
                    try? await Task.sleep(for: delay)
                }
            }
        }
        let last = state.withLock { state -> RedisConnection? in
            defer { state = .shutdown }
            if case .connected(let connection) = state { return connection }
            return nil
        }
        await last?.close()
    }

    /// Learns the cluster's slot map (with backoff until a node answers) and reads it
    /// again now and then, until the service stops.
    private func runCluster(_ cluster: RedisCluster) async throws {
        await cancelWhenGracefulShutdown {
            var backoff = Backoff(policy: self.configuration.reconnectBackoff)
            while !Task.isCancelled {
                do {
                    try await cluster.refresh()
                    if !self.clusterReady.exchange(true, ordering: .relaxed) {
                        self.statistics.connects.add(1, ordering: .relaxed)
                        self.logger.info("redis_cluster_mapped", metadata: ["masters": "\(cluster.masters.count)"])
                    }
                    backoff.reset()
                    try? await Task.sleep(for: Self.clusterRefreshInterval)
                } catch {
                    if self.clusterReady.exchange(false, ordering: .relaxed) { self.statistics.losses.add(1, ordering: .relaxed) }
                    self.statistics.failedConnects.add(1, ordering: .relaxed)
                    let delay = backoff.next()
                    self.logger.warning("redis_cluster_unreachable", metadata: ["error": "\(error)", "retryInMs": "\(Int(delay.milliseconds))"])
                    try? await Task.sleep(for: delay)
                }
            }
        }
        clusterReady.store(false, ordering: .relaxed)
        await cluster.close()
    }

    /// The cluster, once its map is known.
    private func mappedCluster() throws -> RedisCluster? {
        guard let cluster else { return nil }
        guard clusterReady.load(ordering: .relaxed) else {
            statistics.refused.add(1, ordering: .relaxed)
            throw RedisError.unavailable
        }
        return cluster
    }

    private func connection() throws -> RedisConnection {
        do {
            return try state.withLock { state in
                switch state {
                case .connected(let connection) where connection.isActive: return connection
                case .shutdown: throw RedisError.shutdown
                default: throw RedisError.unavailable
                }
            }
        } catch {
            statistics.refused.add(1, ordering: .relaxed)
            throw error
        }
    }

    /// Sends one command; an error reply is thrown as `RedisError.server`.
    @discardableResult
    public func send(_ command: RedisCommand) async throws -> RESPValue {
        if let cluster = try mappedCluster() { return try await cluster.send(command) }
        return try await connection().send(command)
    }

    @discardableResult
    public func send(_ name: String, _ arguments: any RedisArgument...) async throws -> RESPValue {
        try await send(RedisCommand(name, arguments))
    }

    /// Sends several commands in one write (in cluster mode, one write per node);
    /// error replies are returned in place.
    public func pipeline(_ commands: [RedisCommand]) async throws -> [RESPValue] {
        if let cluster = try mappedCluster() { return try await cluster.pipeline(commands) }
        return try await connection().pipeline(commands)
    }

    /// Writes commands now (after everything sent before on this client, before anything
    /// sent later: one connection keeps the order) and returns their replies when they
    /// come, for a caller that must not wait for them.
    public func dispatch(_ commands: [RedisCommand]) throws -> EventLoopFuture<[RESPValue]> {
        if let cluster = try mappedCluster() { return cluster.dispatch(commands) }
        return try connection().dispatch(commands)
    }

    /// Whether this client has seen Redis run `script` (so an `EVALSHA` of it sent in a
    /// pipeline is likely to be understood; after a Redis restart it may still answer
    /// `NOSCRIPT`).
    public func knows(_ script: RedisScript) -> Bool {
        scripts.withLock { $0.contains(script.sha1) }
    }

    /// Runs a Lua script by its SHA1 (EVALSHA), loading it first when Redis does not
    /// know it yet (after a restart, for example).
    @discardableResult
    public func evaluate(_ script: RedisScript, keys: [String], arguments: [any RedisArgument] = []) async throws -> RESPValue {
        try await evaluate(script, keys: keys, arguments: arguments, alongside: []).script
    }

    /// Runs a script and, in the same write, other commands (reads: they may be sent
    /// twice when the server has to be taught the script first). Returns the script's
    /// reply (an error reply thrown) and the others' replies as they came. `written` is
    /// called once the script's call is written, when that happened before any wait (one
    /// connection, the script known): what this client writes next goes behind it.
    /// `mayWait`: how long that write may wait for others to share it (one connection,
    /// the script known: `RedisConnection.pipeline`).
    public func evaluate(
        _ script: RedisScript, keys: [String], arguments: [any RedisArgument], alongside others: [RedisCommand],
        written: (@Sendable () -> Void)? = nil, mayWait: Duration = .zero
    ) async throws -> (script: RESPValue, others: [RESPValue]) {
        try await evaluate(script, keys: keys, lateArguments: { arguments }, alongside: others, written: written, mayWait: mayWait)
    }

    /// As `evaluate(_:keys:arguments:alongside:written:mayWait:)`, with the script's
    /// arguments given by `lateArguments` as late as the write allows: when the write
    /// waits for others (`mayWait`, one connection, the script known) only as it leaves
    /// for Redis, else at once. It may be called again (to teach Redis the script) and
    /// must then give the same.
    public func evaluate(
        _ script: RedisScript, keys: [String], lateArguments: @escaping @Sendable () -> [any RedisArgument], alongside others: [RedisCommand],
        written: (@Sendable () -> Void)? = nil, mayWait: Duration = .zero
    ) async throws -> (script: RESPValue, others: [RESPValue]) {
        if let cluster = try mappedCluster() {
            return try await evaluate(script, keys: keys, arguments: lateArguments(), alongside: others, on: cluster)
        }
        let connection = try connection()
        let known = scripts.withLock { $0.contains(script.sha1) }
        if known {
            let replies = try await connection.pipeline(
                late: { script.evalsha(keys: keys, arguments: lateArguments()) }, then: others, written: written, mayWait: mayWait
            )
            switch replies[0] {
            case .error(let message) where message.hasPrefix("NOSCRIPT"):
                break
            case .error(let message):
                throw RedisError.server(message)
            default:
                return (replies[0], Array(replies.dropFirst()))
            }
        }
        let evalsha = script.evalsha(keys: keys, arguments: lateArguments())
        let replies = try await connection.pipeline([RedisCommand("SCRIPT", "LOAD", script.source), evalsha] + others)
        if case .error(let message) = replies[0] { throw RedisError.server(message) }
        scripts.withLock { _ = $0.insert(script.sha1) }
        if case .error(let message) = replies[1] { throw RedisError.server(message) }
        return (replies[1], Array(replies.dropFirst(2)))
    }
}

extension RedisClient {
    /// Returns once `configuration.replicaAcks.replicas` replicas of the master holding
    /// `key` have every write this client sent that master so far (the caller's write to
    /// `key` among them), as `WAIT` reports; at once when no replica is required. Callers
    /// share `WAIT`s (`ReplicaWaits`). When fewer acknowledge within the timeout the
    /// write stands on the master alone: with ``ReplicaAcknowledgement/Shortfall/refuse``
    /// this throws `RedisError.replicasBehind`; with `accept` it returns, the master
    /// counts as unreplicated, and its writes return at once. Once a probe interval, one
    /// of them asks the master for its replicas (`ROLE`, which does not block the
    /// connection as a `WAIT` would); when enough are listed, writes wait again.
    public func waitForReplicas(afterWritingTo key: String) async throws {
        let acks = configuration.replicaAcks
        guard acks.replicas > 0 else { return }
        let wait = RedisCommand("WAIT", acks.replicas, Int(acks.timeout.milliseconds))
        let node: String
        let ask: @Sendable (RedisCommand) async throws -> RESPValue
        if let cluster = try mappedCluster() {
            let master = try cluster.master(of: Array(key.utf8))
            node = "\(master)"
            ask = { try await cluster.connection(to: master).send($0) }
        } else {
            let connection = try connection()
            node = "\(configuration.host):\(configuration.port)"
            ask = { try await connection.send($0) }
        }
        if acks.shortfall == .accept {
            switch statistics.masters.standing(node, probeAfter: acks.probeInterval) {
            case .replicated:
                break
            case .unreplicated:
                statistics.unreplicatedWrites.add(1, ordering: .relaxed)
                return
            case .probe:
                // `ROLE` on a master: ["master", offset, [[ip, port, offset], ...]].
                let listed = (try? await ask(RedisCommand("ROLE")))?.array.flatMap { $0.count == 3 ? $0[2].array?.count : nil } ?? 0
                guard listed >= acks.replicas else {
                    statistics.unreplicatedWrites.add(1, ordering: .relaxed)
                    return
                }
            }
        }
        let send: @Sendable () async throws -> Int = { Int(try await ask(wait).int ?? 0) }
        statistics.replicaWaits.add(1, ordering: .relaxed)
        let acknowledged = try await replicaWaits.acknowledged(on: node, send: send)
        guard acknowledged >= acks.replicas else {
            statistics.replicaShortfalls.add(1, ordering: .relaxed)
            if statistics.masters.record(node, replicated: false) {
                logger.error("redis_master_unreplicated", metadata: [
                    "node": "\(node)", "acknowledged": "\(acknowledged)", "required": "\(acks.replicas)", "shortfall": "\(acks.shortfall.rawValue)",
                ])
            }
            switch acks.shortfall {
            case .refuse: throw RedisError.replicasBehind(acknowledged: acknowledged, required: acks.replicas)
            case .accept: statistics.unreplicatedWrites.add(1, ordering: .relaxed)
            }
            return
        }
        if statistics.masters.record(node, replicated: true) {
            logger.notice("redis_master_replicated", metadata: ["node": "\(node)"])
        }
    }

    /// Walks the key space with `SCAN` (every master of a cluster in turn), handing each
    /// non-empty page of keys matching `pattern` (and of `type`, when given) to `body`.
    public func scan(
        matching pattern: String, type: String? = nil, batch: Int = 1_000, _ body: ([String]) async throws -> Void
    ) async throws {
        let nodes: [(RedisCommand) async throws -> RESPValue]
        if let cluster = try mappedCluster() {
            nodes = cluster.masters.map { master in { command in try await cluster.connection(to: master).send(command) } }
        } else {
            nodes = [{ command in try await self.connection().send(command) }]
        }
        for send in nodes {
            var cursor = "0"
            repeat {
                var command = RedisCommand("SCAN", cursor, "MATCH", pattern)
                if let type { command.append(contentsOf: ["TYPE", type]) }
                command.append(contentsOf: ["COUNT", batch])
                let reply = try await send(command).array ?? []
                guard reply.count == 2, let next = reply[0].string else { throw RedisError.server("SCAN answered unexpectedly") }
                cursor = next
                let keys = (reply[1].array ?? []).compactMap(\.string)
                if !keys.isEmpty { try await body(keys) }
            } while cursor != "0"
        }
    }

    /// `evaluate` on a cluster: the script runs on its first key's master (the others go
    /// to theirs), and a node that does not know the script yet is taught it there.
    private func evaluate(
        _ script: RedisScript, keys: [String], arguments: [any RedisArgument], alongside others: [RedisCommand], on cluster: RedisCluster
    ) async throws -> (script: RESPValue, others: [RESPValue]) {
        let evalsha = script.evalsha(keys: keys, arguments: arguments)
        var replies = try await cluster.pipeline([evalsha] + others)
        if case .error(let message) = replies[0], message.hasPrefix("NOSCRIPT") {
            _ = try await cluster.send(RedisCommand("SCRIPT", "LOAD", script.source), toNodeOf: keys.first.map { Array($0.utf8) })
            replies[0] = try await cluster.pipeline([evalsha])[0]
        }
        if case .error(let message) = replies[0] { throw RedisError.server(message) }
        scripts.withLock { _ = $0.insert(script.sha1) }
        return (replies[0], Array(replies.dropFirst()))
    }
}

/// Counts of one `RedisClient`'s life, read when `/metrics` is scraped.
public final class RedisClientStatistics: Sendable {
    /// Connections opened (the first one included).
    public let connects = Atomic<Int>(0)
    /// Attempts to connect that failed.
    public let failedConnects = Atomic<Int>(0)
    /// Open connections that dropped.
    public let losses = Atomic<Int>(0)
    /// Commands failed at once because no connection was open.
    public let refused = Atomic<Int>(0)
    /// Writes that waited for replicas (`waitForReplicas`).
    public let replicaWaits = Atomic<Int>(0)
    /// Of those, the ones fewer replicas than required acknowledged in time.
    public let replicaShortfalls = Atomic<Int>(0)
    /// Writes told they are stored while their master had no replica in step (a
    /// shortfall accepted, or written while it counted as unreplicated).
    public let unreplicatedWrites = Atomic<Int>(0)
    /// Which masters this client last found without a replica in step.
    public let masters = MasterReplication()
}

/// The masters a client waited on, and which of them it last found without a replica in
/// step. An in-process memory of the cluster's replication, as stale as one probe
/// interval: a master whose replica is back is trusted again at the next probe, and
/// until then its writes are told stored on the master's fsync, which is what a
/// shortfall accepts anyway.
public final class MasterReplication: Sendable {
    /// By node (`host:port`): nil while replicated, else when it was last found short.
    private let nodes = Mutex<[String: ContinuousClock.Instant?]>([:])

    enum Standing {
        case replicated
        case unreplicated
        /// Unreplicated, and this caller is the one to ask again (once a `probeAfter`).
        case probe
    }

    /// Whether `node` counts as unreplicated; past `probeAfter` since it was last found
    /// so, the first caller is told to probe (and the clock starts again).
    func standing(_ node: String, probeAfter: Duration) -> Standing {
        nodes.withLock { nodes in
            guard case .some(.some(let since)) = nodes[node] else { return .replicated }
            let now = ContinuousClock.now
            guard now - since >= probeAfter else { return .unreplicated }
            nodes[node] = .some(now)
            return .probe
        }
    }

    /// Records what a `WAIT` on `node` found; true when that changed what was known.
    func record(_ node: String, replicated: Bool) -> Bool {
        nodes.withLock { nodes in
            // Whether it counted as replicated before; nil: never waited on.
            let wasReplicated = nodes[node].map { $0 == nil }
            nodes[node] = replicated ? .some(nil) : .some(ContinuousClock.now)
            // A master first met replicated is no news; first met short, it is.
            return replicated ? wasReplicated == false : wasReplicated != false
        }
    }

    /// Every master waited on, and whether it counts as unreplicated now.
    public var snapshot: [(node: String, unreplicated: Bool)] {
        nodes.withLock { nodes in nodes.map { ($0.key, $0.value != nil) }.sorted { $0.node < $1.node } }
    }
}
