import Crypto
import CSodium

/// The libsodium primitives Whisper uses (crypto version 1): Ed25519 signatures,
/// X25519 `crypto_box` (XSalsa20-Poly1305) and `crypto_secretbox`, and random bytes.
public enum Sodium {
    private static let initialized: Bool = sodium_init() >= 0

    /// Makes sure libsodium is ready; every entry point calls it.
    @inline(__always)
    static func ready() {
        precondition(initialized, "libsodium failed to initialise")
    }

    /// Cryptographically secure random bytes.
    public static func randomBytes(_ count: Int) -> [UInt8] {
        ready()
        var bytes = [UInt8](repeating: 0, count: count)
        if count > 0 { bytes.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, count) } }
        return bytes
    }

    /// Compares in time that does not depend on where the inputs differ.
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        ready()
        guard a.count == b.count else { return false }
        if a.isEmpty { return true }
        return a.withUnsafeBytes { pa in b.withUnsafeBytes { pb in sodium_memcmp(pa.baseAddress, pb.baseAddress, a.count) == 0 } }
    }
}

/// Ed25519 (RFC 8032) through libsodium.
public enum Ed25519 {
    public static let publicKeyBytes = 32
    public static let seedBytes = 32
    public static let signatureBytes = 64

    /// A signing key pair from a 32-byte seed (the RFC 8032 private key).
    public struct KeyPair: Sendable {
        public let publicKey: [UInt8]
        /// libsodium's 64-byte secret key: the seed followed by the public key.
        let secretKey: [UInt8]

        public init(seed: [UInt8]) {
            precondition(seed.count == Ed25519.seedBytes, "an Ed25519 seed is 32 bytes")
            Sodium.ready()
            var publicKey = [UInt8](repeating: 0, count: Int(crypto_sign_PUBLICKEYBYTES))
            var secretKey = [UInt8](repeating: 0, count: Int(crypto_sign_SECRETKEYBYTES))
            _ = crypto_sign_seed_keypair(&publicKey, &secretKey, seed)
            self.publicKey = publicKey
            self.secretKey = secretKey
        }

        /// A detached signature over `message`.
        public func sign(_ message: [UInt8]) -> [UInt8] {
            var signature = [UInt8](repeating: 0, count: Ed25519.signatureBytes)
            _ = crypto_sign_detached(&signature, nil, message, UInt64(message.count), secretKey)
            return signature
        }
    }

    /// A public key's ID, as keys listed for rotation are named (floor keys, the key
    /// directory's signing keys): the first 8 bytes of its SHA-256, in hex.
    public static func keyId(_ publicKey: [UInt8]) -> String {
        Array(SHA256.hash(data: publicKey).prefix(8)).hexString
    }

    /// True when `signature` is `publicKey`'s signature over `message`. Malformed
    /// inputs (wrong lengths, small-order keys) are simply false.
    public static func verify(signature: [UInt8], message: [UInt8], publicKey: [UInt8]) -> Bool {
        Sodium.ready()
        guard signature.count == signatureBytes, publicKey.count == publicKeyBytes else { return false }
        return crypto_sign_verify_detached(signature, message, UInt64(message.count), publicKey) == 0
    }
}

/// X25519 keys and `crypto_box` (X25519 + XSalsa20-Poly1305).
public enum X25519Box {
    public static let keyBytes = 32
    public static let nonceBytes = 24
    public static let overheadBytes = 16

    /// The public key for a private key (the 32 bytes are the scalar, as in RFC 7748
    /// and CryptoKit's `rawRepresentation`; clamping happens inside).
    public static func publicKey(privateKey: [UInt8]) -> [UInt8] {
        precondition(privateKey.count == keyBytes)
        Sodium.ready()
        var publicKey = [UInt8](repeating: 0, count: keyBytes)
        _ = crypto_scalarmult_base(&publicKey, privateKey)
        return publicKey
    }

