import Foundation
import WhisperProtocol

/// An auditor of the key directory (docs/key-transparency.md, "Auditing"): reads every
/// epoch from the first and checks its signature and numbering, the log, and that the
/// prefix tree changed by exactly the listed changes, an existing entry only to its
/// tombstone. So a key committed over another entry is caught whether or not its owner
/// watches. Memory: O(log n).
public actor DirectoryAuditor {
    /// What a failed check says: the epoch and what is wrong with it.
    public struct Finding: Error, Equatable, Sendable, CustomStringConvertible {
        public var epoch: Int64
        public var problem: String
        /// The entry the finding is about (its label, base64), when it is about one.
        public var label: String?
        public var description: String { "epoch \(epoch): \(problem)" + (label.map { " (label \($0))" } ?? "") }

        public init(epoch: Int64, problem: String, label: String? = nil) {
            self.epoch = epoch
            self.problem = problem
            self.label = label
        }
    }

    /// The directory's keys as the auditor holds them: those it started with, and those
    /// endorsed since by a held key (``DirectoryKeys/learning(from:now:)``).
    public private(set) var keys: DirectoryKeys
    /// The last epoch checked (0 before the first).
    public private(set) var epoch: Int64 = 0
    public private(set) var head: DirectoryHead?
    private var prefixRoot = PrefixTree.empty
    /// The log's perfect subtrees, largest first (a binary counter of the leaves).
    private var frontier: [(level: Int, hash: LogTree.Hash)] = []
    /// Entries added, and entries deleted (changed to their tombstones), all epochs so far.
    public private(set) var added = 0
    public private(set) var deleted = 0

    public init(keys: DirectoryKeys) {
        self.keys = keys
    }

    /// Checks the next epoch.
    public func check(_ update: EpochUpdate) throws(Finding) {
        let next = epoch + 1
        let head = update.head
        guard head.epoch == next else { throw Finding(epoch: head.epoch, problem: "expected epoch \(next)") }
        guard head.isSigned(by: keys) else { throw Finding(epoch: next, problem: "the head is not signed by a directory key") }
        let checked: EpochUpdate.Checked
        do {
            checked = try update.verify(previousRoot: prefixRoot)
        } catch {
            throw Finding(epoch: next, problem: "the update proof does not lead from the previous tree to this one (\(error))")
        }
        for entry in checked.changed where entry.value != KeyDirectory.tombstone(label: entry.label) {
            throw Finding(
                epoch: next, problem: "an existing entry was given a value other than its tombstone (keys never change; only a deletion may change an entry)",
                label: Data(entry.label).base64EncodedString()
            )
        }
        guard let newRoot = head.prefixRootBytes, let logRoot = head.logRootBytes else { throw Finding(epoch: next, problem: "malformed head") }
        var frontier = self.frontier
        var hash = LogTree.leafHash(DirectoryHead.logLeaf(epoch: next, prefixRoot: newRoot, publishedAt: head.publishedAt))
        var level = 0
        while let last = frontier.last, last.level == level {
            frontier.removeLast()
            hash = LogTree.nodeHash(last.hash, hash)
            level += 1
        }
        frontier.append((level, hash))
        var root = frontier[frontier.count - 1].hash
        for subtree in frontier.dropLast().reversed() { root = LogTree.nodeHash(subtree.hash, root) }
        guard root == logRoot else { throw Finding(epoch: next, problem: "the signed log root is not the log of the epochs published") }
        if let previous = self.head, head.publishedAt < previous.publishedAt {
            throw Finding(epoch: next, problem: "published before the epoch it follows")
        }
        self.frontier = frontier
        self.prefixRoot = newRoot
        self.head = head
        epoch = next
        added += checked.addedLabels.count
        deleted += checked.changed.count
    }

    /// Checks every epoch published since the last one checked; returns how many. A 429
    /// (the directory's per-address limit) or 503 is waited out as its `Retry-After` says
    /// (1 to 60 s), and the checking goes on from the epoch it had reached.
    public func follow(_ api: WhisperAPI) async throws -> Int {
        let newest = try await Self.patiently { try await api.newestHead(since: nil).0 }
        var count = 0
        while epoch < newest.epoch {
            let next = epoch + 1
            let update = try await Self.patiently { try await api.epochUpdate(next) }
            if keys.signingKey(update.head.keyId) == nil {
                // A rotation: the new key counts once a held key endorsed it.
                keys = keys.learning(from: try await Self.patiently { try await api.servedDirectoryKeys() })
            }
            try check(update)
            count += 1
        }
        return count
    }

    private static func patiently<T: Sendable>(_ request: @Sendable () async throws -> T) async throws -> T {
        while true {
            do {
                return try await request()
            } catch WhisperAPIError.retryLater(_, let seconds) {
                try await Task.sleep(for: .seconds(min(max(seconds ?? 1, 1), 60)))
            }
        }
    }
}
