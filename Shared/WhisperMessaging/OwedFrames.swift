import WhisperShared

/// Server frames owed to an identity while it is offline (receipts, group changes, missed
/// calls), in `receipts:{whisperId}:waiting` (72 h, at most `capacity`, oldest first) until
/// one of its sockets takes them (docs/architecture.md, "Through the router stream").
public struct OwedFrames: Sendable {
    let redis: RedisClient
    public let capacity: Int
    public let store: OwedStore
    public static let standardCapacity = 10_000
    /// Group events one identity may be owed: each carries the group's whole state, so
    /// the newest say all the older ones did.
    public static let standardGroupEventsCapacity = 1_000

    public init(redis: RedisClient, capacity: Int = OwedFrames.standardCapacity, store: OwedStore = .receipts) {
        self.redis = redis
        self.capacity = capacity
        self.store = store
    }

    /// Stores `frame` for `owner` and, when `socket` is given, then hands it to that
    /// socket's gateway as a `GatewayCommand` (kind `receipt`, built here in Swift: the
    /// store comes first, and the channel may live in another slot than the owner's keys).
    /// Returns the stored entry (`StoredReceipt`'s entryId): a caller that writes the
    /// frame to the owner's socket itself (a gateway holding it) settles that entry. Nil
    /// when the owner's account was deleted (`RedisKeys.deleted`): nothing is kept for
    /// it, and nothing handed over.
    @discardableResult
    public func keep(_ frame: [UInt8], for owner: String, handingTo socket: PresenceRecord?) async throws -> String? {
        let reply = try await redis.evaluate(
            Self.keepScript, keys: [store.key(owner), RedisKeys.deleted(owner)], arguments: [frame, Int(PendingQueue.ttl.milliseconds), capacity]
        )
        guard let id = reply.string else { throw RedisError.unexpectedReply("receipt keep") }
        if id.isEmpty { return nil }
        if let socket {
            let command = GatewayCommand(kind: .receipt, connId: socket.connId, frame: frame, stored: StoredReceipt(owner: owner, entryId: id, store: store))
            _ = try await command.publish(to: socket.gateway, on: redis)
        }
        return id
    }

    /// Publishes up to `limit` stored receipts of `owner`, oldest first, to `connId` on
    /// `gateway`, each as a command that settles it there once written.
    public func handOver(for owner: String, to gateway: String, connId: String, limit: Int = 500) async throws {
        let reply = try await redis.send("XRANGE", store.key(owner), "-", "+", "COUNT", limit)
        var commands: [RedisCommand] = []
        for entry in reply.array ?? [] {
            guard let parts = entry.array, parts.count == 2, let id = parts[0].string, let fields = parts[1].array,
                  fields.count == 2, let frame = fields[1].bytes else { continue }
            let command = GatewayCommand(kind: .receipt, connId: connId, frame: frame, stored: StoredReceipt(owner: owner, entryId: id, store: store))
            commands.append(command.publishing(to: gateway))
        }
        if !commands.isEmpty {
            _ = try await redis.pipeline(commands)
        }
    }

    /// Removes owed frames a socket has taken, from whichever store each is in.
    public func settle(_ receipts: [StoredReceipt]) async throws {
        var byStream: [String: [String]] = [:]
        for receipt in receipts { byStream[receipt.store.key(receipt.owner), default: []].append(receipt.entryId) }
        guard !byStream.isEmpty else { return }
        _ = try await redis.pipeline(byStream.map { key, ids in RedisCommand("XDEL", [key] + ids) })
    }

    /// Frames of this store kept for `owner` and not yet taken.
    public func count(for owner: String) async throws -> Int {
        Int(try await redis.send("XLEN", store.key(owner)).int ?? 0)
    }

    /// `owed-frames-keep.lua` (its header says what it takes and answers).
    static let keepScript = RedisScript(LuaSource.owedFramesKeep)
}
