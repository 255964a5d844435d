/// The prefix tree as stored: a row per node of the newest tree, by position. An epoch's
/// update reads only its labels' paths (``PrefixTree/update(_:fetch:)``), and that reading
/// is the epoch's update proof, from which an auditor recomputes both roots.
extension PrefixTree {
    /// A node's place: its depth and the first `depth` bits of the labels under it
    /// (packed from the first byte's highest bit, unused bits zero).
    public struct Position: Hashable, Sendable {
        public let depth: Int
        public let prefix: [UInt8]

        public static let root = Position(depth: 0, prefix: [])

        /// The position `depth` bits down `label`'s path.
        public init(label: [UInt8], depth: Int) {
            var prefix = Array(label.prefix((depth + 7) / 8))
            if depth % 8 != 0 { prefix[prefix.count - 1] &= UInt8(truncatingIfNeeded: 0xFF << (8 - depth % 8)) }
            self.depth = depth
            self.prefix = prefix
        }

        init(depth: Int, prefix: [UInt8]) {
            self.depth = depth
            self.prefix = prefix
        }

        /// The child on side `bit` (0 left, 1 right).
        public func child(_ bit: Int) -> Position {
            var prefix = self.prefix
            if depth % 8 == 0 { prefix.append(0) }
            if bit == 1 { prefix[prefix.count - 1] |= UInt8(0x80) >> UInt8(depth % 8) }
            return Position(depth: depth + 1, prefix: prefix)
        }

        /// The sibling of this position (nil for the root).
        public var sibling: Position? {
            guard depth > 0 else { return nil }
            var prefix = self.prefix
            prefix[prefix.count - 1] ^= UInt8(0x80) >> UInt8((depth - 1) % 8)
            return Position(depth: depth, prefix: prefix)
        }

        /// The stored key: the depth in two bytes (big-endian), then the prefix.
        public var key: [UInt8] { [UInt8(depth >> 8), UInt8(depth & 0xFF)] + prefix }

        /// A position from its key; nil when the key is not one.
        public init?(key: [UInt8]) {
            guard key.count >= 2 else { return nil }
            let depth = Int(key[0]) << 8 | Int(key[1])
            let prefix = Array(key.dropFirst(2))
            guard depth <= labelBytes * 8, prefix.count == (depth + 7) / 8 else { return nil }
            let canonical = Position(label: prefix + [UInt8](repeating: 0, count: labelBytes - prefix.count), depth: depth)
            guard canonical.prefix == prefix else { return nil }
            self.init(depth: depth, prefix: prefix)
        }

        /// The prefix padded with zero bits to a label's length: sorts and splits as labels do.
        var padded: [UInt8] { prefix + [UInt8](repeating: 0, count: labelBytes - prefix.count) }
    }

    /// A stored node: its hash, and for a leaf its label and value.
    public struct Node: Sendable, Equatable {
        public var hash: Hash
        public var leaf: Entry?

        public init(hash: Hash, leaf: Entry?) {
            self.hash = hash
            self.leaf = leaf
        }

        public static func leaf(_ entry: Entry) -> Node {
            Node(hash: leafHash(label: entry.label, value: entry.value), leaf: entry)
        }
    }

    /// What an epoch's changes do to the stored tree.
    public struct Update: Sendable {
        /// The new root.
        public var root: Hash
        /// The nodes to store (new ones and changed ones; none goes away).
        public var writes: [Position: Node]
        /// The update proof: the hashes of the untouched subtrees beside the changed paths
        /// (each nonempty) ...
        public var witness: [Position: Hash]
        /// ... and the leaves those paths ended at before the change.
        public var oldLeaves: [Entry]
        /// The depth of the deepest node written.
        public var deepest: Int
    }

    /// Applies `changes` (distinct labels: new ones, or new values of present ones) to the
    /// stored tree, reading it through `fetch` (the stored nodes among the positions
    /// asked; a position left out is empty), one call per level of the deepest path.
    public static func update(
        _ changes: [Entry], fetch: ([Position]) async throws -> [Position: Node]
    ) async throws -> Update {
        let sorted = changes.sorted { $0.label.lexicographicallyPrecedes($1.label) }
        var known: [Position: Node] = [:]
        var frontier: [(Position, ArraySlice<Entry>)] = [(.root, sorted[...])]
        var asking: [Position] = [.root]
        while !asking.isEmpty {
            for (position, node) in try await fetch(asking) { known[position] = node }
            var next: [(Position, ArraySlice<Entry>)] = []
            asking = []
            for (position, entries) in frontier {
                guard let node = known[position], node.leaf == nil else { continue }
                let (left, right) = split(entries, at: position.depth)
                for (side, part) in [(0, left), (1, right)] {
                    let child = position.child(side)
                    asking.append(child)
                    if !part.isEmpty { next.append((child, part)) }
                }
            }
            frontier = next
        }
        var update = Update(root: empty, writes: [:], witness: [:], oldLeaves: [], deepest: 0)
        update.root = apply(sorted[...], at: .root, known: known, into: &update)
        return update
    }

