import Logging
import NIOCore
import NIOPosix
import NIOSSL

/// One pipelined connection to Redis. Many commands may be in flight at once; replies
/// come back in order. Safe to use from any task.
public final class RedisConnection: Sendable {
    let channel: any Channel

    private init(channel: any Channel) {
        self.channel = channel
    }

    /// Opens a connection, authenticates and selects the database.
    static func connect(
        to configuration: RedisConfiguration,
        eventLoopGroup: any EventLoopGroup,
        onUnsolicited: (@Sendable (RESPValue) -> Void)? = nil
    ) async throws -> RedisConnection {
        let tls = try configuration.tlsContext()
        let channel = try await ClientBootstrap(group: eventLoopGroup)
            .connectTimeout(.nanoseconds(configuration.connectTimeout.nanoseconds))
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls {
                        // The name is checked against the certificate; an address (no name
                        // to send) is checked against the certificate's IP addresses.
                        let name = configuration.host.contains(where: { $0 == ":" }) || configuration.host.allSatisfy({ $0.isNumber || $0 == "." })
                            ? nil : configuration.host
                        try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: tls, serverHostname: name))
                    }
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(RedisReplyDecoder()))
                    try channel.pipeline.syncOperations.addHandler(RedisCommandHandler(onUnsolicited: onUnsolicited))
                }
            }
            .connect(host: configuration.host, port: configuration.port)
            .get()
        let connection = RedisConnection(channel: channel)
        // The handshake is bounded like the TCP connect: a server that takes the
        // connection and never answers (starting, stalled) must not hold this connect,
        // and so the client's reconnect loop, for good. Closing fails what waits.
        let deadline = channel.eventLoop.scheduleTask(in: .nanoseconds(configuration.connectTimeout.nanoseconds)) {
            channel.close(promise: nil)
        }
        defer { deadline.cancel() }
        do {
            for command in configuration.handshake {
                _ = try await connection.send(command)
            }
        } catch {
            try? await channel.close()
            throw error
        }
        return connection
    }

    public var isActive: Bool { channel.isActive }

    /// Sends one command; an error reply is thrown as `RedisError.server`.
    @discardableResult
    public func send(_ command: RedisCommand) async throws -> RESPValue {
        let reply = try await pipeline([command])[0]
        if case .error(let message) = reply { throw RedisError.server(message) }
        return reply
    }

    /// Sends several commands in one write. Error replies are returned, not thrown,
    /// so that each result can be looked at on its own. `written` is called once the
    /// write is handed to the connection, before the replies are awaited. `mayWait`: how
    /// long the write may wait for others to go with it (`RedisCommandHandler`, group
    /// commit); anything written after it still goes after it.
    public func pipeline(
        _ commands: [RedisCommand], written: (@Sendable () -> Void)? = nil, mayWait: Duration = .zero
    ) async throws -> [RESPValue] {
        guard !commands.isEmpty else { return [] }
        let promises = write(commands, mayWait: .nanoseconds(mayWait.nanoseconds))
        written?()
        return try await Self.replies(promises)
    }

    /// As `pipeline(_:written:mayWait:)`, with the first command made by `first` only
    /// when the write leaves for Redis (on the connection's event loop, once), so that
    /// what it says may still change while it waits for others to share the write; made
    /// at once when `mayWait` is zero.
    public func pipeline(
        late first: @escaping @Sendable () -> RedisCommand, then others: [RedisCommand], written: (@Sendable () -> Void)? = nil,
        mayWait: Duration
    ) async throws -> [RESPValue] {
        guard mayWait > .zero else { return try await pipeline([first()] + others, written: written) }
        let eventLoop = channel.eventLoop
        let promises = (0...others.count).map { _ in eventLoop.makePromise(of: RESPValue.self) }
        let request = RedisOutboundRequest(
            bytes: channel.allocator.buffer(capacity: 0), promises: promises, mayWait: .nanoseconds(mayWait.nanoseconds),
            late: { [first()] + others }
        )
        send(request, promises)
        written?()
        return try await Self.replies(promises)
    }

    /// The replies `promises` are given, in order.
    private static func replies(_ promises: [EventLoopPromise<RESPValue>]) async throws -> [RESPValue] {
        var replies: [RESPValue] = []
        replies.reserveCapacity(promises.count)
        for promise in promises {
            replies.append(try await promise.futureResult.get())
        }
        return replies
    }

    /// Writes commands now, ahead of any sent later on this connection, and returns
    /// their replies (error replies in place) when they come, without waiting here.
    public func dispatch(_ commands: [RedisCommand]) -> EventLoopFuture<[RESPValue]> {
        guard !commands.isEmpty else { return channel.eventLoop.makeSucceededFuture([]) }
        return EventLoopFuture.whenAllSucceed(write(commands).map(\.futureResult), on: channel.eventLoop)
    }

    /// Encodes and writes commands in one write; one promise per reply, in order.
    ///
    /// A write that fails fails its replies. Once a closed channel's handlers are gone, a
    /// write never reaches ``RedisCommandHandler`` (which fails what it holds): without
    /// this, a command sent just as its connection died would wait for ever.
    private func write(_ commands: [RedisCommand], mayWait: TimeAmount = .zero) -> [EventLoopPromise<RESPValue>] {
        var bytes = channel.allocator.buffer(capacity: 64 * commands.count)
        for command in commands {
            command.encode(into: &bytes)
        }
        let eventLoop = channel.eventLoop
        let promises = commands.map { _ in eventLoop.makePromise(of: RESPValue.self) }
        send(RedisOutboundRequest(bytes: bytes, promises: promises, mayWait: mayWait), promises)
        return promises
    }

    /// Hands a request to the channel; a write that fails fails its replies.
    private func send(_ request: RedisOutboundRequest, _ promises: [EventLoopPromise<RESPValue>]) {
        let written = channel.eventLoop.makePromise(of: Void.self)
        written.futureResult.whenFailure { _ in
            // A reply already given stays given (a second completion is ignored).
            for promise in promises { promise.fail(RedisError.connectionClosed) }
        }
        channel.writeAndFlush(request, promise: written)
    }

    /// Writes commands whose replies nobody waits for (SUBSCRIBE on a push connection).
    func writeUnanswered(_ commands: [RedisCommand]) async throws {
        var bytes = channel.allocator.buffer(capacity: 64)
        for command in commands {
            command.encode(into: &bytes)
        }
        try await channel.writeAndFlush(RedisOutboundRequest(bytes: bytes, promises: []))
    }

    public func close() async {
        try? await channel.close()
    }
}

extension RedisConfiguration {
    /// The TLS context of `rediss://`: certificate and name verified, against `caFile`
    /// when given. Nil without TLS.
    func tlsContext() throws -> NIOSSLContext? {
        guard tls else { return nil }
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        if let caFile {
            configuration.trustRoots = .file(caFile)
        }
        return try NIOSSLContext(configuration: configuration)
    }

    /// AUTH, SELECT and CLIENT SETNAME as this configuration asks.
    var handshake: [RedisCommand] {
        var commands: [RedisCommand] = []
        if let password {
            if let username {
                commands.append(RedisCommand("AUTH", username, password))
            } else {
                commands.append(RedisCommand("AUTH", password))
            }
        }
        if database != 0 {
            commands.append(RedisCommand("SELECT", database))
        }
        if let clientName {
            commands.append(RedisCommand("CLIENT", "SETNAME", clientName))
        }
        return commands
    }
}
