import Foundation
import Logging
import NIOCore
import PostgresNIO
import Synchronization
import WhisperProtocol

/// The key directory as Postgres holds it (docs/key-transparency.md): what lookups and
/// the audit endpoint read. Every read that must agree with a head (a lookup's path
/// and opening) is one statement, so it sees one epoch: the publisher writes an epoch's
/// nodes, openings and head in one transaction.
public struct DirectoryStore: Sendable {
    let postgres: PostgresClient
    let logger: Logger
    let top: DirectoryTop

    public init(postgres: PostgresClient, logger: Logger) {
        self.init(postgres: postgres, logger: logger, topLevels: DirectoryTop.standardLevels)
    }

    /// With the top `topLevels` levels kept in memory (tests take fewer, so that small
    /// trees have nodes below them).
    init(postgres: PostgresClient, logger: Logger, topLevels: Int) {
        self.postgres = postgres
        self.logger = logger
        self.top = DirectoryTop(levels: topLevels)
    }

    static let headColumns = "epoch, log_root, prefix_root, published_at, key_id, signature"
    typealias HeadRow = (Int64, ByteBuffer, ByteBuffer, Int64, String, ByteBuffer)

    static func head(_ row: HeadRow) -> DirectoryHead {
        DirectoryHead(
            epoch: row.0, logRoot: Array(row.1.readableBytesView), prefixRoot: Array(row.2.readableBytesView), publishedAt: row.3, keyId: row.4,
            signature: Array(row.5.readableBytesView)
        )
    }

    /// The directory's public keys, as its signer last started with them, with every key
    /// statement made (nil before it has).
    public func keys() async throws -> DirectoryKeys? {
        var vrf: [UInt8]?
        var signing: [[UInt8]] = []
        let rows = try await postgres.query("SELECT purpose, public_key FROM kt_keys ORDER BY purpose, position", logger: logger)
        for try await (purpose, key) in rows.decode((String, ByteBuffer).self) {
            if purpose == "vrf" { vrf = Array(key.readableBytesView) } else { signing.append(Array(key.readableBytesView)) }
        }
        guard let vrf, !signing.isEmpty else { return nil }
        var statements: [KeyStatement] = []
        let made = try await postgres.query(
            "SELECT kind, public_key, signer_id, at, signature FROM kt_key_statements ORDER BY at, kind, signer_id", logger: logger
        )
        for try await (kind, key, signer, at, signature) in made.decode((String, ByteBuffer, String, Int64, ByteBuffer).self) {
            guard let kind = KeyStatement.Kind(rawValue: kind) else { continue }
            statements.append(KeyStatement(
                kind: kind, publicKey: Array(key.readableBytesView), at: at, by: signer, signature: Array(signature.readableBytesView)
            ))
        }
        return DirectoryKeys(vrfPublicKey: vrf, signingKeys: signing, statements: statements.isEmpty ? nil : statements)
    }

    /// The newest head, or epoch `epoch`'s; nil when there is none.
    public func head(epoch: Int64? = nil) async throws -> DirectoryHead? {
        let rows = if let epoch {
            try await postgres.query("SELECT \(unescaped: Self.headColumns) FROM kt_epochs WHERE epoch = \(epoch)", logger: logger)
        } else {
            try await postgres.query("SELECT \(unescaped: Self.headColumns) FROM kt_epochs ORDER BY epoch DESC LIMIT 1", logger: logger)
        }
        for try await row in rows.decode(HeadRow.self) { return Self.head(row) }
        return nil
    }

    /// The newest signature of each auditor among `auditorKeyIds` (the configured ones),
    /// with the directory's head of the epoch it names.
    public func audits(of auditorKeyIds: [String]) async throws -> [AuditedHead] {
        guard !auditorKeyIds.isEmpty else { return [] }
        let rows = try await postgres.query("""
            SELECT e.epoch, e.log_root, e.prefix_root, e.published_at, e.key_id, e.signature, a.auditor_key_id, a.signed_at, a.signature
            FROM kt_audits a JOIN kt_epochs e ON e.epoch = a.epoch
            WHERE a.auditor_key_id = ANY(\(auditorKeyIds)::text[]) ORDER BY a.auditor_key_id
            """, logger: logger)
        var audits: [AuditedHead] = []
        typealias Row = (Int64, ByteBuffer, ByteBuffer, Int64, String, ByteBuffer, String, Int64, ByteBuffer)
        for try await row in rows.decode(Row.self) {
            let head = Self.head((row.0, row.1, row.2, row.3, row.4, row.5))
            audits.append(AuditedHead(head: head, audit: AuditorSignature(
                auditorKeyId: row.6, epoch: head.epoch, logRoot: head.logRoot, signedAt: row.7, signature: Data(row.8.readableBytesView).base64EncodedString()
            )))
        }
        return audits
    }

