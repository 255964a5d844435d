import Crypto

/// The append-only log of the directory's epoch heads: a Merkle tree as RFC 9162 section
/// 2.1 has it (SHA-256, leaf `0x00 ‖ data`, inner `0x01 ‖ left ‖ right`, split at the largest
/// power of two below n), with consistency and inclusion proofs.
public enum LogTree {
    public typealias Hash = [UInt8]
    public static let hashBytes = 32

    public static func leafHash(_ data: [UInt8]) -> Hash {
        Array(SHA256.hash(data: [0x00] + data))
    }

    /// An inner node's hash.
    public static func nodeHash(_ left: Hash, _ right: Hash) -> Hash {
        Array(SHA256.hash(data: [0x01] + left + right))
    }

    /// The root of the leaves (their hashes), `MTH(D[n])`; the empty tree's is SHA-256 of nothing.
    public static func root(_ leaves: ArraySlice<Hash>) -> Hash {
        switch leaves.count {
        case 0: return Array(SHA256.hash(data: [UInt8]()))
        case 1: return leaves[leaves.startIndex]
        default:
            let k = split(leaves.count)
            return nodeHash(root(leaves.prefix(k)), root(leaves.dropFirst(k)))
        }
    }

    public static func root(_ leaves: [Hash]) -> Hash { root(leaves[...]) }

    /// The largest power of two below `n` (n ≥ 2).
    static func split(_ n: Int) -> Int {
        var k = 1
        while k << 1 < n { k <<= 1 }
        return k
    }

    // MARK: - Proofs, as the log makes them

    /// `PATH(m, D[n])`: the hashes that lead from leaf `index` to the root.
    public static func inclusionProof(_ index: Int, _ leaves: ArraySlice<Hash>) -> [Hash] {
        guard leaves.count > 1 else { return [] }
        let k = split(leaves.count)
        return index < k
            ? inclusionProof(index, leaves.prefix(k)) + [root(leaves.dropFirst(k))]
            : inclusionProof(index - k, leaves.dropFirst(k)) + [root(leaves.prefix(k))]
    }

    /// `PROOF(m, D[n])`: the hashes that show the tree of the first `size` leaves is a
    /// prefix of the tree of all of them.
    public static func consistencyProof(_ size: Int, _ leaves: ArraySlice<Hash>) -> [Hash] {
        guard size > 0, size < leaves.count else { return [] }
        return subproof(size, leaves, whole: true)
    }

    private static func subproof(_ m: Int, _ leaves: ArraySlice<Hash>, whole: Bool) -> [Hash] {
        if m == leaves.count { return whole ? [] : [root(leaves)] }
        let k = split(leaves.count)
        return m <= k
            ? subproof(m, leaves.prefix(k), whole: whole) + [root(leaves.dropFirst(k))]
            : subproof(m - k, leaves.dropFirst(k), whole: false) + [root(leaves.prefix(k))]
    }

    // MARK: - Checks, as a client makes them (RFC 9162 2.1.3.2 and 2.1.4.2)

    /// Whether `proof` shows the leaf `leaf` (its hash) at `index` in the tree of `size`
    /// leaves whose root is `root`.
    public static func verifyInclusion(leaf: Hash, index: Int, size: Int, proof: [Hash], root: Hash) -> Bool {
        guard index >= 0, index < size, proof.allSatisfy({ $0.count == hashBytes }) else { return false }
        var fn = index, sn = size - 1
        var r = leaf
        for p in proof {
            guard sn > 0 else { return false }
            if fn & 1 == 1 || fn == sn {
                r = nodeHash(p, r)
                climbPastLeftChildren(&fn, &sn)
            } else {
                r = nodeHash(r, p)
            }
            fn >>= 1
            sn >>= 1
        }
        return sn == 0 && r == root
    }

    /// The RFC's "right-shift both until LSB(fn) is set or fn is 0": past the levels
    /// where the node is a left child with no right sibling in the tree.
    private static func climbPastLeftChildren(_ fn: inout Int, _ sn: inout Int) {
        while fn & 1 == 0 && fn != 0 {
            fn >>= 1
            sn >>= 1
        }
    }

