import Crypto

/// Random bytes and comparisons of secrets.
public enum SecureBytes {
    /// Cryptographically secure random bytes (the system's generator: `getrandom` on
    /// Linux, `arc4random` on Apple platforms).
    public static func random(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
    }

    /// Compares in time that does not depend on where the inputs differ.
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }
}

/// Ed25519 (RFC 8032) through swift-crypto. The services verify the signatures on their
/// busiest paths with libsodium instead (`Ed25519.verifyWithSodium`, WhisperShared),
/// which is faster here (docs/benchmarks.md) and refuses a little more (small-order keys).
public enum Ed25519 {
    public static let publicKeyBytes = 32
    public static let seedBytes = 32
    public static let signatureBytes = 64

    /// A signing key pair from a 32-byte seed (the RFC 8032 private key).
    public struct KeyPair: Sendable {
        public let publicKey: [UInt8]
        let key: Curve25519.Signing.PrivateKey

        public init(seed: [UInt8]) {
            precondition(seed.count == Ed25519.seedBytes, "an Ed25519 seed is 32 bytes")
            key = try! Curve25519.Signing.PrivateKey(rawRepresentation: seed)
            publicKey = Array(key.publicKey.rawRepresentation)
        }

        /// A detached signature over `message` (deterministic on Linux, as RFC 8032 has
        /// it; CryptoKit on Apple platforms adds randomness: both verify alike).
        public func sign(_ message: [UInt8]) -> [UInt8] {
            Array(try! key.signature(for: message))
        }
    }

    /// A public key's ID, as keys listed for rotation are named (floor keys, the key
    /// directory's signing keys): the first 8 bytes of its SHA-256, in hex.
    public static func keyId(_ publicKey: [UInt8]) -> String {
        Array(SHA256.hash(data: publicKey).prefix(8)).hexString
    }

    /// True when `signature` is `publicKey`'s signature over `message`. Malformed
    /// inputs (wrong lengths, keys off the curve) are simply false.
    public static func verify(signature: [UInt8], message: [UInt8], publicKey: [UInt8]) -> Bool {
        guard signature.count == signatureBytes, publicKey.count == publicKeyBytes,
              let key = try? Curve25519.Signing.PublicKey(rawRepresentation: publicKey) else { return false }
        return key.isValidSignature(signature, for: message)
    }
}

/// X25519 keys and `crypto_box` (X25519, then XSalsa20-Poly1305 under the HSalsa20 of
/// the shared secret), byte for byte as libsodium makes them.
public enum X25519Box {
    public static let keyBytes = 32
    public static let nonceBytes = 24
    public static let overheadBytes = 16

    /// The public key for a private key (the 32 bytes are the scalar, as in RFC 7748
    /// and CryptoKit's `rawRepresentation`; clamping happens inside).
    public static func publicKey(privateKey: [UInt8]) -> [UInt8] {
        precondition(privateKey.count == keyBytes)
        return Array(try! Curve25519.KeyAgreement.PrivateKey(rawRepresentation: privateKey).publicKey.rawRepresentation)
    }

    /// Sealed for the recipient. A public key with which no key can be agreed (of small
    /// order) gives a box of zeros that nothing opens, as libsodium leaves it.
    public static func seal(_ message: [UInt8], nonce: [UInt8], recipientPublicKey: [UInt8], senderPrivateKey: [UInt8]) -> [UInt8] {
        precondition(nonce.count == nonceBytes && recipientPublicKey.count == keyBytes && senderPrivateKey.count == keyBytes)
        guard let key = sharedKey(publicKey: recipientPublicKey, privateKey: senderPrivateKey) else {
            return [UInt8](repeating: 0, count: message.count + overheadBytes)
        }
        return seal(message, nonce: nonce, sharedKey: key)
    }

    /// The plaintext, or nil when the ciphertext does not authenticate.
    public static func open(_ ciphertext: [UInt8], nonce: [UInt8], senderPublicKey: [UInt8], recipientPrivateKey: [UInt8]) -> [UInt8]? {
        guard ciphertext.count >= overheadBytes, nonce.count == nonceBytes,
              senderPublicKey.count == keyBytes, recipientPrivateKey.count == keyBytes,
              let key = sharedKey(publicKey: senderPublicKey, privateKey: recipientPrivateKey) else { return nil }
        return open(ciphertext, nonce: nonce, sharedKey: key)
    }

    /// The key `crypto_box` derives from one side's private key and the other's public
    /// key (`crypto_box_beforenm`): the same from both sides, so one per conversation
    /// saves an X25519 multiplication per message sealed or opened. Nil for a public
    /// key that gives an all-zero shared secret.
    public static func sharedKey(publicKey: [UInt8], privateKey: [UInt8]) -> [UInt8]? {
        guard publicKey.count == keyBytes, privateKey.count == keyBytes,
              let mine = try? Curve25519.KeyAgreement.PrivateKey(rawRepresentation: privateKey),
              let theirs = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: publicKey),
              let secret = try? mine.sharedSecretFromKeyAgreement(with: theirs) else { return nil }
        let bytes = secret.withUnsafeBytes { Array($0) }
        guard bytes.contains(where: { $0 != 0 }) else { return nil }
        return HSalsa20.derive(key: bytes, nonce: [UInt8](repeating: 0, count: 16))
    }

    /// `crypto_box_easy` with a key from `sharedKey`: the same ciphertext (a
    /// `crypto_secretbox` under that key).
    public static func seal(_ message: [UInt8], nonce: [UInt8], sharedKey: [UInt8]) -> [UInt8] {
        SecretBox.seal(message, nonce: nonce, key: sharedKey)
    }

    public static func open(_ ciphertext: [UInt8], nonce: [UInt8], sharedKey: [UInt8]) -> [UInt8]? {
        SecretBox.open(ciphertext, nonce: nonce, key: sharedKey)
    }
}

/// `crypto_secretbox` (XSalsa20-Poly1305) for attachments and the contacts backup.
public enum SecretBox {
    public static let keyBytes = 32
    public static let nonceBytes = 24
    public static let overheadBytes = 16

    public static func seal(_ message: [UInt8], nonce: [UInt8], key: [UInt8]) -> [UInt8] {
        precondition(nonce.count == nonceBytes && key.count == keyBytes)
        return XSalsa20Poly1305.seal(message, nonce: nonce, key: key)
    }

    public static func open(_ ciphertext: [UInt8], nonce: [UInt8], key: [UInt8]) -> [UInt8]? {
        guard ciphertext.count >= overheadBytes, nonce.count == nonceBytes, key.count == keyBytes else { return nil }
        return XSalsa20Poly1305.open(ciphertext, nonce: nonce, key: key)
    }
}