    /// The new hash of the subtree at `position`, `entries` its changes (nonempty).
    private static func apply(_ entries: ArraySlice<Entry>, at position: Position, known: [Position: Node], into update: inout Update) -> Hash {
        guard let node = known[position] else { return build(entries, at: position, into: &update) }
        if let leaf = node.leaf {
            update.oldLeaves.append(leaf)
            if entries.contains(where: { $0.label == leaf.label }) { return build(entries, at: position, into: &update) }
            var merged = Array(entries)
            merged.append(leaf)
            merged.sort { $0.label.lexicographicallyPrecedes($1.label) }
            return build(merged[...], at: position, into: &update)
        }
        let (left, right) = split(entries, at: position.depth)
        var hashes: [Hash] = []
        for (side, part) in [(0, left), (1, right)] {
            let child = position.child(side)
            if part.isEmpty {
                let hash = known[child]?.hash ?? empty
                if hash != empty { update.witness[child] = hash }
                hashes.append(hash)
            } else {
                hashes.append(apply(part, at: child, known: known, into: &update))
            }
        }
        let hash = nodeHash(hashes[0], hashes[1])
        update.writes[position] = Node(hash: hash, leaf: nil)
        return hash
    }

    /// A subtree that was empty (or one leaf, merged into `entries`), built from `entries`.
    private static func build(_ entries: ArraySlice<Entry>, at position: Position, into update: inout Update) -> Hash {
        switch entries.count {
        case 0: return empty
        case 1:
            let node = Node.leaf(entries[entries.startIndex])
            update.writes[position] = node
            update.deepest = max(update.deepest, position.depth)
            return node.hash
        default:
            let (left, right) = split(entries, at: position.depth)
            let hash = nodeHash(build(left, at: position.child(0), into: &update), build(right, at: position.child(1), into: &update))
            update.writes[position] = Node(hash: hash, leaf: nil)
            return hash
        }
    }

    static func split(_ sorted: ArraySlice<Entry>, at depth: Int) -> (ArraySlice<Entry>, ArraySlice<Entry>) {
        let index = sorted.firstIndex { bit($0.label, depth) == 1 } ?? sorted.endIndex
        return (sorted[..<index], sorted[index...])
    }

    /// The positions a lookup reads for `label` in a tree no deeper than `depth`: the
    /// path's nodes and their siblings.
    public static func pathPositions(for label: [UInt8], depth: Int) -> [Position] {
        var positions: [Position] = []
        for level in 0...min(depth, labelBytes * 8) {
            let position = Position(label: label, depth: level)
            positions.append(position)
            if let sibling = position.sibling { positions.append(sibling) }
        }
        return positions
    }

    /// The proof for `label` from the stored nodes of its path (``pathPositions(for:depth:)``
    /// down to the tree's deepest node).
    public static func proof(for label: [UInt8], nodes: [Position: Node]) -> Proof {
        proof(for: label) { nodes[$0] }
    }

    /// The same, with the nodes found by `node` (a lookup that reads two stores).
    public static func proof(for label: [UInt8], node: (Position) -> Node?) -> Proof {
        var siblings: [Hash] = []
        var position = Position.root
        while let found = node(position), position.depth < labelBytes * 8 {
            if let leaf = found.leaf {
                return Proof(siblings: siblings, end: leaf.label == label ? .found(value: leaf.value) : .otherLeaf(label: leaf.label, value: leaf.value))
            }
            let side = bit(label, position.depth)
            siblings.append(node(position.child(1 - side))?.hash ?? empty)
            position = position.child(side)
        }
        return Proof(siblings: siblings, end: .empty)
    }

    // MARK: - As an auditor checks an update

    /// The root of a tree known only by `entries` (leaves) and `witness` (the hashes of
    /// the other nonempty subtrees, by position); throws `.malformed` when the two do not
    /// describe one tree (a leaf inside a witnessed subtree, labels repeated).
    public static func root(entries: [Entry], witness: [Position: Hash]) throws(ProofError) -> Hash {
        guard entries.allSatisfy({ $0.label.count == labelBytes && $0.value.count == 32 }),
              witness.allSatisfy({ $0.value.count == 32 && $0.value != empty }),
              Set(entries.map(\.label)).count == entries.count else { throw .malformed }
        let sortedEntries = entries.sorted { $0.label.lexicographicallyPrecedes($1.label) }
        let sortedWitness = witness.map { (position: $0.key, hash: $0.value) }.sorted { $0.position.padded.lexicographicallyPrecedes($1.position.padded) }
        return try root(sortedEntries[...], sortedWitness[...], at: .root)
    }

    private static func root(
        _ entries: ArraySlice<Entry>, _ witness: ArraySlice<(position: Position, hash: Hash)>, at position: Position
    ) throws(ProofError) -> Hash {
        if let first = witness.first, first.position == position {
            guard entries.isEmpty, witness.count == 1 else { throw .malformed }
            return first.hash
        }
        guard witness.allSatisfy({ $0.position.depth > position.depth }) else { throw .malformed }
        if witness.isEmpty {
            switch entries.count {
            case 0: return empty
            case 1: return leafHash(label: entries[entries.startIndex].label, value: entries[entries.startIndex].value)
            default: break
            }
        }
        guard position.depth < labelBytes * 8 else { throw .malformed }
        let (left, right) = split(entries, at: position.depth)
        let witnessSplit = witness.firstIndex { bit($0.position.padded, position.depth) == 1 } ?? witness.endIndex
        return nodeHash(
            try root(left, witness[..<witnessSplit], at: position.child(0)),
            try root(right, witness[witnessSplit...], at: position.child(1))
        )
    }
}