    /// Keeps `audit` as its auditor's newest, unless it holds one of a later epoch, or of
    /// the same epoch signed later; returns whether it was kept. The caller has checked the signature and that
    /// the epoch's head has the signed log root.
    public func record(_ audit: AuditorSignature) async throws -> Bool {
        let signature = ByteBuffer(bytes: Data(base64Encoded: audit.signature) ?? Data())
        let rows = try await postgres.query("""
            INSERT INTO kt_audits (auditor_key_id, epoch, signed_at, signature) VALUES (\(audit.auditorKeyId), \(audit.epoch), \(audit.signedAt), \(signature))
            ON CONFLICT (auditor_key_id) DO UPDATE SET epoch = excluded.epoch, signed_at = excluded.signed_at, signature = excluded.signature
            WHERE kt_audits.epoch < excluded.epoch OR (kt_audits.epoch = excluded.epoch AND kt_audits.signed_at < excluded.signed_at)
            RETURNING 1
            """, logger: logger)
        for try await _ in rows.decode(Int.self) { return true }
        return false
    }

    /// Epoch `epoch`'s update proof (``EpochUpdate`` as JSON), nil when there is no such epoch.
    public func update(epoch: Int64) async throws -> ByteBuffer? {
        let rows = try await postgres.query("SELECT update_proof FROM kt_epochs WHERE epoch = \(epoch)", logger: logger)
        for try await proof in rows.decode(ByteBuffer.self) { return proof }
        return nil
    }

    /// The log consistency proof from epoch `from` to epoch `to` (both published, `from` < `to`).
    public func consistency(from: Int64, to: Int64) async throws -> [[UInt8]] {
        let read = LogTree.subtreesRead { lookup in _ = LogTree.consistencyProof(from: Int(from), to: Int(to), subtree: lookup) }
        let stored = try await Self.subtrees(read, on: postgres, logger: logger)
        return try LogTree.consistencyProof(from: Int(from), to: Int(to)) { subtree in
            guard let hash = stored[subtree] else { throw WhisperError(.internalError, "the key directory's log misses a subtree") }
            return hash
        }
    }

    static func subtrees(_ wanted: Set<LogTree.Subtree>, on client: some PostgresQueryRunner, logger: Logger) async throws -> [LogTree.Subtree: LogTree.Hash] {
        guard !wanted.isEmpty else { return [:] }
        let levels = wanted.map { Int16($0.level) }, indexes = wanted.map { Int64($0.index) }
        let rows = try await client.run(
            """
            SELECT level, index, hash FROM kt_log
            WHERE (level, index) IN (SELECT * FROM unnest(\(levels)::smallint[], \(indexes)::bigint[]))
            """,
            logger: logger
        )
        var found: [LogTree.Subtree: LogTree.Hash] = [:]
        for try await (level, index, hash) in rows.decode((Int16, Int64, ByteBuffer).self) {
            found[LogTree.Subtree(level: Int(level), index: Int(index))] = Array(hash.readableBytesView)
        }
        return found
    }

    static func nodes(_ positions: [PrefixTree.Position], on client: some PostgresQueryRunner, logger: Logger) async throws -> [PrefixTree.Position: PrefixTree.Node] {
        let keys = positions.map { ByteBuffer(bytes: $0.key) }
        let rows = try await client.run(
            "SELECT position, hash, leaf_label, leaf_value FROM kt_nodes WHERE position = ANY(\(keys)::bytea[])", logger: logger
        )
        var found: [PrefixTree.Position: PrefixTree.Node] = [:]
        for try await (position, hash, label, value) in rows.decode((ByteBuffer, ByteBuffer, ByteBuffer?, ByteBuffer?).self) {
            guard let position = PrefixTree.Position(key: Array(position.readableBytesView)) else { continue }
            found[position] = node(hash: hash, label: label, value: value)
        }
        return found
    }

    static func node(hash: ByteBuffer, label: ByteBuffer?, value: ByteBuffer?) -> PrefixTree.Node {
        let leaf = label.flatMap { label in value.map { PrefixTree.Entry(label: Array(label.readableBytesView), value: Array($0.readableBytesView)) } }
        return PrefixTree.Node(hash: Array(hash.readableBytesView), leaf: leaf)
    }

    /// What a lookup of one identity carries.
    public enum Lookup: Sendable {
        /// The identity's proof in the newest head.
        case proven(KeyProof)
        /// The identity is not in the directory yet (registered since the last epoch).
        case waiting
    }

