import WhisperShared

/// The server frames owed to one identity that must reach it even if it is offline:
/// receipts (`message_delivered`) for the messages it sent, `group_created` and
/// `group_updated` of groups it is in, and missed calls (`call_ended`). Receipts are
/// the most of them, and the rest is said of them below; the others are kept the same
/// way. Group events are kept apart (`OwedStore.groupEvents`, a bound of their own),
/// so a peer that changes groups often cannot push receipts out. (Named `ReceiptQueue`
/// until issue 35; the key keeps its name.)
///
/// Receipts on their way to the message's sender are stored before they are handed
/// over, as messages are: `receipts:{whisperId}:waiting`, a Redis Stream
/// kept 72 hours. A receipt leaves the store only when a gateway has written it to the
/// sender's socket (`GatewayCommand.Kind.receipt`, then `settle`); one that finds no
/// socket, or a socket that closes first, waits for the sender's next `fetch_pending`.
/// So a receipt is never lost to a socket closing in between; it can come twice only
/// when a `fetch_pending` hands it over while a live copy is still being written
/// (clients treat `message_delivered` as a state, idempotent by messageId and status).
///
/// A receipt older than 72 hours is dropped as the next one is kept (`XTRIM MINID`),
/// and the stream expires 72 hours after the last.
/// At most `capacity` receipts wait per sender (the oldest go first past it): a sender
/// who stays away while many of its messages are read cannot grow the store without
/// bound. Each message gives at most one `delivered` and one `read` receipt.
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
