import Crypto
import Foundation

/// The key directory's rules that both sides apply: how a Whisper ID becomes a label,
/// what a leaf's value commits to, what an epoch's head signs and adds to the log, and
/// the checks a client makes of a lookup's proof (docs/key-transparency.md).
public enum KeyDirectory {
    /// The VRF input for a Whisper ID: its UTF-8 bytes after a fixed prefix.
    public static func vrfInput(_ whisperId: String) -> [UInt8] {
        Array("whisper-kt-label-v1\n\(whisperId)".utf8)
    }

    /// The tree label: the first 32 bytes of the VRF output.
    public static func label(vrfOutput: [UInt8]) -> [UInt8] {
        Array(vrfOutput.prefix(PrefixTree.labelBytes))
    }

    /// What an identity's entry says: its public keys, or that it was deleted.
    public enum KeyState: Sendable, Equatable {
        case active(encPublicKey: [UInt8], signPublicKey: [UInt8])
        case deleted
    }

    /// A leaf's value for an entry in `state`: an active entry's hiding commitment to its
    /// keys, or a deleted entry's public tombstone.
    public static func value(label: [UInt8], opening: [UInt8], whisperId: String, state: KeyState) -> [UInt8] {
        switch state {
        case .active(let enc, let sign): commitment(opening: opening, whisperId: whisperId, encPublicKey: enc, signPublicKey: sign)
        case .deleted: tombstone(label: label)
        }
    }

    /// An active entry's value: `HMAC-SHA-256(key: opening, "whisper-kt-commit-v1\n" ‖ whisperId ‖ "\n" ‖ 0x01 ‖ encPublicKey ‖ signPublicKey)`.
    /// The opening is 32 random bytes kept by the directory and given with each lookup
    /// of that ID, so the value says nothing to anyone without it.
    public static func commitment(opening: [UInt8], whisperId: String, encPublicKey: [UInt8], signPublicKey: [UInt8]) -> [UInt8] {
        let message = Array("whisper-kt-commit-v1\n\(whisperId)\n".utf8) + [0x01] + encPublicKey + signPublicKey
        return Array(HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: opening)))
    }

    /// A deleted entry's value: `SHA-256("whisper-kt-tombstone-v1\n" ‖ label)`. Anyone
    /// computes it from the label alone, so an auditor tells a deletion (the one change an
    /// entry may have: keys never change) from a substitution without the owner's help.
    public static func tombstone(label: [UInt8]) -> [UInt8] {
        Array(SHA256.hash(data: Array("whisper-kt-tombstone-v1\n".utf8) + label))
    }

    /// The longest a directory goes without publishing an epoch: its publisher writes
    /// one at least this often, with or without changes (`GC_WORKER_KT_HEAD_MAX_AGE_SECONDS`
    /// may be set lower, never higher), so a head's age says whether a view is frozen.
    public static let longestEpochInterval: Duration = .seconds(3_600)

    /// A head published longer ago than this is stale (``KeyTransparencyError/staleHead(epoch:publishedAt:)``):
    /// twice the longest interval between epochs, plus 10 minutes for clocks that differ.
    public static let staleHeadAge: Duration = longestEpochInterval * 2 + .seconds(600)

    static func bigEndian(_ value: Int64) -> [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) }
    }
}

/// The signed head of one epoch: the log of epochs up to and including it (its size is
/// the epoch number) and this epoch's prefix tree root.
public struct DirectoryHead: Codable, Sendable, Equatable, Hashable {
    public var epoch: Int64
    /// RFC 9162 root of the log's `epoch` leaves, base64.
    public var logRoot: String
    /// This epoch's prefix tree root, base64.
    public var prefixRoot: String
    /// When the epoch was published (ms since 1970).
    public var publishedAt: Int64
    /// The signing key's ID (``Ed25519/keyId(_:)``).
    public var keyId: String
    /// Ed25519 over ``signedBytes``, base64.
    public var signature: String

