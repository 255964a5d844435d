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

/// A dedicated pub/sub connection that subscribes to a fixed set of channels, and
/// re-connects and re-subscribes with backoff whenever the connection drops.
///
/// Messages published while the connection is down are lost: pub/sub only carries
/// wake-ups and live fan-out, never anything that is not also stored.
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
            // In a cluster, any node hears every PUBLISH: a lost node's subscriber moves
            // to the next one.
            var attempt = 0
            while !Task.isCancelled {
                var configuration = self.configuration
                if !configuration.clusterSeeds.isEmpty {
                    let seed = configuration.clusterSeeds[attempt % configuration.clusterSeeds.count]
                    (configuration.host, configuration.port, configuration.database) = (seed.host, seed.port, 0)
                }
                attempt &+= 1
                do {
                    try await self.runOneConnection(configuration)
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

    private func handle(_ reply: RESPValue) {
        guard let parts = reply.array, let kind = parts.first?.string else { return }
        switch kind {
        case "message" where parts.count == 3:
            guard let channel = parts[1].string, let payload = parts[2].bytes else { return }
            let message = RedisPubSubMessage(channel: channel, payload: payload)
            if let onMessage {
                onMessage(message)
            } else {
                continuation.yield(message)
            }
        case "subscribe":
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
