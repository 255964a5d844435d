import Crypto
import Foundation
import WhisperProtocol

/// What a client holds of the key directory (docs/key-transparency.md): its keys and the
/// newest head checked. Every key lookup of ``WhisperAPI`` is checked against them, and a
/// swapped key, a rolled-back or forked log is a ``KeyTransparencyError``. The app saves
/// ``head`` and ``provenKeys`` between runs and gives them back to the initialiser.
public actor DirectoryView {
    public private(set) var keys: DirectoryKeys?
    public private(set) var head: DirectoryHead?
    /// The keys each peer was proven to hold, by Whisper ID: SHA-256 of the encryption
    /// key then the signing key. Keys never change, so a later proof of other keys for a
    /// peer, valid or not, is refused (``KeyTransparencyError/peerKeysChanged(whisperId:)``).
    /// At most ``peerMemory`` peers; past it the first proven are forgotten first.
    public private(set) var provenKeys: [String: [UInt8]]
    public let peerMemory: Int
    /// Third-party auditors' public keys (Ed25519) the app requires a word from: with
    /// any, a lookup's head is taken only when one of them signed a head on this client's
    /// log published at most ``maxAuditLag`` before it (``KeyTransparencyError/notAudited``).
    public let auditorKeys: [[UInt8]]
    /// How far behind the held head an audited one may be (published earlier by at most this).
    public let maxAuditLag: Duration
    /// The newest head an auditor vouched for, checked to be on this client's log.
    public private(set) var audited: DirectoryHead?
    /// The order peers were first proven in (for forgetting the oldest).
    private var provenOrder: [String]
    /// A head published longer ago than this is refused as
    /// ``KeyTransparencyError/staleHead(epoch:publishedAt:)``, also when it is the one held.
    public let maxHeadAge: Duration
    /// How often the directory's key statements are read again (`GET /kt/keys`) although
    /// every head is signed by a held key: a key retired since signs nothing from then on.
    public let keysRefreshInterval: Duration
    /// When the held keys were last compared with what the directory lists.
    private var keysReadAt: ContinuousClock.Instant?

    public init(
        keys: DirectoryKeys? = nil, head: DirectoryHead? = nil, provenKeys: [String: [UInt8]] = [:], peerMemory: Int = 100_000,
        auditorKeys: [[UInt8]] = [], maxAuditLag: Duration = KeyDirectory.staleHeadAge,
        maxHeadAge: Duration = KeyDirectory.staleHeadAge, keysRefreshInterval: Duration = .seconds(3_600)
    ) {
        self.auditorKeys = auditorKeys
        self.maxAuditLag = maxAuditLag
        self.keys = keys
        self.head = head
        self.provenKeys = provenKeys
        self.provenOrder = provenKeys.keys.sorted()
        self.peerMemory = max(peerMemory, 1)
        self.maxHeadAge = maxHeadAge
        self.keysRefreshInterval = keysRefreshInterval
    }

    /// Refuses a head past ``maxHeadAge``: a directory that keeps showing one epoch (the
    /// held one, or any old one) freezes this client's view, so that what changed since
    /// is kept from it.
    func checkFresh(_ head: DirectoryHead, now: Int64 = Clock.millisecondsNow()) throws(KeyTransparencyError) {
        guard head.age(now: now) <= Int64(maxHeadAge.milliseconds) else {
            throw .staleHead(epoch: head.epoch, publishedAt: head.publishedAt)
        }
    }

    /// The directory's keys: the pinned ones, or `fetch`'s answer kept from then on
    /// (trust on first use: ``DirectoryKeys/firstUse()``).
    func directoryKeys(fetch: () async throws -> DirectoryKeys) async throws -> DirectoryKeys {
        if let keys { return keys }
        let fetched = try await fetch().firstUse()
        if let keys { return keys }
        keys = fetched
        keysReadAt = .now
        return fetched
    }

    /// Whether the held keys should be compared with the directory's list again before a
    /// head signed by `keyId` is checked: the key is not held (a rotation), or the last
    /// look is older than ``keysRefreshInterval`` (a retirement).
    func wantsKeys(for keyId: String) -> Bool {
        guard let keys else { return true }
        return keys.signingKey(keyId) == nil || keysReadAt.map { ContinuousClock.now - $0 >= keysRefreshInterval } ?? true
    }

    /// Takes what the directory lists now through the statements held keys signed (a
    /// rotation or a retirement: docs/key-transparency.md, "Rotation"); a key listed
    /// without one is not taken. Returns the keys held after.
    func learn(_ listed: DirectoryKeys) -> DirectoryKeys? {
        guard let held = keys, listed.vrfPublicKey == held.vrfPublicKey else { return nil }
        let learned = held.learning(from: listed)
        keys = learned
        keysReadAt = .now
        return learned
    }

    /// Checks a lookup's proof that `whisperId` holds `state`, against `base`, the head
    /// held when the lookup was sent (its `since`: the proof's consistency starts there),
    /// and holds its head from now on. `moved` is true when another lookup moved the held
    /// head on meanwhile: the caller then compares the two (`compare(with:)`), so that
    /// two lookups across an epoch are not taken for a rollback, and a fork still is.
    func accept(
        _ proof: KeyProof, whisperId: String, state: KeyDirectory.KeyState, keys: DirectoryKeys, base: DirectoryHead?
    ) throws(KeyTransparencyError) -> (head: DirectoryHead, moved: Bool) {
        let checked = try proof.verify(whisperId: whisperId, state: state, keys: keys, held: base)
        try checkFresh(checked)
        if case .active(let encPublicKey, let signPublicKey) = state {
            try remember(whisperId, Array(SHA256.hash(data: encPublicKey + signPublicKey)))
        }
        guard head == base || head == checked else { return (checked, true) }
        if checked.epoch >= head?.epoch ?? 0 { head = checked }
        return (checked, false)
    }

    /// Whether `head` still needs an auditor's word: auditor keys are configured, and the
    /// newest audited head is none, or published more than ``maxAuditLag`` before `head`.
    func needsAudit(of head: DirectoryHead) -> Bool {
        guard !auditorKeys.isEmpty else { return false }
        guard let audited else { return true }
        let (lag, overflow) = head.publishedAt.subtractingReportingOverflow(audited.publishedAt)
        return overflow || lag > Int64(maxAuditLag.milliseconds)
    }

    /// Whether a configured auditor's key made `audit`.
    func isByAnAuditor(_ audit: AuditorSignature) -> Bool {
        auditorKeys.contains { audit.isSigned(by: $0) }
    }

    /// Takes `head` as audited (an auditor signed it, and it is on this client's log).
    func recordAudited(_ head: DirectoryHead) {
        if head.epoch > audited?.epoch ?? 0 { audited = head }
    }

    /// Records the keys `whisperId` was proven to hold, or refuses other keys than those
    /// proven before.
    private func remember(_ whisperId: String, _ digest: [UInt8]) throws(KeyTransparencyError) {
        if let proven = provenKeys[whisperId] {
            guard proven == digest else { throw .peerKeysChanged(whisperId: whisperId) }
            return
        }
        provenKeys[whisperId] = digest
        provenOrder.append(whisperId)
        if provenOrder.count > peerMemory {
            let forgotten = provenOrder.count - peerMemory + peerMemory / 10
            for id in provenOrder.prefix(forgotten) { provenKeys[id] = nil }
            provenOrder.removeFirst(min(forgotten, provenOrder.count))
        }
    }

    /// Checks a head that the directory showed someone else (a peer's, passed along with
    /// a message or compared in person): it must be signed by the directory and lie on
    /// the same log as this client's. `newest` gives the directory's newest head with a
    /// consistency proof from the epoch named; it is asked for both heads' epochs, so a
    /// directory that keeps two logs cannot answer both.
    public func compare(
        with other: DirectoryHead, keys: DirectoryKeys, newest: (Int64) async throws -> (DirectoryHead, KeyProof.Consistency?)
    ) async throws {
        guard other.isSigned(by: keys) else { throw KeyTransparencyError.badHeadSignature }
        let held = head
        if let held, other.epoch == held.epoch {
            try DirectoryHead.checkExtends(other, held: held, consistency: nil)
            return
        }
        // The log may grow between the two questions: ask again until both answers name
        // the same epoch, which must then be the same head.
        for _ in 0..<3 {
            var fromHeld: DirectoryHead?
            if let held {
                let (newest, proof) = try await newest(held.epoch)
                guard newest.isSigned(by: keys) else { throw KeyTransparencyError.badHeadSignature }
                try DirectoryHead.checkExtends(newest, held: held, consistency: proof)
                try checkFresh(newest)
                fromHeld = newest
            }
            let (fromOther, proof) = try await newest(other.epoch)
            guard fromOther.isSigned(by: keys) else { throw KeyTransparencyError.badHeadSignature }
            try DirectoryHead.checkExtends(fromOther, held: other, consistency: proof)
            try checkFresh(fromOther)
            guard let fromHeld else {
                head = fromOther
                return
            }
            if fromHeld.epoch == fromOther.epoch {
                try DirectoryHead.checkExtends(fromOther, held: fromHeld, consistency: nil)
                head = fromHeld
                return
            }
        }
        throw KeyTransparencyError.malformed("the directory published faster than two heads could be compared")
    }
}
