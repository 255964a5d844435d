import CEd25519Verify
import CSodium
import Crypto
import Synchronization
import WhisperProtocol

extension Ed25519 {
    /// A signer's public key prepared for `whisper_ed25519_check`: immutable once made.
    public final class PreparedKey: @unchecked Sendable {
        /// The key's own 32 bytes (hashed into every check).
        let publicKey: [UInt8]
        let storage: UnsafeMutablePointer<whisper_ed25519_key>

        /// `.refused` for a key libsodium refuses too; `.unavailable` when the prepared
        /// path cannot serve (its constants failed to derive) and libsodium must.
        enum Failure: Error { case refused, unavailable }

        init(_ publicKey: [UInt8]) throws(Failure) {
            self.publicKey = publicKey
            // Once `storage` is set, a throw runs `deinit`, which frees it.
            storage = .allocate(capacity: 1)
            switch whisper_ed25519_prepare(storage, publicKey) {
            case 0: return
            case -1: throw .refused
            default: throw .unavailable
            }
        }

        deinit { storage.deallocate() }

        /// Whether `signature` is this key's over `message`, with libsodium's rules.
        func verify(signature: [UInt8], message: [UInt8]) -> Bool {
            Sodium.ready()
            var hasher = SHA512()
            hasher.update(data: signature[0..<32])
            hasher.update(data: publicKey)
            hasher.update(data: message)
            var reduced = [UInt8](repeating: 0, count: 32)
            hasher.finalize().withUnsafeBytes { wide in
                _ = crypto_core_ed25519_scalar_reduce(&reduced, wide.bindMemory(to: UInt8.self).baseAddress!)
            }
            return whisper_ed25519_check(storage, signature, reduced) == 0
        }
    }

    /// The prepared keys of recent signers, found by the key's bytes, so never stale.
    /// Two generations of at most `capacity / 2` keys each (about 2 KiB a key): a key
    /// found in the older moves to the newer, and the older is dropped when the newer
    /// is full. docs/architecture.md, "Signatures".
    public final class PreparedKeys: Sendable {
        /// The process's own: every message and signal signature a service checks.
        public static let shared = PreparedKeys(capacity: 4_096)

        private struct Generations {
            var newer: [[UInt8]: PreparedKey] = [:]
            var older: [[UInt8]: PreparedKey] = [:]
        }

        private let generations = Mutex(Generations())
        private let generationSize: Int

        public init(capacity: Int) {
            generationSize = max(1, capacity / 2)
        }

        /// How many keys are held.
        public var count: Int { generations.withLock { $0.newer.count + $0.older.count } }

        func prepared(_ publicKey: [UInt8]) throws(PreparedKey.Failure) -> PreparedKey {
            let found: PreparedKey? = generations.withLock { held in
                if let key = held.newer[publicKey] { return key }
                guard let key = held.older.removeValue(forKey: publicKey) else { return nil }
                Self.keep(key, for: publicKey, in: &held, generationSize: generationSize)
                return key
            }
            if let found { return found }
            // Prepared outside the lock (about 20 µs); two threads that race prepare it twice.
            let key = try PreparedKey(publicKey)
            generations.withLock { Self.keep(key, for: publicKey, in: &$0, generationSize: generationSize) }
            return key
        }

        private static func keep(_ key: PreparedKey, for publicKey: [UInt8], in held: inout Generations, generationSize: Int) {
            if held.newer.count >= generationSize {
                held.older = held.newer
                held.newer = [:]
            }
            held.newer[publicKey] = key
        }
    }

    /// `verify` for keys that sign again and again (the messages and signals of a
    /// session's identity): the same answers as `verifyWithSodium`, in about half its
    /// time once the key is prepared (docs/benchmarks.md, "Today's figures").
    public static func verifyPrepared(
        signature: [UInt8], message: [UInt8], publicKey: [UInt8], keys: PreparedKeys = .shared
    ) -> Bool {
        guard signature.count == signatureBytes, publicKey.count == publicKeyBytes else { return false }
        do {
            return try keys.prepared(publicKey).verify(signature: signature, message: message)
        } catch {
            switch error {
            case .refused: return false
            case .unavailable: return verifyWithSodium(signature: signature, message: message, publicKey: publicKey)
            }
        }
    }
}

extension CanonicalSigning {
    /// `verify` through a prepared key (`Ed25519.verifyPrepared`).
    public static func verifyPrepared(_ signature: [UInt8], over signedBytes: [UInt8], publicKey: [UInt8]) -> Bool {
        Ed25519.verifyPrepared(signature: signature, message: digest(signedBytes), publicKey: publicKey)
    }
}
