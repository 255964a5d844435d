import Foundation
import Logging
import NIOCore
import PostgresNIO
import WhisperProtocol

/// The keys only the directory's signer holds (gc-worker's `GC_WORKER_KT_VRF_KEY` and
/// `GC_WORKER_KT_SIGNING_KEYS`): the VRF key that hides identities' labels, fixed for the
/// directory's life, and the Ed25519 keys heads are signed with, the first one signing.
public struct DirectorySigner: Sendable, RedactedDescription {
    let vrf: VRF.KeyPair
    let signing: Ed25519.KeyPair
    let signingId: String
    /// What `GET /kt/keys` answers.
    public let publicKeys: DirectoryKeys
    let signingKeys: [[UInt8]]

    /// `vrfSeed` and each of `signingSeeds` (at least one) are 32 random bytes.
    public init(vrfSeed: [UInt8], signingSeeds: [[UInt8]]) {
        precondition(!signingSeeds.isEmpty, "at least one signing key")
        vrf = VRF.KeyPair(seed: vrfSeed)
        let pairs = signingSeeds.map(Ed25519.KeyPair.init(seed:))
        signing = pairs[0]
        signingId = Ed25519.keyId(pairs[0].publicKey)
        signingKeys = pairs.map(\.publicKey)
        signingPairs = pairs
        publicKeys = DirectoryKeys(vrfPublicKey: vrf.publicKey, signingKeys: signingKeys)
    }

    /// Every configured signing key, the signing one first.
    let signingPairs: [Ed25519.KeyPair]
}

/// Publishes the key directory's epochs (docs/key-transparency.md): takes the identities
/// whose entries changed since the last epoch (`users.kt_epoch IS NULL`), gives each its
/// label (VRF) and a fresh commitment, updates the stored prefix tree, appends the
/// epoch to the log and signs the head, all in one transaction. One publisher at a time
/// (a transaction-scoped advisory lock); any number may run.
public struct DirectoryPublisher: Sendable {
    let postgres: PostgresClient
    let signer: DirectorySigner
    /// Entries taken into one epoch at most (more wait for the next).
    let batchSize: Int
    /// A head this old is followed by an empty epoch, so clients can tell a current head
    /// from a frozen one.
    let headMaxAge: Duration
    let logger: Logger

    static let advisoryLock: Int64 = 0x5753_4B54 // "WSKT"

    public init(postgres: PostgresClient, signer: DirectorySigner, batchSize: Int, headMaxAge: Duration, logger: Logger) {
        self.postgres = postgres
        self.signer = signer
        self.batchSize = batchSize
        self.headMaxAge = headMaxAge
        self.logger = logger
    }

