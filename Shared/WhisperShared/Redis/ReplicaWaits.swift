import Synchronization

/// How many replicas must hold a write before a client is told it is stored, and what a
/// shortfall does (`WHISPER_REDIS_WAIT_REPLICAS`, `WHISPER_REDIS_WAIT_TIMEOUT_MS`,
/// `WHISPER_REDIS_WAIT_SHORTFALL`; docs/operations.md, "What a replica keeps").
public struct ReplicaAcknowledgement: Sendable, Equatable {
    /// What a write that fewer replicas acknowledged in time is told.
    public enum Shortfall: String, Sendable {
        /// Stored: it stands on its master's fsynced append-only file. The master counts
        /// as unreplicated (a metric and an alert) and its writes stop waiting for
        /// replicas; once a ``ReplicaAcknowledgement/probeInterval`` one of them asks the
        /// master whether a replica is back (`RedisClient.waitForReplicas`).
        case accept
        /// Refused (`RedisError.replicasBehind`): the client sends again until a replica
        /// holds it. Every write to that master waits the timeout meanwhile.
        case refuse
    }

    /// Replicas that must acknowledge; 0: nobody waits.
    public var replicas: Int
    /// How long one `WAIT` may take before the write counts as not copied.
    public var timeout: Duration
    public var shortfall: Shortfall
    /// How often an unreplicated master is asked for its replicas (``Shortfall/accept``).
    public var probeInterval: Duration = .seconds(5)

    public init(replicas: Int, timeout: Duration, shortfall: Shortfall = .accept) {
        self.replicas = replicas
        self.timeout = timeout
        self.shortfall = shortfall
    }

    /// The default: one replica on a cluster (where a master's replica takes over when
    /// it fails), nobody on a standalone Redis (whose append-only file is what keeps a
    /// write), 500 ms either way; a shortfall is accepted.
    public static func standard(cluster: Bool) -> ReplicaAcknowledgement {
        ReplicaAcknowledgement(replicas: cluster ? 1 : 0, timeout: .milliseconds(500))
    }
}

/// `WAIT`s shared by everyone who needs one on the same connection: Redis answers `WAIT`
/// once every write this connection sent before it reached the replicas, so one `WAIT`
/// serves every caller whose write was sent before it. While one is out, callers gather
/// for the next, sent as soon as it returns: at most one `WAIT` per connection is in
/// Redis at a time, however many writes wait for it (a group commit).
final class ReplicaWaits: Sendable {
    private struct Node {
        var inFlight = false
        /// Waiting for the `WAIT` that is out.
        var current: [CheckedContinuation<Int, any Error>] = []
        /// Waiting for the next one.
        var next: [CheckedContinuation<Int, any Error>] = []
    }

    private let nodes = Mutex<[String: Node]>([:])

    /// How many replicas hold every write sent on `node`'s connection before this call,
    /// as the next `WAIT` sent there (by `send`) answers.
    func acknowledged(on node: String, send: @escaping @Sendable () async throws -> Int) async throws -> Int {
        try await withCheckedThrowingContinuation { continuation in
            let lead = nodes.withLock { nodes -> Bool in
                var state = nodes[node] ?? Node()
                defer { nodes[node] = state }
                guard !state.inFlight else {
                    state.next.append(continuation)
                    return false
                }
                state.inFlight = true
                state.current = [continuation]
                return true
            }
            if lead { Task { await self.rounds(on: node, send: send) } }
        }
    }

    /// Sends `WAIT`s one after another until nobody waits for one.
    private func rounds(on node: String, send: @Sendable () async throws -> Int) async {
        while true {
            let waiting = nodes.withLock { $0[node]?.current ?? [] }
            let result: Result<Int, any Error>
            do { result = .success(try await send()) } catch { result = .failure(error) }
            for continuation in waiting { continuation.resume(with: result) }
            let more = nodes.withLock { nodes -> Bool in
                guard var state = nodes[node] else { return false }
                defer { nodes[node] = state }
                guard !state.next.isEmpty else {
                    state.inFlight = false
                    state.current = []
                    return false
                }
                state.current = state.next
                state.next = []
                return true
            }
            if !more { return }
        }
    }
}
