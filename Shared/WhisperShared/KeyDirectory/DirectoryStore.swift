import Foundation
import Logging
import NIOCore
import PostgresNIO
import WhisperProtocol

/// The key directory as Postgres holds it (docs/key-transparency.md): what lookups and
/// the audit endpoint read. Every read that must agree with a head (a lookup's path
/// and opening) is one statement, so it sees one epoch: the publisher writes an epoch's
/// nodes, openings and head in one transaction.
public struct DirectoryStore: Sendable {
    let postgres: PostgresClient
    let logger: Logger

    public init(postgres: PostgresClient, logger: Logger) {
        self.postgres = postgres
        self.logger = logger
    }

    static let headColumns = "epoch, log_root, prefix_root, published_at, key_id, signature"
    typealias HeadRow = (Int64, ByteBuffer, ByteBuffer, Int64, String, ByteBuffer)

    static func head(_ row: HeadRow) -> DirectoryHead {
        DirectoryHead(
            epoch: row.0, logRoot: Array(row.1.readableBytesView), prefixRoot: Array(row.2.readableBytesView), publishedAt: row.3, keyId: row.4,
            signature: Array(row.5.readableBytesView)
        )
    }

    /// The directory's public keys, as its signer last started with them (nil before it has).
    public func keys() async throws -> DirectoryKeys? {
        var vrf: [UInt8]?
        var signing: [[UInt8]] = []
        let rows = try await postgres.query("SELECT purpose, public_key FROM kt_keys ORDER BY purpose, position", logger: logger)
        for try await (purpose, key) in rows.decode((String, ByteBuffer).self) {
            if purpose == "vrf" { vrf = Array(key.readableBytesView) } else { signing.append(Array(key.readableBytesView)) }
        }
        guard let vrf, !signing.isEmpty else { return nil }
        return DirectoryKeys(vrfPublicKey: vrf, signingKeys: signing)
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
    public func lookup(whisperId: String, since: Int64?) async throws -> Lookup {
        let first = try await postgres.query(
            """
            SELECT l.label, (SELECT depth FROM kt_epochs ORDER BY epoch DESC LIMIT 1)
            FROM kt_leaves l WHERE l.whisper_id = \(whisperId)
            """,
            logger: logger
        )
        var found: (label: [UInt8], depth: Int)?
        for try await (label, depth) in first.decode((ByteBuffer, Int16?).self) {
            found = (Array(label.readableBytesView), Int(depth ?? 0))
        }
        guard var (label, depth) = found else { return .waiting }
        // A publish between the two reads can deepen the tree: read again, deeper.
        for _ in 0..<3 {
            let positions = PrefixTree.pathPositions(for: label, depth: depth).map { ByteBuffer(bytes: $0.key) }
            // One row: the head, the opening and the path's nodes as arrays (one statement,
            // one snapshot; a row per node would repeat the rest and cost more to decode).
            let rows = try await postgres.query(
                """
                SELECT h.epoch, h.log_root, h.prefix_root, h.published_at, h.key_id, h.signature, h.depth, l.opening, l.vrf_proof,
                       n.positions, n.hashes, n.labels, n.values
                FROM (SELECT epoch, log_root, prefix_root, published_at, key_id, signature, depth FROM kt_epochs ORDER BY epoch DESC LIMIT 1) h
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
            var headDepth = 0
            var opening: [UInt8] = [], vrfProof: [UInt8] = []
            var nodes: [PrefixTree.Position: PrefixTree.Node] = [:]
            for try await row in rows.decode((Int64, ByteBuffer, ByteBuffer, Int64, String, ByteBuffer, Int16, ByteBuffer, ByteBuffer, [ByteBuffer], [ByteBuffer], [ByteBuffer], [ByteBuffer]).self) {
                head = Self.head((row.0, row.1, row.2, row.3, row.4, row.5))
                headDepth = Int(row.6)
                opening = Array(row.7.readableBytesView)
                vrfProof = Array(row.8.readableBytesView)
                for index in row.9.indices where index < row.10.count && index < row.11.count && index < row.12.count {
                    guard let position = PrefixTree.Position(key: Array(row.9[index].readableBytesView)) else { continue }
                    let label = row.11[index], value = row.12[index]
                    nodes[position] = Self.node(
                        hash: row.10[index], label: label.readableBytes == 0 ? nil : label, value: value.readableBytes == 0 ? nil : value
                    )
                }
            }
            guard let head else { return .waiting }
            if headDepth > depth {
                depth = headDepth
                continue
            }
            let proof = PrefixTree.proof(for: label, nodes: nodes)
            // The identity's leaf was written with an epoch not yet committed when this
            // statement began: it is waiting.
            guard case .found = proof.end else { return .waiting }
            var consistency: KeyProof.Consistency?
            if let since, since > 0, since < head.epoch {
                consistency = KeyProof.Consistency(fromEpoch: since, hashes: try await self.consistency(from: since, to: head.epoch))
            }
            return .proven(KeyProof(head: head, vrfProof: vrfProof, opening: opening, siblings: proof.siblings, consistency: consistency))
        }
        throw WhisperError(.internalError, "the key directory kept deepening during a lookup")
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
