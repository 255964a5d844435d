import Logging
import PostgresNIO
import Prometheus
import Synchronization
import WhisperShared

/// Group memberships cached in each router, never trusted alone: a copy it admits is
/// stored only if the recipient's Redis record has the view's version, and one it would
/// refuse is first checked against the refused identity's record (`GroupDesk.admit`). So a
/// change is seen by every router at once; the TTL only bounds memory (docs/architecture.md,
/// "In-process memories of shared state").
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