    /// Records the signer's public keys for `GET /kt/keys`, with the statements that let
    /// clients follow a rotation (docs/key-transparency.md, "Rotation"): each configured
    /// key endorses every other one, and a signing key recorded before but no longer
    /// configured is retired now, by the signing key. Statements are kept for good.
    /// Refuses a VRF key other than the one the directory was started with: every label
    /// would change.
    public func recordKeys() async throws {
        try await postgres.withTransaction(logger: logger) { connection in
            _ = try await connection.query("SELECT pg_advisory_xact_lock(\(Self.advisoryLock))", logger: logger)
            let rows = try await connection.query("SELECT purpose, public_key FROM kt_keys", logger: logger)
            var recordedSigning: [[UInt8]] = []
            for try await (purpose, stored) in rows.decode((String, ByteBuffer).self) {
                let key = Array(stored.readableBytesView)
                if purpose == "signing" {
                    recordedSigning.append(key)
                } else if key != signer.vrf.publicKey {
                    throw WhisperError(.internalError, "GC_WORKER_KT_VRF_KEY is not the key this directory was started with (docs/key-transparency.md)")
                }
            }
            let now = Clock.millisecondsNow()
            var statements: [KeyStatement] = []
            for subject in signer.signingKeys {
                for endorser in signer.signingPairs where endorser.publicKey != subject {
                    statements.append(KeyStatement(kind: .endorse, publicKey: subject, at: now, by: endorser))
                }
            }
            for dropped in recordedSigning where !signer.signingKeys.contains(dropped) {
                statements.append(KeyStatement(kind: .retire, publicKey: dropped, at: now, by: signer.signing))
            }
            if !statements.isEmpty {
                // The first statement of its kind about a key by a signer stands: a retirement keeps its time.
                _ = try await connection.query(
                    """
                    INSERT INTO kt_key_statements (kind, public_key, signer_id, at, signature)
                    SELECT * FROM unnest(
                        \(statements.map(\.kind.rawValue))::text[], \(statements.map { ByteBuffer(bytes: $0.subjectKey ?? []) })::bytea[],
                        \(statements.map(\.by))::text[], \(statements.map(\.at))::bigint[],
                        \(statements.map { ByteBuffer(data: Data(base64Encoded: $0.signature) ?? Data()) })::bytea[]
                    )
                    ON CONFLICT (kind, public_key, signer_id) DO NOTHING
                    """,
                    logger: logger
                )
            }
            _ = try await connection.query("DELETE FROM kt_keys", logger: logger)
            let keys = [signer.vrf.publicKey] + signer.signingKeys
            let purposes = ["vrf"] + signer.signingKeys.map { _ in "signing" }
            let positions = [Int16(0)] + signer.signingKeys.indices.map(Int16.init)
            _ = try await connection.query(
                """
                INSERT INTO kt_keys (purpose, position, key_id, public_key)
                SELECT * FROM unnest(\(purposes)::text[], \(positions)::smallint[], \(keys.map(Ed25519.keyId))::text[], \(keys.map { ByteBuffer(bytes: $0) })::bytea[])
                """,
                logger: logger
            )
        }
    }

    /// What one call did.
    public struct Published: Sendable {
        public var head: DirectoryHead
        public var changes: Int
    }

    /// Publishes the next epoch when entries wait or the head is older than `headMaxAge`
    /// (or there is none); nil when there was nothing to do or another publisher was at it.
    public func publish() async throws -> Published? {
        try await postgres.withTransaction(logger: logger) { connection -> Published? in
            let locked = try await connection.query("SELECT pg_try_advisory_xact_lock(\(Self.advisoryLock))", logger: logger)
            for try await held in locked.decode(Bool.self) where !held { return nil }

            var previous: (head: DirectoryHead, depth: Int)?
            let heads = try await connection.query(
                "SELECT \(unescaped: DirectoryStore.headColumns), depth FROM kt_epochs ORDER BY epoch DESC LIMIT 1", logger: logger
            )
            for try await row in heads.decode((Int64, ByteBuffer, ByteBuffer, Int64, String, ByteBuffer, Int16).self) {
                previous = (DirectoryStore.head((row.0, row.1, row.2, row.3, row.4, row.5)), Int(row.6))
            }
            let waiting = try await self.waiting(on: connection)
            let now = Clock.millisecondsNow()
            if let previous, waiting.isEmpty, Double(now - previous.head.publishedAt) < headMaxAge.milliseconds { return nil }

            let epoch = (previous?.head.epoch ?? 0) + 1
            let changes = waiting.map { PrefixTree.Entry(label: $0.label, value: $0.value) }
            let update = try await PrefixTree.update(changes) { positions in
                try await DirectoryStore.nodes(positions, on: connection, logger: logger)
            }
            try await write(update.writes, on: connection)
            if !waiting.isEmpty {
                _ = try await connection.query(
                    """
                    INSERT INTO kt_leaves (whisper_id, label, vrf_proof, opening, epoch)
                    SELECT w, l, p, o, \(epoch) FROM unnest(
                        \(waiting.map(\.whisperId))::text[], \(waiting.map { ByteBuffer(bytes: $0.label) })::bytea[],
                        \(waiting.map { ByteBuffer(bytes: $0.vrfProof) })::bytea[], \(waiting.map { ByteBuffer(bytes: $0.opening) })::bytea[]
                    ) AS t(w, l, p, o)
                    ON CONFLICT (whisper_id) DO UPDATE SET opening = EXCLUDED.opening, epoch = EXCLUDED.epoch
                    """,
                    logger: logger
                )
                _ = try await connection.query(
                    "UPDATE users SET kt_epoch = \(epoch) WHERE whisper_id = ANY(\(waiting.map(\.whisperId))::text[])", logger: logger
                )
                _ = try await connection.query(
                    "UPDATE deleted_identities SET kt_epoch = \(epoch) WHERE whisper_id = ANY(\(waiting.map(\.whisperId))::text[])", logger: logger
                )
            }
            let logRoot = try await appendToLog(epoch: epoch, prefixRoot: update.root, publishedAt: now, on: connection)
            let signature = signer.signing.sign(DirectoryHead.signedBytes(epoch: epoch, logRoot: logRoot, prefixRoot: update.root, publishedAt: now))
            let head = DirectoryHead(epoch: epoch, logRoot: logRoot, prefixRoot: update.root, publishedAt: now, keyId: signer.signingId, signature: signature)
            let proof = try JSONEncoder().encode(EpochUpdate(head: head, changes: changes, oldLeaves: update.oldLeaves, witness: update.witness))
            _ = try await connection.query(
                """
                INSERT INTO kt_epochs (epoch, log_root, prefix_root, published_at, key_id, signature, depth, changes, update_proof)
                VALUES (\(epoch), \(ByteBuffer(bytes: logRoot)), \(ByteBuffer(bytes: update.root)), \(now), \(signer.signingId),
                        \(ByteBuffer(bytes: signature)), \(Int16(max(previous?.depth ?? 0, update.deepest))), \(Int32(changes.count)),
                        \(ByteBuffer(data: proof)))
                """,
                logger: logger
            )
            return Published(head: head, changes: changes.count)
        }
    }