    public init(epoch: Int64, logRoot: [UInt8], prefixRoot: [UInt8], publishedAt: Int64, keyId: String, signature: [UInt8]) {
        self.epoch = epoch
        self.logRoot = Data(logRoot).base64EncodedString()
        self.prefixRoot = Data(prefixRoot).base64EncodedString()
        self.publishedAt = publishedAt
        self.keyId = keyId
        self.signature = Data(signature).base64EncodedString()
    }

    public var logRootBytes: [UInt8]? { Self.bytes(logRoot, 32) }
    public var prefixRootBytes: [UInt8]? { Self.bytes(prefixRoot, 32) }

    /// How long ago the head was published (ms; negative for a head from the future).
    /// `publishedAt` is the server's to choose, so no value of it may trap: past Int64's
    /// range the age is the bound on that side.
    public func age(now: Int64 = Clock.millisecondsNow()) -> Int64 {
        Self.age(publishedAt: publishedAt, now: now)
    }

    /// The age of a head published at `publishedAt` (``age(now:)``).
    public static func age(publishedAt: Int64, now: Int64 = Clock.millisecondsNow()) -> Int64 {
        let (age, overflow) = now.subtractingReportingOverflow(publishedAt)
        return overflow ? (publishedAt < 0 ? .max : .min) : age
    }

    /// `"whisper-kt-head-v1\n" ‖ epoch (8 bytes, big-endian) ‖ logRoot ‖ prefixRoot ‖ publishedAt (8 bytes)`.
    public static func signedBytes(epoch: Int64, logRoot: [UInt8], prefixRoot: [UInt8], publishedAt: Int64) -> [UInt8] {
        Array("whisper-kt-head-v1\n".utf8) + KeyDirectory.bigEndian(epoch) + logRoot + prefixRoot + KeyDirectory.bigEndian(publishedAt)
    }

    /// The log leaf an epoch adds: `"whisper-kt-epoch-v1\n" ‖ epoch ‖ prefixRoot ‖ publishedAt`
    /// (the log leaf's hash is RFC 9162's `SHA-256(0x00 ‖ these bytes)`).
    public static func logLeaf(epoch: Int64, prefixRoot: [UInt8], publishedAt: Int64) -> [UInt8] {
        Array("whisper-kt-epoch-v1\n".utf8) + KeyDirectory.bigEndian(epoch) + prefixRoot + KeyDirectory.bigEndian(publishedAt)
    }

    /// Whether one of `keys` signed this head (a key retired before the head's time
    /// signs nothing: ``DirectoryKeys/retiredAt(_:)``).
    public func isSigned(by keys: DirectoryKeys) -> Bool {
        guard epoch > 0, let logRoot = logRootBytes, let prefixRoot = prefixRootBytes,
              let signature = Self.bytes(self.signature, 64), let key = keys.signingKey(keyId) else { return false }
        if let retired = keys.retiredAt(keyId), publishedAt >= retired { return false }
        return Ed25519.verify(
            signature: signature, message: Self.signedBytes(epoch: epoch, logRoot: logRoot, prefixRoot: prefixRoot, publishedAt: publishedAt),
            publicKey: key
        )
    }

    static func bytes(_ base64: String, _ count: Int) -> [UInt8]? {
        guard let data = Data(base64Encoded: base64), data.count == count else { return nil }
        return Array(data)
    }

    /// The head's shape, as a message carrying it must have it (whether the directory
    /// signed it is the recipient's check: the server does not hold the directory's view).
    func validate(_ check: Checker) throws(FieldViolation) {
        try check.require(epoch >= 1 && Format.isTimestamp(epoch), "directoryHead.epoch", "must be a positive integer")
        try check.base64(logRoot, "directoryHead.logRoot", bytes: 32)
        try check.base64(prefixRoot, "directoryHead.prefixRoot", bytes: 32)
        try check.timestamp(publishedAt, "directoryHead.publishedAt")
        try check.require(
            keyId.utf8.count == 16 && keyId.utf8.allSatisfy { Format.isHex($0) && !(UInt8(ascii: "A")...UInt8(ascii: "F")).contains($0) },
            "directoryHead.keyId", "must be 16 lower-case hex digits"
        )
        try check.base64(signature, "directoryHead.signature", bytes: 64)
    }
}

