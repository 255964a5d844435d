import Logging
import NIOCore
import NIOPosix
import Synchronization

/// Commands to a Redis Cluster: the slot map from `CLUSTER SLOTS`, one pipelined
/// connection per master, each command to its slot's master with replies back in order,
/// `MOVED` and `ASK` followed, and `TRYAGAIN`, `CLUSTERDOWN` or a lost connection retried
/// on a fresh map for a bounded time.
public final class RedisCluster: Sendable {
    public struct Endpoint: Hashable, Sendable, CustomStringConvertible {
        public var host: String
        public var port: Int

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        /// `host:port` (the last colon splits, so an IPv6 address may come bare).
        public init?(_ text: some StringProtocol) {
            guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (1...65535).contains(port) else {
                return nil
            }
            let host = text[..<colon]
            guard !host.isEmpty else { return nil }
            self.init(host: String(host.hasPrefix("[") && host.hasSuffix("]") ? host.dropFirst().dropLast() : host), port: port)
        }

        public var description: String { "\(host):\(port)" }
    }

    /// Which master serves each slot.
    private struct SlotMap {
        /// The master of each slot (an index into `masters`), or -1 while unknown.
        var owners = [Int16](repeating: -1, count: RedisClusterSlots.count)
        var masters: [Endpoint] = []

        func master(ofSlot slot: Int) -> Endpoint? {
            guard (0..<owners.count).contains(slot) else { return nil }
            let owner = Int(owners[slot])
            return owner >= 0 && owner < masters.count ? masters[owner] : nil
        }

        mutating func assign(_ slots: ClosedRange<Int>, to endpoint: Endpoint) {
            let index: Int
            if let known = masters.firstIndex(of: endpoint) {
                index = known
            } else {
                index = masters.count
                masters.append(endpoint)
            }
            for slot in slots { owners[slot] = Int16(index) }
        }
    }

    private struct State {
        var map = SlotMap()
        var connections: [Endpoint: RedisConnection] = [:]
        var closed = false
    }

    public let seeds: [Endpoint]
    let configuration: RedisConfiguration
    private let eventLoopGroup: any EventLoopGroup
    private let logger: Logger
    private let state = Mutex(State())
    /// Redirects and retries one command may take before its error is returned, unless
    /// ``failoverBudget`` is not spent yet.
    static let maxRedirects = 5
    /// How long a command keeps being retried while its node is gone or the cluster is
    /// down (a failover takes the node timeout and an election): a sender then waits
    /// through a failover instead of being refused and backing off.
    static let failoverBudget: Duration = .seconds(5)

    public init(seeds: [Endpoint], configuration: RedisConfiguration, eventLoopGroup: any EventLoopGroup, logger: Logger) {
        self.seeds = seeds
        self.configuration = configuration
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
    }

    /// The masters as the map knows them now.
    public var masters: [Endpoint] { state.withLock { $0.map.masters } }

    /// The master serving `slot`, when known.
    public func master(ofSlot slot: Int) -> Endpoint? {
        state.withLock { $0.map.master(ofSlot: slot) }
    }

    /// Reads the slot map from the first node that answers (known masters first, then
    /// the seeds).
    public func refresh() async throws {
        var lastError: any Error = RedisError.unavailable
        for endpoint in masters + seeds {
            do {
                let reply = try await connection(to: endpoint).send(RedisCommand("CLUSTER", "SLOTS"))
                try apply(slots: reply)
                return
            } catch {
                lastError = error
                drop(endpoint)
            }
        }
        throw lastError
    }

    /// Takes a `CLUSTER SLOTS` reply: [[start, end, [host, port, id], replicas...], ...].
    func apply(slots reply: RESPValue) throws {
        guard case .array(let ranges) = reply else { throw RedisError.unexpectedReply("cluster slots") }
        var map = SlotMap()
        for range in ranges {
            guard case .array(let parts) = range, parts.count >= 3, let start = parts[0].int, let end = parts[1].int,
                  0 <= start, start <= end, end < RedisClusterSlots.count,
                  case .array(let node) = parts[2], node.count >= 2, let host = node[0].string, let port = node[1].int else {
                throw RedisError.unexpectedReply("cluster slots range")
            }
            // A node that names no address of its own is the one that answered.
            map.assign(Int(start)...Int(end), to: Endpoint(host: host.isEmpty || host == "?" ? configuration.host : host, port: Int(port)))
        }
        state.withLock { $0.map = map }
    }