    struct Waiting: Sendable {
        var whisperId: String
        var label: [UInt8]
        var vrfProof: [UInt8]
        var opening: [UInt8]
        /// The leaf's new value: a fresh commitment, or the label's tombstone.
        var value: [UInt8]
    }

    /// The entries to publish: identities not yet in an epoch, oldest first, locked for
    /// this transaction; each with its label (kept from an earlier epoch, else proven
    /// now) and its value (a fresh commitment, or for a deleted identity its tombstone).
    private func waiting(on connection: PostgresConnection) async throws -> [Waiting] {
        // Deletions first (their entries must say so soon), then new and changed identities.
        let deleted = try await connection.query(
            """
            SELECT d.whisper_id, NULL::bytea, NULL::bytea, l.label, l.vrf_proof
            FROM deleted_identities d LEFT JOIN LATERAL (
                SELECT label, vrf_proof FROM kt_leaves WHERE kt_leaves.whisper_id = d.whisper_id
            ) l ON true
            WHERE d.kt_epoch IS NULL ORDER BY d.deleted_at LIMIT \(batchSize)
            """,
            logger: logger
        )
        var rowsRead: [(String, ByteBuffer?, ByteBuffer?, ByteBuffer?, ByteBuffer?)] = []
        for try await row in deleted.decode((String, ByteBuffer?, ByteBuffer?, ByteBuffer?, ByteBuffer?).self) { rowsRead.append(row) }
        let rows = try await connection.query(
            """
            SELECT u.whisper_id, u.enc_public_key, u.sign_public_key, l.label, l.vrf_proof
            FROM users u LEFT JOIN LATERAL (
                SELECT label, vrf_proof FROM kt_leaves WHERE kt_leaves.whisper_id = u.whisper_id
            ) l ON true
            WHERE u.kt_epoch IS NULL ORDER BY u.created_at LIMIT \(batchSize - rowsRead.count) FOR UPDATE OF u
            """,
            logger: logger
        )
        for try await row in rows.decode((String, ByteBuffer?, ByteBuffer?, ByteBuffer?, ByteBuffer?).self) { rowsRead.append(row) }
        // Labels are proven on every core: a VRF proof is most of an entry's cost.
        let vrf = signer.vrf
        let chunks = stride(from: 0, to: rowsRead.count, by: 256).map { rowsRead[$0..<min($0 + 256, rowsRead.count)] }
        let waiting = try await withThrowingTaskGroup(of: (Int, [Waiting]).self) { group in
            for (index, chunk) in chunks.enumerated() {
                let chunk = Array(chunk)
                group.addTask {
                    var made: [Waiting] = []
                    for (whisperId, enc, sign, label, vrfProof) in chunk {
                        let proof = vrfProof.map { Array($0.readableBytesView) } ?? vrf.prove(KeyDirectory.vrfInput(whisperId))
                        guard let output = VRF.output(ofProof: proof) else { throw WhisperError(.internalError, "a VRF proof without an output") }
                        let label = label.map { Array($0.readableBytesView) } ?? KeyDirectory.label(vrfOutput: output)
                        let opening = SecureBytes.random(32)
                        // A deleted identity has no keys: its entry is its label's tombstone.
                        let state: KeyDirectory.KeyState = if let enc, let sign {
                            .active(encPublicKey: Array(enc.readableBytesView), signPublicKey: Array(sign.readableBytesView))
                        } else {
                            .deleted
                        }
                        made.append(Waiting(
                            whisperId: whisperId, label: label, vrfProof: proof, opening: opening,
                            value: KeyDirectory.value(label: label, opening: opening, whisperId: whisperId, state: state)
                        ))
                    }
                    return (index, made)
                }
            }
            var parts: [(Int, [Waiting])] = []
            for try await part in group { parts.append(part) }
            return parts.sorted { $0.0 < $1.0 }.flatMap(\.1)
        }
        return waiting
    }