    /// The proof for `whisperId` in the newest head, with the log's consistency from epoch
    /// `since` when the client named one older than the head.
    ///
    /// Two statements: the identity's label (which names its path), then the head, the
    /// opening and the path's nodes below ``DirectoryTop``'s levels in one snapshot. The
    /// levels above come from ``DirectoryTop``'s copy of the same epoch.
    public func lookup(whisperId: String, since: Int64?) async throws -> Lookup {
        var label: [UInt8]?
        for try await found in try await postgres.query("SELECT label FROM kt_leaves WHERE whisper_id = \(whisperId)", logger: logger)
            .decode(ByteBuffer.self)
        {
            label = Array(found.readableBytesView)
        }
        guard let label else { return .waiting }
        var top = try await self.top.current(for: nil, postgres: postgres, logger: logger)
        // A publish between the statements gives a head the copy is not of: take a copy of
        // the newest tree and read the path again.
        for _ in 0..<4 {
            let positions = PrefixTree.pathPositions(for: label, depth: top.depth)
                .filter { $0.depth > self.top.levels }.map { ByteBuffer(bytes: $0.key) }
            // One row: the head, the opening and the path's nodes as arrays (one statement,
            // one snapshot; a row per node would repeat the rest and cost more to decode).
            let rows = try await postgres.query(
                """
                SELECT h.epoch, h.log_root, h.prefix_root, h.published_at, h.key_id, h.signature, l.opening, l.vrf_proof,
                       n.positions, n.hashes, n.labels, n.values
                FROM (SELECT epoch, log_root, prefix_root, published_at, key_id, signature FROM kt_epochs ORDER BY epoch DESC LIMIT 1) h
                JOIN kt_leaves l ON l.whisper_id = \(whisperId)
                CROSS JOIN (
                    SELECT coalesce(array_agg(position), '{}') AS positions, coalesce(array_agg(hash), '{}') AS hashes,
                           coalesce(array_agg(coalesce(leaf_label, '')), '{}') AS labels, coalesce(array_agg(coalesce(leaf_value, '')), '{}') AS values
                    FROM kt_nodes WHERE position = ANY(\(positions)::bytea[])
                ) n
                """,
                logger: logger
            )
            var head: DirectoryHead?
            var opening: [UInt8] = [], vrfProof: [UInt8] = []
            // The nodes below the copy's levels; the copy itself is read, never copied.
            var nodes: [PrefixTree.Position: PrefixTree.Node] = [:]
            for try await row in rows.decode((Int64, ByteBuffer, ByteBuffer, Int64, String, ByteBuffer, ByteBuffer, ByteBuffer, [ByteBuffer], [ByteBuffer], [ByteBuffer], [ByteBuffer]).self) {
                head = Self.head((row.0, row.1, row.2, row.3, row.4, row.5))
                opening = Array(row.6.readableBytesView)
                vrfProof = Array(row.7.readableBytesView)
                Self.addNodes(&nodes, positions: row.8, hashes: row.9, labels: row.10, values: row.11)
            }
            guard let head else { return .waiting }
            if !top.isOf(head) {
                top = try await self.top.current(for: head, postgres: postgres, logger: logger)
                continue
            }
            let proof = PrefixTree.proof(for: label) { position in
                position.depth > self.top.levels ? nodes[position] : top.nodes[position]
            }
            // The identity's leaf was written with an epoch not yet committed when this
            // statement began: it is waiting.
            guard case .found = proof.end else { return .waiting }
            var consistency: KeyProof.Consistency?
            if let since, since > 0, since < head.epoch {
                consistency = KeyProof.Consistency(fromEpoch: since, hashes: try await self.consistency(from: since, to: head.epoch))
            }
            return .proven(KeyProof(head: head, vrfProof: vrfProof, opening: opening, siblings: proof.siblings, consistency: consistency))
        }
        throw WhisperError(.internalError, "the key directory kept publishing during a lookup")
    }

    /// Nodes read as four parallel arrays (an empty label or value: none), by position.
    static func addNodes(
        _ nodes: inout [PrefixTree.Position: PrefixTree.Node], positions: [ByteBuffer], hashes: [ByteBuffer], labels: [ByteBuffer], values: [ByteBuffer]
    ) {
        for index in positions.indices where index < hashes.count && index < labels.count && index < values.count {
            guard let position = PrefixTree.Position(key: Array(positions[index].readableBytesView)) else { continue }
            let label = labels[index], value = values[index]
            nodes[position] = node(hash: hashes[index], label: label.readableBytes == 0 ? nil : label, value: value.readableBytes == 0 ? nil : value)
        }
    }
}

