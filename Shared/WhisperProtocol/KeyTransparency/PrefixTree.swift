import Crypto

/// One epoch's map of the key directory: a binary prefix tree over 32-byte labels (VRF
/// outputs) with 32-byte values (key-state commitments), a leaf where its label's bits part
/// from all others. SHA-256: leaf `0x00 ‖ label ‖ value`, inner `0x01 ‖ left ‖ right`, an
/// empty subtree 32 zero bytes (docs/key-transparency.md, "The prefix tree (one per epoch)").
public enum PrefixTree {
    public typealias Hash = [UInt8]
    public static let labelBytes = 32
    public static let empty: Hash = [UInt8](repeating: 0, count: 32)

    public struct Entry: Sendable, Equatable {
        public var label: [UInt8]
        public var value: [UInt8]

        public init(label: [UInt8], value: [UInt8]) {
            self.label = label
            self.value = value
        }
    }

    /// A proof for one label: the sibling hashes from the root down, and what ends the
    /// path: the label's own leaf (its value), another label's leaf (the label is
    /// absent), or an empty subtree (absent).
    public struct Proof: Sendable, Equatable {
        public enum End: Sendable, Equatable {
            case found(value: [UInt8])
            case otherLeaf(label: [UInt8], value: [UInt8])
            case empty
        }

        public var siblings: [Hash]
        public var end: End

        public init(siblings: [Hash], end: End) {
            self.siblings = siblings
            self.end = end
        }
    }

    public static func leafHash(label: [UInt8], value: [UInt8]) -> Hash {
        Array(SHA256.hash(data: [0x00] + label + value))
    }

    static func nodeHash(_ left: Hash, _ right: Hash) -> Hash {
        Array(SHA256.hash(data: [0x01] + left + right))
    }

    /// The label's bit at `depth` (0 is the first byte's highest bit).
    static func bit(_ label: [UInt8], _ depth: Int) -> Int {
        Int(label[depth >> 3] >> (7 - UInt8(depth & 7))) & 1
    }

    // MARK: - As the directory makes them

    /// The root of `entries` (labels distinct, each 32 bytes).
    public static func root(_ entries: [Entry]) -> Hash {
        root(entries.sorted { $0.label.lexicographicallyPrecedes($1.label) }[...], depth: 0)
    }

    /// `sorted` by label: the labels of a subtree are then one run, split at one index.
    static func root(_ sorted: ArraySlice<Entry>, depth: Int) -> Hash {
        switch sorted.count {
        case 0: return empty
        case 1: return leafHash(label: sorted[sorted.startIndex].label, value: sorted[sorted.startIndex].value)
        default:
            let split = sorted.firstIndex { bit($0.label, depth) == 1 } ?? sorted.endIndex
            return nodeHash(root(sorted[..<split], depth: depth + 1), root(sorted[split...], depth: depth + 1))
        }
    }

    /// The proof for `label` in the tree of `entries`.
    public static func proof(for label: [UInt8], in entries: [Entry]) -> Proof {
        var subtree = entries.sorted { $0.label.lexicographicallyPrecedes($1.label) }[...]
        var siblings: [Hash] = []
        var depth = 0
        while subtree.count > 1 {
            let split = subtree.firstIndex { bit($0.label, depth) == 1 } ?? subtree.endIndex
            let (left, right) = (subtree[..<split], subtree[split...])
            if bit(label, depth) == 0 {
                siblings.append(root(right, depth: depth + 1))
                subtree = left
            } else {
                siblings.append(root(left, depth: depth + 1))
                subtree = right
            }
            depth += 1
        }
        guard let last = subtree.first else { return Proof(siblings: siblings, end: .empty) }
        return Proof(siblings: siblings, end: last.label == label ? .found(value: last.value) : .otherLeaf(label: last.label, value: last.value))
    }

    // MARK: - As a client checks them

    /// What the proof says of `label` under `root`: its value, nil for absent; throws
    /// when the proof does not lead to the root or is not well formed.
    public static func verify(label: [UInt8], proof: Proof, root: Hash) throws(ProofError) -> [UInt8]? {
        guard label.count == labelBytes, root.count == 32, proof.siblings.count <= labelBytes * 8,
              proof.siblings.allSatisfy({ $0.count == 32 }) else { throw .malformed }
        let depth = proof.siblings.count
        var hash: Hash
        var value: [UInt8]?
        switch proof.end {
        case .found(let found):
            hash = leafHash(label: label, value: found)
            value = found
        case .otherLeaf(let other, let otherValue):
            // Another label's leaf stands where this one would: it must share the path
            // so far and be another label.
            guard other.count == labelBytes, other != label, (0..<depth).allSatisfy({ bit(other, $0) == bit(label, $0) }) else { throw .malformed }
            hash = leafHash(label: other, value: otherValue)
        case .empty:
            hash = empty
        }
        for level in stride(from: depth - 1, through: 0, by: -1) {
            let sibling = proof.siblings[level]
            hash = bit(label, level) == 0 ? nodeHash(hash, sibling) : nodeHash(sibling, hash)
        }
        guard hash == root else { throw .rootMismatch }
        return value
    }

    public enum ProofError: Error, Equatable {
        case malformed
        case rootMismatch
    }
}