/// The directory's public keys (`GET /kt/keys`): its VRF key, fixed for the directory's
/// life, the keys heads may be signed with (the signing one first; older ones stay
/// listed so that heads they signed still check), and the statements by which its keys
/// announced each other and retired (``KeyStatement``). A client that holds keys adds
/// a listed key only through a statement one of them signed (``learning(from:)``).
public struct DirectoryKeys: Codable, Sendable, Equatable {
    public typealias SigningKey = ListedKey

    public var vrfPublicKey: String
    public var signingKeys: [SigningKey]
    /// Endorsements and retirements (absent when there are none).
    public var statements: [KeyStatement]?

    public init(vrfPublicKey: [UInt8], signingKeys: [[UInt8]], statements: [KeyStatement]? = nil) {
        self.vrfPublicKey = Data(vrfPublicKey).base64EncodedString()
        self.signingKeys = signingKeys.map { ListedKey(publicKey: $0) }
        self.statements = statements
    }

    public var vrfPublicKeyBytes: [UInt8]? { DirectoryHead.bytes(vrfPublicKey, VRF.publicKeyBytes) }

    /// The listed key with this ID, when its ID is the key's own.
    public func signingKey(_ keyId: String) -> [UInt8]? {
        signingKeys.publicKey(keyId)
    }

    /// When the key `keyId` was retired (ms since 1970): it signs no head published from then on.
    public func retiredAt(_ keyId: String) -> Int64? {
        (statements ?? []).filter { $0.kind == .retire && $0.keyId == keyId }.map(\.at).min()
    }

    /// The keys a client takes at first contact (trust on first use): the listed signing
    /// keys, and the statements one of them signed.
    public func firstUse() -> DirectoryKeys {
        var taken = self
        taken.statements = nil
        return taken.learning(from: self)
    }

    /// These keys with what `listed` announces through statements they signed: a key
    /// another held key endorsed is added (and, in turn, what it signed is read), a
    /// retirement a held key signed is kept. A listed key that no held key endorsed is
    /// not taken, whoever listed it (a key written into the server's database alone), and
    /// a key retired before `now` endorses and retires nothing more.
    public func learning(from listed: DirectoryKeys, now: Int64 = Clock.millisecondsNow()) -> DirectoryKeys {
        guard listed.vrfPublicKey == vrfPublicKey else { return self }
        var held = self
        var waiting = listed.statements ?? []
        var progress = true
        while progress {
            progress = false
            var left: [KeyStatement] = []
            for statement in waiting {
                guard let signer = held.signingKey(statement.by), statement.isSigned(by: signer) else {
                    left.append(statement)
                    continue
                }
                if let retired = held.retiredAt(statement.by), retired < now { continue }
                if !(held.statements ?? []).contains(statement) { held.statements = (held.statements ?? []) + [statement] }
                if statement.kind == .endorse, held.signingKey(statement.keyId) == nil, let key = statement.subjectKey {
                    held.signingKeys.append(ListedKey(publicKey: key))
                    progress = true
                }
            }
            waiting = left
        }
        return held
    }
}

/// A statement one of the directory's signing keys makes about another key: that it is
/// the directory's (`endorse`), or that it signs no head published at or after `at`
/// (`retire`). Signed with the key named `by`, over
/// `"whisper-kt-key-v1\n" ‖ kind (0x01 endorse, 0x02 retire) ‖ publicKey (32) ‖ at (8 bytes, big-endian)`.
public struct KeyStatement: Codable, Sendable, Equatable, Hashable {
    public enum Kind: String, Codable, Sendable {
        case endorse, retire
    }

    public var kind: Kind
    /// The key the statement is about: its ID and public key (base64).
    public var keyId: String
    public var publicKey: String
    /// For `endorse`, when it was made; for `retire`, the time from which the key signs
    /// no head (ms since 1970).
    public var at: Int64
    /// The signing key's ID.
    public var by: String
    /// Ed25519, base64.
    public var signature: String

