import Crypto
import Testing
import WhisperProtocol

/// The directory's per-epoch map: every label present proves its value, every label
/// absent proves its absence, and no proof with anything changed passes.
@Suite struct PrefixTreeTests {
    static func label(_ seed: String) -> [UInt8] { Array(SHA256.hash(data: Array(seed.utf8))) }

    static let entries = (0..<300).map { PrefixTree.Entry(label: label("present \($0)"), value: label("value \($0)")) }

    @Test func everyLabelProvesItsValueOrItsAbsence() throws {
        let root = PrefixTree.root(Self.entries)
        #expect(root == PrefixTree.root(Self.entries.reversed()), "the root depends on the map, not on the order")
        for entry in Self.entries {
            let proof = PrefixTree.proof(for: entry.label, in: Self.entries)
            #expect(try PrefixTree.verify(label: entry.label, proof: proof, root: root) == entry.value)
            #expect(proof.siblings.count < 24, "a path of \(proof.siblings.count) among 300 labels")
        }
        var ends = Set<String>()
        for index in 0..<300 {
            let absent = Self.label("absent \(index)")
            let proof = PrefixTree.proof(for: absent, in: Self.entries)
            #expect(try PrefixTree.verify(label: absent, proof: proof, root: root) == nil)
            switch proof.end {
            case .found: Issue.record("an absent label found")
            case .otherLeaf: ends.insert("other")
            case .empty: ends.insert("empty")
            }
        }
        #expect(ends == ["other", "empty"], "both ways of being absent are exercised")
    }

    @Test func smallTrees() throws {
        let one = [Self.entries[0]]
        #expect(PrefixTree.root([]) == PrefixTree.empty)
        #expect(try PrefixTree.verify(label: Self.entries[1].label, proof: PrefixTree.proof(for: Self.entries[1].label, in: []), root: PrefixTree.empty) == nil)
        let root = PrefixTree.root(one)
        #expect(root == PrefixTree.leafHash(label: one[0].label, value: one[0].value))
        #expect(try PrefixTree.verify(label: one[0].label, proof: PrefixTree.proof(for: one[0].label, in: one), root: root) == one[0].value)
        #expect(try PrefixTree.verify(label: Self.entries[1].label, proof: PrefixTree.proof(for: Self.entries[1].label, in: one), root: root) == nil)
    }

    @Test func noChangedProofPasses() throws {
        let root = PrefixTree.root(Self.entries)
        let entry = Self.entries[17]
        let proof = PrefixTree.proof(for: entry.label, in: Self.entries)
        // Another value for a present label, or the label said absent.
        var lying = proof
        lying.end = .found(value: Self.label("another key"))
        #expect(throws: PrefixTree.ProofError.rootMismatch) { try PrefixTree.verify(label: entry.label, proof: lying, root: root) }
        lying.end = .empty
        #expect(throws: PrefixTree.ProofError.rootMismatch) { try PrefixTree.verify(label: entry.label, proof: lying, root: root) }
        // Any sibling changed, or one left out.
        for level in proof.siblings.indices {
            var bent = proof
            bent.siblings[level][0] ^= 1
            #expect(throws: PrefixTree.ProofError.rootMismatch) { try PrefixTree.verify(label: entry.label, proof: bent, root: root) }
        }
        var short = proof
        short.siblings.removeLast()
        #expect(throws: PrefixTree.ProofError.self) { try PrefixTree.verify(label: entry.label, proof: short, root: root) }
        // Another label's proof offered for this one.
        #expect(throws: PrefixTree.ProofError.self) { try PrefixTree.verify(label: Self.entries[18].label, proof: proof, root: root) }
        // An absent label "shown" by a leaf that does not share its path.
        let absent = Self.label("absent 0")
        var misplaced = PrefixTree.proof(for: absent, in: Self.entries)
        let stranger = Self.entries.first { PrefixTree.Entry.sharesFirstBit($0.label, absent) == false }!
        misplaced.end = .otherLeaf(label: stranger.label, value: stranger.value)
        #expect(throws: PrefixTree.ProofError.self) { try PrefixTree.verify(label: absent, proof: misplaced, root: root) }
    }
}

extension PrefixTree.Entry {
    static func sharesFirstBit(_ a: [UInt8], _ b: [UInt8]) -> Bool { a[0] >> 7 == b[0] >> 7 }
}