    private func write(_ nodes: [PrefixTree.Position: PrefixTree.Node], on connection: PostgresConnection) async throws {
        guard !nodes.isEmpty else { return }
        let entries = Array(nodes)
        let none = ByteBuffer()
        _ = try await connection.query(
            """
            INSERT INTO kt_nodes (position, hash, leaf_label, leaf_value)
            SELECT p, h, NULLIF(l, ''::bytea), NULLIF(v, ''::bytea) FROM unnest(
                \(entries.map { ByteBuffer(bytes: $0.key.key) })::bytea[], \(entries.map { ByteBuffer(bytes: $0.value.hash) })::bytea[],
                \(entries.map { $0.value.leaf.map { ByteBuffer(bytes: $0.label) } ?? none })::bytea[],
                \(entries.map { $0.value.leaf.map { ByteBuffer(bytes: $0.value) } ?? none })::bytea[]
            ) AS t(p, h, l, v)
            ON CONFLICT (position) DO UPDATE SET hash = EXCLUDED.hash, leaf_label = EXCLUDED.leaf_label, leaf_value = EXCLUDED.leaf_value
            """,
            logger: logger
        )
    }

    /// Appends epoch `epoch`'s leaf to the log; returns the log's new root.
    private func appendToLog(epoch: Int64, prefixRoot: [UInt8], publishedAt: Int64, on connection: PostgresConnection) async throws -> [UInt8] {
        let index = Int(epoch - 1)
        let leaf = LogTree.leafHash(DirectoryHead.logLeaf(epoch: epoch, prefixRoot: prefixRoot, publishedAt: publishedAt))
        let left = LogTree.subtreesRead { lookup in _ = LogTree.completedSubtrees(byLeaf: leaf, at: index, subtree: lookup) }
        var stored = try await DirectoryStore.subtrees(left, on: connection, logger: logger)
        let missing = WhisperError(.internalError, "the key directory's log misses a subtree")
        let completed = try LogTree.completedSubtrees(byLeaf: leaf, at: index) { subtree in
            guard let hash = stored[subtree] else { throw missing }
            return hash
        }
        let subtrees = Array(completed)
        _ = try await connection.query(
            """
            INSERT INTO kt_log (level, index, hash)
            SELECT * FROM unnest(\(subtrees.map { Int16($0.key.level) })::smallint[], \(subtrees.map { Int64($0.key.index) })::bigint[],
                                 \(subtrees.map { ByteBuffer(bytes: $0.value) })::bytea[])
            """,
            logger: logger
        )
        stored.merge(completed) { $1 }
        let forRoot = LogTree.subtreesRead { lookup in _ = LogTree.root(of: 0..<index + 1, subtree: lookup) }.subtracting(stored.keys)
        stored.merge(try await DirectoryStore.subtrees(forRoot, on: connection, logger: logger)) { $1 }
        return try LogTree.root(of: 0..<index + 1) { subtree in
            guard let hash = stored[subtree] else { throw missing }
            return hash
        }
    }
}