    public init(kind: Kind, publicKey: [UInt8], at: Int64, by signer: Ed25519.KeyPair) {
        self.kind = kind
        self.keyId = Ed25519.keyId(publicKey)
        self.publicKey = Data(publicKey).base64EncodedString()
        self.at = at
        self.by = Ed25519.keyId(signer.publicKey)
        self.signature = Data(signer.sign(Self.signedBytes(kind: kind, publicKey: publicKey, at: at))).base64EncodedString()
    }

    public init(kind: Kind, publicKey: [UInt8], at: Int64, by: String, signature: [UInt8]) {
        self.kind = kind
        self.keyId = Ed25519.keyId(publicKey)
        self.publicKey = Data(publicKey).base64EncodedString()
        self.at = at
        self.by = by
        self.signature = Data(signature).base64EncodedString()
    }

    public static func signedBytes(kind: Kind, publicKey: [UInt8], at: Int64) -> [UInt8] {
        Array("whisper-kt-key-v1\n".utf8) + [kind == .endorse ? 0x01 : 0x02] + publicKey + KeyDirectory.bigEndian(at)
    }

    /// The key the statement is about, when its ID is the key's own.
    public var subjectKey: [UInt8]? {
        guard let key = DirectoryHead.bytes(publicKey, Ed25519.publicKeyBytes), Ed25519.keyId(key) == keyId else { return nil }
        return key
    }

    /// Whether `signer` (the key named `by`) signed this statement.
    public func isSigned(by signer: [UInt8]) -> Bool {
        guard let key = subjectKey, let signature = DirectoryHead.bytes(signature, 64) else { return false }
        return Ed25519.verify(signature: signature, message: Self.signedBytes(kind: kind, publicKey: key, at: at), publicKey: signer)
    }
}

/// The transparency part of a key lookup: the head, the ID's label proof, the opening
/// of its commitment, the prefix tree path, and the log's growth since the head the
/// client said it holds.
public struct KeyProof: Codable, Sendable, Equatable {
    public var head: DirectoryHead
    /// The VRF proof for the ID (80 bytes, base64); its output's first 32 bytes are the label.
    public var vrfProof: String
    /// The commitment's opening (32 bytes, base64).
    public var opening: String
    /// The prefix tree siblings from the root down (base64, 32 bytes each); the path ends
    /// at the ID's own leaf.
    public var siblings: [String]
    /// The log consistency proof from the epoch the client asked from (`since`) to `head`.
    public var consistency: Consistency?

    public struct Consistency: Codable, Sendable, Equatable {
        public var fromEpoch: Int64
        public var hashes: [String]

        public init(fromEpoch: Int64, hashes: [[UInt8]]) {
            self.fromEpoch = fromEpoch
            self.hashes = hashes.map { Data($0).base64EncodedString() }
        }
    }

    public init(head: DirectoryHead, vrfProof: [UInt8], opening: [UInt8], siblings: [[UInt8]], consistency: Consistency?) {
        self.head = head
        self.vrfProof = Data(vrfProof).base64EncodedString()
        self.opening = Data(opening).base64EncodedString()
        self.siblings = siblings.map { Data($0).base64EncodedString() }
        self.consistency = consistency
    }
}