    /// The connection to `endpoint`, opened when there is none (with the configuration's
    /// authentication and TLS).
    func connection(to endpoint: Endpoint) async throws -> RedisConnection {
        if let open = state.withLock({ $0.connections[endpoint] }), open.isActive { return open }
        let connection = try await RedisConnection.connect(to: configuration.node(endpoint), eventLoopGroup: eventLoopGroup)
        let (kept, closed) = state.withLock { state -> (RedisConnection, Bool) in
            if let raced = state.connections[endpoint], raced.isActive { return (raced, state.closed) }
            state.connections[endpoint] = connection
            return (connection, state.closed)
        }
        if kept !== connection || closed { await connection.close() }
        if closed { throw RedisError.shutdown }
        return kept
    }

    private func drop(_ endpoint: Endpoint) {
        let gone = state.withLock { $0.connections.removeValue(forKey: endpoint) }
        if let gone { Task { await gone.close() } }
    }

    /// The node a command goes to: its key's master, or for a command without a key
    /// the first master.
    private func target(of command: RedisCommand) throws -> Endpoint {
        try node(for: command.routingKey)
    }

    /// The master of `key`'s slot as the map says now.
    func master(of key: [UInt8]) throws -> Endpoint { try node(for: key) }

    /// The master of `key`'s slot, or with no key the first master.
    private func node(for key: [UInt8]?) throws -> Endpoint {
        let endpoint = state.withLock { state -> Endpoint? in
            guard let key else { return state.map.masters.first }
            return state.map.master(ofSlot: RedisClusterSlots.slot(of: key))
        }
        guard let endpoint else { throw RedisError.unavailable }
        return endpoint
    }

    /// Sends one command; an error reply is thrown as `RedisError.server`.
    public func send(_ command: RedisCommand) async throws -> RESPValue {
        let reply = try await pipeline([command])[0]
        if case .error(let message) = reply { throw RedisError.server(message) }
        return reply
    }

    /// Sends `command` to the node serving `key`'s slot (with no key, the first master,
    /// where a keyless command goes), whatever the command names (`SCRIPT LOAD` for the
    /// node a script will run on).
    public func send(_ command: RedisCommand, toNodeOf key: [UInt8]?) async throws -> RESPValue {
        let reply = try await connection(to: node(for: key)).pipeline([command])[0]
        if case .error(let message) = reply { throw RedisError.server(message) }
        return reply
    }

    /// Sends commands, each to its node (one write per node, the nodes at once), and
    /// returns the replies in the commands' order, error replies in place. Redirects are
    /// followed as the specification says.
    public func pipeline(_ commands: [RedisCommand]) async throws -> [RESPValue] {
        guard !commands.isEmpty else { return [] }
        let commands = commands.map(Self.sharded)
        if masters.isEmpty { try await refresh() }
        var replies = [RESPValue?](repeating: nil, count: commands.count)
        // What is still to send: the command's index, and the node an ASK named.
        var waiting: [(index: Int, asking: Endpoint?)] = commands.indices.map { ($0, nil) }
        let started = ContinuousClock.now
        var attempt = 0
        while true {
            var byNode: [Endpoint: [(index: Int, asking: Bool)]] = [:]
            for item in waiting {
                let node = try item.asking ?? target(of: commands[item.index])
                byNode[node, default: []].append((item.index, item.asking != nil))
            }
            var again: [(index: Int, asking: Endpoint?)] = []
            var refreshMap = false
            let results = await withTaskGroup(of: (Endpoint, [(index: Int, asking: Bool)], Result<[RESPValue], any Error>).self) { group in
                for (node, items) in byNode {
                    group.addTask {
                        var batch: [RedisCommand] = []
                        for item in items {
                            if item.asking { batch.append(RedisCommand("ASKING")) }
                            batch.append(commands[item.index])
                        }
                        do {
                            return (node, items, .success(try await self.connection(to: node).pipeline(batch)))
                        } catch {
                            return (node, items, .failure(error))
                        }
                    }
                }
                var all: [(Endpoint, [(index: Int, asking: Bool)], Result<[RESPValue], any Error>)] = []
                for await result in group { all.append(result) }
                return all
            }
            for (node, items, result) in results {
                guard case .success(let batch) = result else {
                    // The node is gone (a failover?): a new map, and these go again.
                    drop(node)
                    refreshMap = true
                    again += items.map { ($0.index, nil) }
                    continue
                }
                var position = 0
                for item in items {
                    if item.asking { position += 1 }
                    guard position < batch.count else { break }
                    let reply = batch[position]
                    position += 1
                    switch Redirect(reply) {
                    case .moved(let slot, let endpoint)?:
                        learn(slot: slot, master: endpoint)
                        refreshMap = true
                        again.append((item.index, nil))
                    case .ask(let endpoint)?:
                        again.append((item.index, endpoint))
                    case .retry?:
                        refreshMap = true
                        again.append((item.index, nil))
                    case nil:
                        replies[item.index] = reply
                    }
                }
            }
            guard !again.isEmpty, attempt < Self.maxRedirects || ContinuousClock.now - started < Self.failoverBudget else {
                if !again.isEmpty {
                    logger.warning("redis_cluster_redirects_exhausted", metadata: ["commands": "\(again.count)"])
                }
                break
            }
            if refreshMap {
                try? await refresh()
                if attempt > 0 { try? await Task.sleep(for: .milliseconds(min(50 * (attempt + 1), 500))) }
            }
            waiting = again
            attempt += 1
        }
        return try replies.map { reply in
            guard let reply else { throw RedisError.unavailable }
            return reply
        }
    }