    public static func seal(_ message: [UInt8], nonce: [UInt8], recipientPublicKey: [UInt8], senderPrivateKey: [UInt8]) -> [UInt8] {
        precondition(nonce.count == nonceBytes && recipientPublicKey.count == keyBytes && senderPrivateKey.count == keyBytes)
        Sodium.ready()
        var ciphertext = [UInt8](repeating: 0, count: message.count + overheadBytes)
        _ = crypto_box_easy(&ciphertext, message, UInt64(message.count), nonce, recipientPublicKey, senderPrivateKey)
        return ciphertext
    }

    /// The plaintext, or nil when the ciphertext does not authenticate.
    public static func open(_ ciphertext: [UInt8], nonce: [UInt8], senderPublicKey: [UInt8], recipientPrivateKey: [UInt8]) -> [UInt8]? {
        guard ciphertext.count >= overheadBytes, nonce.count == nonceBytes,
              senderPublicKey.count == keyBytes, recipientPrivateKey.count == keyBytes else { return nil }
        Sodium.ready()
        var message = [UInt8](repeating: 0, count: ciphertext.count - overheadBytes)
        let status = crypto_box_open_easy(&message, ciphertext, UInt64(ciphertext.count), nonce, senderPublicKey, recipientPrivateKey)
        return status == 0 ? message : nil
    }
}

extension X25519Box {
    /// The key `crypto_box` derives from one side's private key and the other's public
    /// key (`crypto_box_beforenm`): the same from both sides, so one per conversation
    /// saves an X25519 multiplication per message sealed or opened. Nil for a public
    /// key that gives an all-zero shared secret.
    public static func sharedKey(publicKey: [UInt8], privateKey: [UInt8]) -> [UInt8]? {
        guard publicKey.count == keyBytes, privateKey.count == keyBytes else { return nil }
        Sodium.ready()
        var key = [UInt8](repeating: 0, count: Int(crypto_box_BEFORENMBYTES))
        return crypto_box_beforenm(&key, publicKey, privateKey) == 0 ? key : nil
    }

    /// `crypto_box_easy` with a key from `sharedKey`: the same ciphertext.
    public static func seal(_ message: [UInt8], nonce: [UInt8], sharedKey: [UInt8]) -> [UInt8] {
        precondition(nonce.count == nonceBytes && sharedKey.count == Int(crypto_box_BEFORENMBYTES))
        Sodium.ready()
        var ciphertext = [UInt8](repeating: 0, count: message.count + overheadBytes)
        _ = crypto_box_easy_afternm(&ciphertext, message, UInt64(message.count), nonce, sharedKey)
        return ciphertext
    }

    public static func open(_ ciphertext: [UInt8], nonce: [UInt8], sharedKey: [UInt8]) -> [UInt8]? {
        guard ciphertext.count >= overheadBytes, nonce.count == nonceBytes, sharedKey.count == Int(crypto_box_BEFORENMBYTES) else { return nil }
        Sodium.ready()
        var message = [UInt8](repeating: 0, count: ciphertext.count - overheadBytes)
        let status = crypto_box_open_easy_afternm(&message, ciphertext, UInt64(ciphertext.count), nonce, sharedKey)
        return status == 0 ? message : nil
    }
}

/// `crypto_secretbox` (XSalsa20-Poly1305) for attachments and the contacts backup.
public enum SecretBox {
    public static let keyBytes = 32
    public static let nonceBytes = 24
    public static let overheadBytes = 16

    public static func seal(_ message: [UInt8], nonce: [UInt8], key: [UInt8]) -> [UInt8] {
        precondition(nonce.count == nonceBytes && key.count == keyBytes)
        Sodium.ready()
        var ciphertext = [UInt8](repeating: 0, count: message.count + overheadBytes)
        _ = crypto_secretbox_easy(&ciphertext, message, UInt64(message.count), nonce, key)
        return ciphertext
    }

    public static func open(_ ciphertext: [UInt8], nonce: [UInt8], key: [UInt8]) -> [UInt8]? {
        guard ciphertext.count >= overheadBytes, nonce.count == nonceBytes, key.count == keyBytes else { return nil }
        Sodium.ready()
        var message = [UInt8](repeating: 0, count: ciphertext.count - overheadBytes)
        let status = crypto_secretbox_open_easy(&message, ciphertext, UInt64(ciphertext.count), nonce, key)
        return status == 0 ? message : nil
    }
}