    /// Whether `proof` shows the tree of `oldSize` leaves with root `oldRoot` is a prefix
    /// of the tree of `newSize` leaves with root `newRoot`.
    public static func verifyConsistency(oldSize: Int, newSize: Int, oldRoot: Hash, newRoot: Hash, proof: [Hash]) -> Bool {
        guard oldSize > 0, oldSize <= newSize, proof.allSatisfy({ $0.count == hashBytes }) else { return false }
        if oldSize == newSize { return proof.isEmpty && oldRoot == newRoot }
        guard !proof.isEmpty else { return false }
        // A first tree that is a whole subtree is its own first hash.
        let path = oldSize & (oldSize - 1) == 0 ? [oldRoot] + proof : proof
        var fn = oldSize - 1, sn = newSize - 1
        while fn & 1 == 1 {
            fn >>= 1
            sn >>= 1
        }
        var fr = path[0], sr = path[0]
        for c in path.dropFirst() {
            guard sn > 0 else { return false }
            if fn & 1 == 1 || fn == sn {
                fr = nodeHash(c, fr)
                sr = nodeHash(c, sr)
                climbPastLeftChildren(&fn, &sn)
            } else {
                sr = nodeHash(sr, c)
            }
            fn >>= 1
            sn >>= 1
        }
        return sn == 0 && fr == oldRoot && sr == newRoot
    }

    // MARK: - From stored subtrees

    /// A perfect subtree of the log: leaves `index << level ..< (index + 1) << level`.
    /// A log that grows stores each one's root as it completes (two per leaf on average)
    /// and makes every root and proof from O(log n) of them.
    public struct Subtree: Hashable, Sendable {
        public let level: Int
        public let index: Int

        public init(level: Int, index: Int) {
            self.level = level
            self.index = index
        }
    }

    /// The root of leaves `range` (a range the RFC's recursion reaches from `0..<n`),
    /// from the roots of perfect subtrees.
    public static func root(of range: Range<Int>, subtree: (Subtree) throws -> Hash) rethrows -> Hash {
        let count = range.count
        if count == 0 { return root([Hash]()) }
        if count & (count - 1) == 0, range.lowerBound % count == 0 {
            let level = count.trailingZeroBitCount
            return try subtree(Subtree(level: level, index: range.lowerBound >> level))
        }
        let k = split(count)
        return nodeHash(
            try root(of: range.lowerBound..<range.lowerBound + k, subtree: subtree),
            try root(of: range.lowerBound + k..<range.upperBound, subtree: subtree)
        )
    }

    /// `PROOF(m, D[n])` from the roots of perfect subtrees.
    public static func consistencyProof(from m: Int, to n: Int, subtree: (Subtree) throws -> Hash) rethrows -> [Hash] {
        guard m > 0, m < n else { return [] }
        return try subproof(m, 0..<n, whole: true, subtree: subtree)
    }

    private static func subproof(_ m: Int, _ range: Range<Int>, whole: Bool, subtree: (Subtree) throws -> Hash) rethrows -> [Hash] {
        if m == range.count { return whole ? [] : [try root(of: range, subtree: subtree)] }
        let k = split(range.count)
        let (left, right) = (range.lowerBound..<range.lowerBound + k, range.lowerBound + k..<range.upperBound)
        return m <= k
            ? try subproof(m, left, whole: whole, subtree: subtree) + [root(of: right, subtree: subtree)]
            : try subproof(m - k, right, whole: false, subtree: subtree) + [root(of: left, subtree: subtree)]
    }

    /// The perfect subtrees that `compute` reads (run once with placeholders, to know what
    /// to fetch before running it for real).
    public static func subtreesRead(by compute: ((Subtree) -> Hash) -> Void) -> Set<Subtree> {
        var read: Set<Subtree> = []
        compute { read.insert($0); return [UInt8](repeating: 0, count: hashBytes) }
        return read
    }

    /// The perfect subtrees that leaf `index` (its hash `leaf`) completes, with their roots;
    /// `subtree` gives the stored ones to their left.
    public static func completedSubtrees(byLeaf leaf: Hash, at index: Int, subtree: (Subtree) throws -> Hash) rethrows -> [Subtree: Hash] {
        var completed = [Subtree(level: 0, index: index): leaf]
        var hash = leaf
        var level = 0, position = index
        while position & 1 == 1 {
            hash = nodeHash(try subtree(Subtree(level: level, index: position - 1)), hash)
            level += 1
            position >>= 1
            completed[Subtree(level: level, index: position)] = hash
        }
        return completed
    }
}