    /// `RedisConnection.dispatch` for the cluster: commands that all go to one node whose
    /// connection is open are written now, in call order (what a gateway publishes for
    /// one socket keeps its order); anything else goes through `pipeline`, redirects
    /// followed, and completes when it has.
    public func dispatch(_ commands: [RedisCommand]) -> EventLoopFuture<[RESPValue]> {
        let commands = commands.map(Self.sharded)
        let targets = commands.map { try? target(of: $0) }
        if let node = targets.first ?? nil, targets.allSatisfy({ $0 == node }),
           let open = state.withLock({ $0.connections[node] }), open.isActive {
            return open.dispatch(commands)
        }
        let promise = eventLoopGroup.any().makePromise(of: [RESPValue].self)
        promise.completeWithTask { try await self.pipeline(commands) }
        return promise.futureResult
    }

    /// In a cluster every `PUBLISH` goes out as `SPUBLISH`, to the master of the channel's
    /// slot, where `RedisSubscriber` listens with `SSUBSCRIBE`: a message crosses one
    /// node instead of being broadcast to all of them.
    static func sharded(_ command: RedisCommand) -> RedisCommand {
        guard command.name.uppercased() == "PUBLISH" else { return command }
        return RedisCommand("SPUBLISH", Array(command.arguments.dropFirst()))
    }

    /// Records one slot's new master (from `MOVED`) until the next full map.
    private func learn(slot: Int, master endpoint: Endpoint) {
        guard (0..<RedisClusterSlots.count).contains(slot) else { return }
        state.withLock { $0.map.assign(slot...slot, to: endpoint) }
    }

    /// Closes every connection; later commands fail with `RedisError.shutdown`.
    public func close() async {
        let open = state.withLock { state -> [RedisConnection] in
            state.closed = true
            defer { state.connections.removeAll() }
            return Array(state.connections.values)
        }
        for connection in open { await connection.close() }
    }
}

/// A cluster's answer that the command belongs elsewhere, or should wait.
enum Redirect: Equatable {
    /// The slot has a new master for good.
    case moved(slot: Int, RedisCluster.Endpoint)
    /// The slot is being moved: this one command goes to that node, after `ASKING`.
    case ask(RedisCluster.Endpoint)
    /// `TRYAGAIN` (keys of a slot being moved), `CLUSTERDOWN` (a failover in progress).
    case retry

    init?(_ reply: RESPValue) {
        guard case .error(let message) = reply else { return nil }
        let parts = message.split(separator: " ")
        switch parts.first {
        case "MOVED"?, "ASK"?:
            guard parts.count == 3, let slot = Int(parts[1]), let endpoint = RedisCluster.Endpoint(parts[2]) else { return nil }
            self = parts[0] == "MOVED" ? .moved(slot: slot, endpoint) : .ask(endpoint)
        case "TRYAGAIN"?, "CLUSTERDOWN"?:
            self = .retry
        default:
            return nil
        }
    }
}