/// Why a directory proof was refused.
public enum KeyTransparencyError: Error, Equatable, Sendable {
    /// The head is not signed by a listed directory key.
    case badHeadSignature
    /// The VRF proof does not hold for this ID under the directory's VRF key.
    case badLabelProof
    /// The keys and opening do not give the value the tree holds, or the path does not
    /// lead to the head's root.
    case badInclusionProof
    /// The head is older than one already held (a rollback).
    case rollback(held: Int64, offered: Int64)
    /// The head does not extend the one held: another log for the same epochs (a split view).
    case notAnExtension(held: Int64, offered: Int64)
    /// The owner's own entry holds keys the owner did not register.
    case keysNotMine
    /// The owner's own entry says it was deleted.
    case entryDeleted
    /// The ID is not in the directory yet (newly registered: it is in the next epoch).
    case notYetPublished
    /// The newest head the directory showed was published longer ago than the client's
    /// bound (``KeyDirectory/staleHeadAge`` by default): the view may be frozen, so that
    /// changes since (a key given to someone else) are kept from this client.
    case staleHead(epoch: Int64, publishedAt: Int64)
    /// The owner's own entry, proven before, is no longer shown to the owner (the lookup
    /// answers "waiting", 404, or keeps failing): a server may be hiding it from its
    /// monitor while serving others other keys.
    case ownEntryHidden
    /// A peer's keys, proven before, are proven different now, with a valid proof: keys
    /// never change, so the directory gave the ID keys its owner did not register.
    case peerKeysChanged(whisperId: String)
    /// The head a peer sent with a message is not on this client's log (another log for
    /// the same epochs, or not the directory's): the two are shown different directories.
    case splitView(peer: String)
    /// Auditor keys are configured and none of those auditors signed a head on this
    /// client's log within the maximum lag of the held one: nobody but the operator
    /// vouches for the log this client is shown.
    case notAudited
    /// A field of the proof is not what the format says.
    case malformed(String)
}

extension KeyProof {
    /// Checks this proof for `whisperId` holding `state`, given the directory's keys and the
    /// head the client held (nil for none: the first head is taken as it is). Returns the
    /// head to hold from now on.
    public func verify(whisperId: String, state: KeyDirectory.KeyState, keys: DirectoryKeys, held: DirectoryHead?) throws(KeyTransparencyError) -> DirectoryHead {
        guard head.isSigned(by: keys) else { throw .badHeadSignature }
        try DirectoryHead.checkExtends(head, held: held, consistency: consistency)
        guard let vrfKey = keys.vrfPublicKeyBytes, let proof = DirectoryHead.bytes(vrfProof, VRF.proofBytes),
              let output = VRF.verify(publicKey: vrfKey, alpha: KeyDirectory.vrfInput(whisperId), proof: proof) else { throw .badLabelProof }
        guard let opening = DirectoryHead.bytes(opening, 32), siblings.count <= PrefixTree.labelBytes * 8 else { throw .malformed("opening or path") }
        var path: [PrefixTree.Hash] = []
        for sibling in siblings {
            guard let hash = DirectoryHead.bytes(sibling, 32) else { throw .malformed("sibling") }
            path.append(hash)
        }
        let label = KeyDirectory.label(vrfOutput: output)
        let value = KeyDirectory.value(label: label, opening: opening, whisperId: whisperId, state: state)
        guard let root = head.prefixRootBytes,
              (try? PrefixTree.verify(label: label, proof: PrefixTree.Proof(siblings: path, end: .found(value: value)), root: root)) == value
        else { throw .badInclusionProof }
        return head
    }
}

extension DirectoryHead {
    /// Checks that `offered` is `held` or grows from it (`consistency` proving it when it
    /// is newer). Equal epochs must be equal heads.
    public static func checkExtends(_ offered: DirectoryHead, held: DirectoryHead?, consistency: KeyProof.Consistency?) throws(KeyTransparencyError) {
        guard let held else { return }
        if offered.epoch < held.epoch { throw .rollback(held: held.epoch, offered: offered.epoch) }
        if offered.epoch == held.epoch {
            guard offered.logRoot == held.logRoot, offered.prefixRoot == held.prefixRoot, offered.publishedAt == held.publishedAt else {
                throw .notAnExtension(held: held.epoch, offered: offered.epoch)
            }
            return
        }
        guard let consistency, consistency.fromEpoch == held.epoch, let oldRoot = held.logRootBytes, let newRoot = offered.logRootBytes
        else { throw .notAnExtension(held: held.epoch, offered: offered.epoch) }
        var hashes: [LogTree.Hash] = []
        for hash in consistency.hashes {
            guard let bytes = bytes(hash, 32) else { throw .malformed("consistency hash") }
            hashes.append(bytes)
        }
        guard LogTree.verifyConsistency(oldSize: Int(held.epoch), newSize: Int(offered.epoch), oldRoot: oldRoot, newRoot: newRoot, proof: hashes) else {
            throw .notAnExtension(held: held.epoch, offered: offered.epoch)
        }
    }
}

