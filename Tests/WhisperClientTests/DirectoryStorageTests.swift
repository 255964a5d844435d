import Crypto
import Testing
import WhisperProtocol

/// The directory's stored shapes agree with the whole-map definitions: a tree updated
/// epoch by epoch through stored nodes has the same root and proofs as one built at
/// once, its update proofs let an auditor recompute both roots, and the log's roots
/// and consistency proofs made from stored subtrees are the RFC's.
@Suite struct DirectoryStorageTests {
    static func bytes(_ seed: String) -> [UInt8] { Array(SHA256.hash(data: Array(seed.utf8))) }

    /// A stored tree in memory: the rows a publisher keeps in Postgres.
    final class Store: @unchecked Sendable {
        var nodes: [PrefixTree.Position: PrefixTree.Node] = [:]
        var reads = 0

        func fetch(_ positions: [PrefixTree.Position]) -> [PrefixTree.Position: PrefixTree.Node] {
            reads += 1
            var found: [PrefixTree.Position: PrefixTree.Node] = [:]
            for position in positions { found[position] = nodes[position] }
            return found
        }
    }

    @Test func epochsOfChangesThroughStoredNodesGiveTheWholeMapsTreeAndCheckableUpdates() async throws {
        let store = Store()
        var map: [[UInt8]: [UInt8]] = [:]
        var root = PrefixTree.empty
        var deepest = 0
        for epoch in 0..<12 {
            // New labels, and from the third epoch on a few new values of present ones.
            var changes = (0..<(epoch * 37 % 90 + 1)).map { PrefixTree.Entry(label: Self.bytes("label \(epoch) \($0)"), value: Self.bytes("value \(epoch) \($0)")) }
            if epoch >= 2 { changes += map.keys.sorted { $0.lexicographicallyPrecedes($1) }.prefix(3).map { PrefixTree.Entry(label: $0, value: Self.bytes("changed \(epoch) \($0)")) } }
            let update = try await PrefixTree.update(changes) { store.fetch($0) }
            for (position, node) in update.writes { store.nodes[position] = node }
            for change in changes { map[change.label] = change.value }
            let whole = map.map { PrefixTree.Entry(label: $0.key, value: $0.value) }
            #expect(update.root == PrefixTree.root(whole), "epoch \(epoch): the stored tree's root is the map's")

            // The auditor's check: the old root and the new one from the update proof alone.
            let oldRoot = try PrefixTree.root(entries: update.oldLeaves, witness: update.witness)
            #expect(oldRoot == root)
            var after = Dictionary(uniqueKeysWithValues: update.oldLeaves.map { ($0.label, $0.value) })
            for change in changes { after[change.label] = change.value }
            #expect(try PrefixTree.root(entries: after.map { PrefixTree.Entry(label: $0.key, value: $0.value) }, witness: update.witness) == update.root)
            // A change left out of the proof, or a value changed, gives another root.
            if changes.count > 1 {
                var fewer = after
                fewer[changes[0].label] = nil
                if update.oldLeaves.contains(where: { $0.label == changes[0].label }) == false {
                    #expect(try PrefixTree.root(entries: fewer.map { PrefixTree.Entry(label: $0.key, value: $0.value) }, witness: update.witness) != update.root)
                }
            }
            root = update.root
            deepest = max(deepest, update.deepest)
        }
        // Every label proves its value from the stored path nodes alone, absent ones their absence.
        for (label, value) in map {
            var path: [PrefixTree.Position: PrefixTree.Node] = [:]
            for position in PrefixTree.pathPositions(for: label, depth: deepest) { path[position] = store.nodes[position] }
            let proof = PrefixTree.proof(for: label, nodes: path)
            #expect(try PrefixTree.verify(label: label, proof: proof, root: root) == value)
        }
        for index in 0..<50 {
            let absent = Self.bytes("absent \(index)")
            var path: [PrefixTree.Position: PrefixTree.Node] = [:]
            for position in PrefixTree.pathPositions(for: absent, depth: deepest) { path[position] = store.nodes[position] }
            #expect(try PrefixTree.verify(label: absent, proof: PrefixTree.proof(for: absent, nodes: path), root: root) == nil)
        }
    }

    @Test func aWitnessThatHidesAChangedLabelIsRefused() async throws {
        let store = Store()
        let first = (0..<40).map { PrefixTree.Entry(label: Self.bytes("a \($0)"), value: Self.bytes("v \($0)")) }
        for (position, node) in try await PrefixTree.update(first) { store.fetch($0) }.writes { store.nodes[position] = node }
        // A changed present label whose old leaf is left out: it lies inside a witnessed subtree.
        let change = PrefixTree.Entry(label: first[5].label, value: Self.bytes("new"))
        let update = try await PrefixTree.update([change]) { store.fetch($0) }
        #expect(update.oldLeaves.map(\.label) == [change.label])
        var witness = update.witness
        let sibling = try #require(witness.keys.max { $0.depth < $1.depth })
        witness[sibling] = nil
        #expect(try PrefixTree.root(entries: update.oldLeaves, witness: witness) != PrefixTree.root(first))
        // A position that is not one is refused when read.
        #expect(PrefixTree.Position(key: [0, 3, 0xFF]) == nil)
        #expect(PrefixTree.Position(key: [0, 3, 0xE0]) != nil)
    }

    @Test func theLogFromStoredSubtreesIsTheRFCsLog() {
        let leaves = (0..<70).map { LogTree.leafHash(Array("epoch \($0)".utf8)) }
        var stored: [LogTree.Subtree: LogTree.Hash] = [:]
        for index in leaves.indices {
            let completed = LogTree.completedSubtrees(byLeaf: leaves[index], at: index) { stored[$0]! }
            stored.merge(completed) { $1 }
            let size = index + 1
            #expect(LogTree.root(of: 0..<size) { stored[$0]! } == LogTree.root(leaves[..<size]))
        }
        #expect(stored.count < 2 * leaves.count, "about two stored subtrees per leaf")
        for new in 1...leaves.count {
            for old in 1...new {
                let proof = LogTree.consistencyProof(from: old, to: new) { stored[$0]! }
                #expect(proof == LogTree.consistencyProof(old, leaves[..<new]))
                let read = LogTree.subtreesRead { lookup in _ = LogTree.consistencyProof(from: old, to: new, subtree: lookup) }
                #expect(read.count <= 2 * 7 * 7, "O(log² n) subtrees read")
            }
        }
    }

    /// A head's time is the server's to choose: its age never traps, whatever it says.
    @Test func aHeadsAgeSaturatesInsteadOfTrapping() {
        #expect(DirectoryHead.age(publishedAt: 1_000, now: 4_000) == 3_000)
        #expect(DirectoryHead.age(publishedAt: 5_000, now: 4_000) == -1_000)
        #expect(DirectoryHead.age(publishedAt: .min, now: 4_000) == .max)
        #expect(DirectoryHead.age(publishedAt: .max, now: -4_000) == .min)
    }
}
