import Logging
import PostgresNIO
import Prometheus
import Synchronization
import WhisperShared

/// Group memberships cached in each router, so that a group copy costs no database
/// round trip. A cached view is never trusted alone, whichever way it answers:
/// - a copy it admits goes to the store script with the view's version, which the script
///   compares with the recipient's record in Redis (`RedisKeys.groups`); every change
///   rewrites the members' records before it is answered, so a mismatch makes the router
///   read the group again (`MessageRouter.send`);
/// - a copy it would refuse (no such group, sender or recipient not a member) is first
///   checked against the record of the identity refused (`GroupDesk.admit`): a record
///   that names another version than the view's means the view is older than a change
///   already answered, and the group is read again before anything is refused.
/// So a change is seen by every router at once, without messages between them; the TTL
/// only bounds how long an unused group takes memory (docs/architecture.md, "In-process
/// memories of shared state").
final class GroupDirectory: Sendable {
    private struct Entry {
        var view: GroupView?
        var fetchedAt: ContinuousClock.Instant
    }

    private let postgres: PostgresClient
    private let logger: Logger
    private let ttl: Duration
    private let unknownTTL: Duration
    private let capacity: Int
    private let entries = Mutex<[String: Entry]>([:])
    private let queries: Counter

    init(postgres: PostgresClient, logger: Logger, metrics: ServiceMetrics, ttl: Duration = .seconds(300), unknownTTL: Duration = .seconds(5), capacity: Int = 50_000) {
        self.postgres = postgres
        self.logger = logger
        self.ttl = ttl
        self.unknownTTL = unknownTTL
        self.capacity = capacity
        queries = metrics.counter("group_queries", help: "Groups the router read from Postgres (cache misses and changed groups).")
    }

    /// The group as cached (`fromMemory`), or as Postgres has it now.
    func view(_ groupId: String) async throws -> (view: GroupView?, fromMemory: Bool) {
        let now = ContinuousClock.now
        if let entry = entries.withLock({ $0[groupId] }), now - entry.fetchedAt < (entry.view == nil ? unknownTTL : ttl) {
            return (entry.view, true)
        }
        queries.increment()
        let view = try await GroupView.load(groupId, on: postgres, logger: logger)
        remember(groupId, view, at: now)
        return (view, false)
    }

    func remember(_ groupId: String, _ view: GroupView?, at now: ContinuousClock.Instant = .now) {
        entries.withLock { entries in
            if entries.count >= capacity, entries[groupId] == nil { entries.removeAll(keepingCapacity: true) }
            entries[groupId] = Entry(view: view, fetchedAt: now)
        }
    }

    func forget(_ groupId: String) {
        _ = entries.withLock { $0.removeValue(forKey: groupId) }
    }
}