/// One epoch as the audit endpoint serves it (`GET /kt/epochs/{epoch}`): its head, its
/// changes, and the update proof that the new prefix tree is the old one with exactly
/// these changes.
public struct EpochUpdate: Codable, Sendable, Equatable {
    public struct Leaf: Codable, Sendable, Equatable {
        public var label: String
        public var value: String
    }

    public struct Subtree: Codable, Sendable, Equatable {
        /// The position's stored key (``PrefixTree/Position/key``), base64.
        public var position: String
        public var hash: String
    }

    public var head: DirectoryHead
    /// The labels set this epoch, with their new values (base64).
    public var changes: [Leaf]
    /// The leaves the changes' paths ended at in the previous epoch's tree.
    public var oldLeaves: [Leaf]
    /// The previous tree's untouched subtrees beside those paths.
    public var witness: [Subtree]

    public init(head: DirectoryHead, changes: [PrefixTree.Entry], oldLeaves: [PrefixTree.Entry], witness: [PrefixTree.Position: PrefixTree.Hash]) {
        self.head = head
        self.changes = changes.map(Self.leaf)
        self.oldLeaves = oldLeaves.map(Self.leaf)
        self.witness = witness.map { Subtree(position: Data($0.key.key).base64EncodedString(), hash: Data($0.value).base64EncodedString()) }
            .sorted { $0.position < $1.position }
    }

    static func leaf(_ entry: PrefixTree.Entry) -> Leaf {
        Leaf(label: Data(entry.label).base64EncodedString(), value: Data(entry.value).base64EncodedString())
    }

    /// What an auditor learns from checking this epoch against the previous prefix root.
    public struct Checked: Sendable, Equatable {
        /// Entries that were already present, with the value they were set to.
        public var changed: [PrefixTree.Entry]
        /// Labels new in this epoch.
        public var addedLabels: [[UInt8]]
    }

    /// Checks that the previous tree (root `previousRoot`) with these changes is this
    /// epoch's tree: nothing else added, changed or taken out.
    public func verify(previousRoot: [UInt8]) throws(KeyTransparencyError) -> Checked {
        func entries(_ leaves: [Leaf]) throws(KeyTransparencyError) -> [PrefixTree.Entry] {
            var result: [PrefixTree.Entry] = []
            for leaf in leaves {
                guard let label = DirectoryHead.bytes(leaf.label, 32), let value = DirectoryHead.bytes(leaf.value, 32) else { throw .malformed("leaf") }
                result.append(PrefixTree.Entry(label: label, value: value))
            }
            return result
        }
        let changes = try entries(self.changes), old = try entries(oldLeaves)
        var subtrees: [PrefixTree.Position: PrefixTree.Hash] = [:]
        for subtree in witness {
            guard let key = Data(base64Encoded: subtree.position).map(Array.init), let position = PrefixTree.Position(key: key),
                  let hash = DirectoryHead.bytes(subtree.hash, 32), subtrees.updateValue(hash, forKey: position) == nil else { throw .malformed("witness") }
        }
        guard Set(changes.map(\.label)).count == changes.count, let newRoot = head.prefixRootBytes else { throw .malformed("changes") }
        var after = Dictionary(uniqueKeysWithValues: old.map { ($0.label, $0.value) })
        let existing = Set(after.keys)
        for change in changes { after[change.label] = change.value }
        do {
            guard try PrefixTree.root(entries: old, witness: subtrees) == previousRoot,
                  try PrefixTree.root(entries: after.map { PrefixTree.Entry(label: $0.key, value: $0.value) }, witness: subtrees) == newRoot
            else { throw KeyTransparencyError.badInclusionProof }
        } catch let error as KeyTransparencyError {
            throw error
        } catch {
            throw .malformed("update proof")
        }
        return Checked(
            changed: changes.filter { existing.contains($0.label) },
            addedLabels: changes.filter { !existing.contains($0.label) }.map(\.label)
        )
    }
}
