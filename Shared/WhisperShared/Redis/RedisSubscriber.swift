import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization

/// A message published on a channel this subscriber listens to.
public struct RedisPubSubMessage: Sendable {
    public var channel: String
    public var payload: [UInt8]
}

/// A pub/sub connection to a fixed set of channels that reconnects and subscribes again
/// with backoff. Under Redis Cluster it uses sharded pub/sub (`SSUBSCRIBE` on each slot's
/// master, following the slot when it moves). What is published while it is down is lost:
/// pub/sub carries only wake-ups and live fan-out, never anything not also stored.
public final class RedisSubscriber: Service, Sendable {
    public let channels: [String]
    /// Every message, in arrival order, for as long as the subscriber runs (unless an
    /// `onMessage` handler takes them).
    public let messages: AsyncStream<RedisPubSubMessage>
    /// Called with every message instead, on the connection's event loop, in arrival
    /// order: for a handler that does not wait for anything, this saves a task switch
    /// per message.
    private let onMessage: (@Sendable (RedisPubSubMessage) -> Void)?
    /// Called each time every channel is confirmed subscribed (at start and after each
    /// reconnect): what was published meanwhile is lost, so a cache kept fresh by these
    /// channels should start over here.
    private let onSubscribed: (@Sendable () -> Void)?

    private let continuation: AsyncStream<RedisPubSubMessage>.Continuation
    private let configuration: RedisConfiguration
    private let eventLoopGroup: any EventLoopGroup
    private let logger: Logger
    private let subscribed = Mutex<Int>(0)
    /// The connections of the current attempt, closed together when one is lost.
    private let current = Mutex<[any Channel]>([])

    public init(
        configuration: RedisConfiguration,
        channels: [String],
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger,
        onMessage: (@Sendable (RedisPubSubMessage) -> Void)? = nil,
        onSubscribed: (@Sendable () -> Void)? = nil
    ) {
        self.onMessage = onMessage
        self.onSubscribed = onSubscribed
        self.configuration = configuration
        self.channels = channels
        self.eventLoopGroup = eventLoopGroup
        self.logger = logger
        (messages, continuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(100_000))
    }

    /// True once every channel is confirmed subscribed on the current connection.
    public var isSubscribed: Bool {
        subscribed.withLock { $0 == channels.count }
    }

    public func run() async throws {
        try await cancelWhenGracefulShutdown {
            var backoff = Backoff(policy: self.configuration.reconnectBackoff)
            // On a cluster each attempt learns the slot map from the next seed in turn,
            // so a seed that is gone does not hold the subscriber back.
            var attempt = 0
            while !Task.isCancelled {
                var configuration = self.configuration
                if !configuration.clusterSeeds.isEmpty {
                    let seed = configuration.clusterSeeds[attempt % configuration.clusterSeeds.count]
                    configuration.clusterSeeds = [seed] + configuration.clusterSeeds.filter { $0 != seed }
                }
                attempt &+= 1
                do {
                    if configuration.clusterSeeds.isEmpty {
                        try await self.runOneConnection(configuration)
                    } else {
                        try await self.runSharded(configuration)
                    }
                    backoff.reset()
                    if !Task.isCancelled { self.logger.warning("redis_subscriber_connection_lost") }
                } catch {
                    let delay = backoff.next()
                    self.logger.warning(
                        "redis_subscriber_connect_failed",
                        metadata: ["error": "\(error)", "retryInMs": "\(Int(delay.milliseconds))"]
                    )
                    try? await Task.sleep(for: delay)
                }
                self.subscribed.withLock { $0 = 0 }
            }
        }
        continuation.finish()
    }

    private func runOneConnection(_ configuration: RedisConfiguration) async throws {
        let connection = try await RedisConnection.connect(
            to: configuration,
            eventLoopGroup: eventLoopGroup,
            onUnsolicited: { [weak self] reply in self?.handle(reply) }
        )
        let channel = connection.channel
        try await connection.writeUnanswered([RedisCommand("SUBSCRIBE", channels)])
        await withTaskCancellationHandler {
            try? await channel.closeFuture.get()
        } onCancel: {
            channel.close(promise: nil)
        }
    }

    /// One attempt on a cluster: `SSUBSCRIBE` on the master of each channel's slot, until
    /// one of those connections is lost or the server ends a subscription.
    static let shardCheckInterval: Duration = .seconds(2)

    private func runSharded(_ configuration: RedisConfiguration) async throws {
        let map = RedisCluster(seeds: configuration.clusterSeeds, configuration: configuration, eventLoopGroup: eventLoopGroup, logger: logger)
        defer { Task { await map.close() } }
        let channels = self.channels
        /// Where each channel's slot lives, by the map read now.
        @Sendable func owners() async throws -> [RedisCluster.Endpoint: [String]] {
            try await map.refresh()
            var byNode: [RedisCluster.Endpoint: [String]] = [:]
            for channel in channels {
                guard let node = map.master(ofSlot: RedisClusterSlots.slot(of: channel)) else { throw RedisError.unavailable }
                byNode[node, default: []].append(channel)
            }
            return byNode
        }
        let byNode = try await owners()
        var connections: [RedisConnection] = []
        do {
            for (node, names) in byNode {
                let connection = try await RedisConnection.connect(
                    to: configuration.node(node), eventLoopGroup: eventLoopGroup, onUnsolicited: { [weak self] reply in self?.handle(reply) }
                )
                connections.append(connection)
                current.withLock { $0.append(connection.channel) }
                // One command per channel: an SSUBSCRIBE's channels must share a slot.
                try await connection.writeUnanswered(names.map { RedisCommand("SSUBSCRIBE", $0) })
            }
        } catch {
            closeCurrent()
            throw error
        }
        await withTaskCancellationHandler {
            await withTaskGroup(of: Void.self) { group in
                for connection in connections {
                    group.addTask { try? await connection.channel.closeFuture.get() }
                }
                // A slot that moved without a word from the server ends the attempt too.
                group.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: Self.shardCheckInterval)
                        if Task.isCancelled { return }
                        if let now = try? await owners(), now != byNode { return }
                    }
                }
                // The first one lost ends the attempt: all go, and all are made anew.
                await group.next()
                self.closeCurrent()
                group.cancelAll()
                await group.waitForAll()
            }
        } onCancel: {
            self.closeCurrent()
        }
    }

    private func closeCurrent() {
        let channels = current.withLock { current in
            defer { current.removeAll() }
            return current
        }
        for channel in channels { channel.close(promise: nil) }
    }

    private func handle(_ reply: RESPValue) {
        guard let parts = reply.array, let kind = parts.first?.string else { return }
        switch kind {
        case "sunsubscribe":
            // The channel's slot moved: subscribe again where it lives now.
            closeCurrent()
        case "message" where parts.count == 3, "smessage" where parts.count == 3:
            guard let channel = parts[1].string, let payload = parts[2].bytes else { return }
            let message = RedisPubSubMessage(channel: channel, payload: payload)
            if let onMessage {
                onMessage(message)
            } else {
                continuation.yield(message)
            }
        case "subscribe", "ssubscribe":
            let count = subscribed.withLock {
                $0 += 1
                return $0
            }
            if count == channels.count { onSubscribed?() }
        default:
            break
        }
    }
}
