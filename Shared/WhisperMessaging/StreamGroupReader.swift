import Logging
import WhisperShared

/// One consumer of a Redis Stream's consumer group, as routers and push-senders read: the
/// group made when missing, batches read with the finished ones acknowledged in the same
/// write, idle entries of dead consumers claimed, handled ones acknowledged and deleted,
/// and backoff on errors. What a consumer does with its entries stays its own.
public struct StreamGroupReader: Sendable {
    /// An entry as read: its fields, or nil for a claimed entry deleted meanwhile.
    public struct Entry: Sendable {
        public var id: String
        public var fields: [RESPValue]?
    }

    public let stream: String
    public let group: String
    public let consumer: String
    /// A connection of its own: `XREADGROUP` blocks, and must not hold up other commands.
    let reader: RedisClient
    let redis: RedisClient
    let logger: Logger
    /// The prefix of the log events (`router`, `push`).
    let events: String

    /// Every shard of the stream `base` (`StreamShards`) with a client of its own to read
    /// it on (named `clientName`), for a consumer per shard; run each client with the
    /// service, before its consumer.
    public static func shards(
        of base: String, configuration: RedisConfiguration, clientName: String, logger: Logger
    ) -> [(key: String, reader: RedisClient)] {
        var readerConfiguration = configuration
        readerConfiguration.clientName = clientName
        return configuration.streamShards.keys(base).map { ($0, RedisClient(configuration: readerConfiguration, logger: logger)) }
    }

    public init(stream: String, group: String, consumer: String, reader: RedisClient, redis: RedisClient, logger: Logger, events: String) {
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self.reader = reader
        self.redis = redis
        self.logger = logger
        self.events = events
    }

    /// Runs `step` until the task is cancelled. The group is made before the first step
    /// and again after a `NOGROUP` (the stream was deleted); while the reader's connection
    /// is still being opened a failed step is tried again shortly and quietly; any other
    /// failure is logged (`<events>_read_failed`) and tried again after a backoff.
    public func loop(_ step: () async throws -> Void) async {
        var backoff = Backoff(policy: .init(initial: .milliseconds(50), maximum: .seconds(2)))
        var groupReady = false
        var connected = false
        while !Task.isCancelled {
            do {
                if !groupReady {
                    try await ensureGroup()
                    groupReady = true
                }
                try await step()
                connected = true
                backoff.reset()
            } catch RedisError.server(let message) where message.hasPrefix("NOGROUP") {
                groupReady = false
            } catch RedisError.unavailable where !connected {
                // Starting: the connections are still being opened (their client reports
                // it if that fails).
                try? await Clock.sleep(for: .milliseconds(20))
            } catch {
                // Stopping: a read cut short is no failure.
                if Task.isCancelled { break }
                let delay = backoff.next()
                logger.warning("\(events)_read_failed", metadata: ["error": "\(error)", "retryInMs": "\(Int(delay.milliseconds))"])
                try? await Task.sleep(for: delay)
            }
        }
    }

    public func ensureGroup() async throws {
        do {
            try await redis.send("XGROUP", "CREATE", stream, group, "0", "MKSTREAM")
        } catch RedisError.server(let message) where message.hasPrefix("BUSYGROUP") {
            // Another consumer made it first.
        }
    }

    /// Reads up to `count` new entries, waiting up to `blockMs` for the first; `finished`
    /// entries are acknowledged in the same write (under load every read carries the
    /// acknowledgements, no round trip of their own). When that write fails nothing was
    /// acknowledged: those entries are claimed and handled again later, which is
    /// idempotent.
    public func read(count: Int, blockMs: Int, acknowledging finished: [String] = []) async throws -> [Entry] {
        let read = RedisCommand("XREADGROUP", ["GROUP", group, consumer, "COUNT", count, "BLOCK", blockMs, "STREAMS", stream, ">"])
        guard !finished.isEmpty else { return Self.entries(ofReadReply: try await reader.send(read)) }
        let replies: [RESPValue]
        do {
            replies = try await reader.pipeline(acknowledgement(of: finished) + [read])
        } catch {
            logger.warning("\(events)_ack_failed", metadata: ["count": "\(finished.count)", "error": "\(error)"])
            throw error
        }
        guard let last = replies.last else { throw RedisError.unexpectedReply("XREADGROUP") }
        if case .error(let message) = last { throw RedisError.server(message) }
        return Self.entries(ofReadReply: last)
    }

    /// Acknowledges and deletes `ids` in one write.
    public func acknowledge(_ ids: [String]) async throws {
        guard !ids.isEmpty else { return }
        _ = try await redis.pipeline(acknowledgement(of: ids))
    }

    public func acknowledgement(of ids: [String]) -> [RedisCommand] {
        [RedisCommand("XACK", [stream, group] + ids), RedisCommand("XDEL", [stream] + ids)]
    }

    /// Takes over entries idle for longer than `idle` (`XAUTOCLAIM`), `count` a page, at
    /// most 20 pages, leaving out those `isOurs` says this consumer is still handling;
    /// each page goes to `take`, which says whether to go on.
    public func claim(idle: Duration, count: Int, isOurs: (String) -> Bool, take: ([Entry]) async throws -> Bool) async throws {
        var start = "0-0"
        for _ in 0..<20 {
            let reply = try await redis.send(RedisCommand("XAUTOCLAIM", [stream, group, consumer, Int(idle.milliseconds), start, "COUNT", count]))
            guard let parts = reply.array, parts.count >= 2, let next = parts[0].string else { return }
            let entries = Self.entries(parts[1]).filter { !isOurs($0.id) }
            let goOn = entries.isEmpty ? true : try await take(entries)
            if !goOn || next == "0-0" { return }
            start = next
        }
    }

    static func entries(ofReadReply reply: RESPValue) -> [Entry] {
        guard let streams = reply.array else { return [] }
        return streams.flatMap { stream -> [Entry] in
            guard let parts = stream.array, parts.count == 2 else { return [] }
            return entries(parts[1])
        }
    }

    static func entries(_ list: RESPValue) -> [Entry] {
        (list.array ?? []).compactMap { item in
            guard let parts = item.array, parts.count == 2, let id = parts[0].string else { return nil }
            return Entry(id: id, fields: parts[1].array)
        }
    }
}