/// The top levels of the newest epoch's prefix tree (8,191 nodes for 12 levels, about a
/// megabyte), through which every lookup passes. It is one epoch's copy, used only with a
/// head of the same epoch and root read with the rest of the path, and replaced when they
/// differ, so a proof never mixes two trees.
final class DirectoryTop: Sendable {
    static let standardLevels = 12
    let levels: Int

    init(levels: Int) {
        self.levels = levels
    }

    struct Copy: Sendable {
        let epoch: Int64
        /// The epoch's prefix root: an epoch number alone does not name one tree (a
        /// server that forked its log publishes two trees under one number).
        let prefixRoot: String
        /// The tree's deepest node in that epoch.
        let depth: Int
        let nodes: [PrefixTree.Position: PrefixTree.Node]

        func isOf(_ head: DirectoryHead) -> Bool { epoch == head.epoch && prefixRoot == head.prefixRoot }
    }

    private struct State {
        var copy: Copy?
        var reading: Task<Copy, Error>?
    }

    private let state = Mutex(State())

    /// The copy held when it is of `head` (any copy when nil); otherwise a new one is
    /// read. One read at a time: lookups that want one meanwhile wait for it.
    func current(for head: DirectoryHead?, postgres: PostgresClient, logger: Logger) async throws -> Copy {
        enum Next { case held(Copy), wait(Task<Copy, Error>) }
        let next: Next = state.withLock { state in
            if let copy = state.copy, head.map(copy.isOf) ?? true { return .held(copy) }
            if let reading = state.reading { return .wait(reading) }
            let reading = Task { [levels] in try await Self.read(levels: levels, postgres: postgres, logger: logger) }
            state.reading = reading
            return .wait(reading)
        }
        let reading: Task<Copy, Error>
        switch next {
        case .held(let copy): return copy
        case .wait(let task): reading = task
        }
        do {
            let copy = try await reading.value
            state.withLock { state in
                // Reads run one at a time, so the one ending last read last.
                if state.reading == reading {
                    state.copy = copy
                    state.reading = nil
                }
            }
            return copy
        } catch {
            state.withLock { state in if state.reading == reading { state.reading = nil } }
            throw error
        }
    }

    /// The newest head's epoch, depth and top nodes, in one statement.
    private static func read(levels: Int, postgres: PostgresClient, logger: Logger) async throws -> Copy {
        // Keys are the depth in two bytes, then the prefix: every node above the cut sorts
        // before the first key of depth levels + 1.
        let below = ByteBuffer(bytes: [UInt8((levels + 1) >> 8), UInt8((levels + 1) & 0xFF)])
        let rows = try await postgres.query(
            """
            SELECT h.epoch, h.prefix_root, h.depth, n.positions, n.hashes, n.labels, n.values
            FROM (SELECT epoch, prefix_root, depth FROM kt_epochs ORDER BY epoch DESC LIMIT 1) h
            CROSS JOIN (
                SELECT coalesce(array_agg(position), '{}') AS positions, coalesce(array_agg(hash), '{}') AS hashes,
                       coalesce(array_agg(coalesce(leaf_label, '')), '{}') AS labels, coalesce(array_agg(coalesce(leaf_value, '')), '{}') AS values
                FROM kt_nodes WHERE position < \(below)
            ) n
            """,
            logger: logger
        )
        for try await row in rows.decode((Int64, ByteBuffer, Int16, [ByteBuffer], [ByteBuffer], [ByteBuffer], [ByteBuffer]).self) {
            var nodes: [PrefixTree.Position: PrefixTree.Node] = [:]
            DirectoryStore.addNodes(&nodes, positions: row.3, hashes: row.4, labels: row.5, values: row.6)
            return Copy(epoch: row.0, prefixRoot: Data(row.1.readableBytesView).base64EncodedString(), depth: Int(row.2), nodes: nodes)
        }
        return Copy(epoch: 0, prefixRoot: "", depth: 0, nodes: [:])
    }
}

/// A client or a connection: what the directory's reads and writes run on.
public protocol PostgresQueryRunner: Sendable {
    func run(_ query: PostgresQuery, logger: Logger) async throws -> PostgresRowSequence
}

extension PostgresClient: PostgresQueryRunner {
    public func run(_ query: PostgresQuery, logger: Logger) async throws -> PostgresRowSequence {
        try await self.query(query, logger: logger)
    }
}

extension PostgresConnection: PostgresQueryRunner {
    public func run(_ query: PostgresQuery, logger: Logger) async throws -> PostgresRowSequence {
        try await self.query(query, logger: logger)
    }
}
