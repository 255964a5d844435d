import CSodium
import Crypto
import WhisperProtocol

/// libsodium where the services want it: Ed25519 verification on their busiest paths
/// (faster here than swift-crypto's: docs/benchmarks.md, "Today's figures"), and the
/// key directory's VRF prover. The client side (WhisperProtocol) needs neither.
enum Sodium {
    static let initialized: Bool = sodium_init() >= 0

    @inline(__always)
    static func ready() {
        precondition(initialized, "libsodium failed to initialise")
    }
}

extension Ed25519 {
    /// `verify` through libsodium, which also refuses small-order keys and R values: the
    /// services' check of every signature a client sends.
    public static func verifyWithSodium(signature: [UInt8], message: [UInt8], publicKey: [UInt8]) -> Bool {
        Sodium.ready()
        guard signature.count == signatureBytes, publicKey.count == publicKeyBytes else { return false }
        return crypto_sign_verify_detached(signature, message, UInt64(message.count), publicKey) == 0
    }
}

extension VRF {
    /// A VRF key pair from a 32-byte seed: the directory's prover, with libsodium's
    /// point and scalar operations.
    public struct KeyPair: Sendable {
        public let publicKey: [UInt8]
        /// The secret scalar x (RFC 8032's clamped first half of SHA-512(seed), reduced mod L).
        let scalar: [UInt8]
        /// The second half of SHA-512(seed): the nonce's secret prefix.
        let noncePrefix: [UInt8]

        public init(seed: [UInt8]) {
            precondition(seed.count == 32, "a VRF seed is 32 bytes")
            Sodium.ready()
            let hashed = Array(SHA512.hash(data: seed))
            var clamped = Array(hashed[0..<32])
            clamped[0] &= 248
            clamped[31] &= 127
            clamped[31] |= 64
            scalar = Self.reduce(clamped + [UInt8](repeating: 0, count: 32))
            noncePrefix = Array(hashed[32..<64])
            var point = [UInt8](repeating: 0, count: 32)
            _ = crypto_scalarmult_ed25519_base_noclamp(&point, scalar)
            publicKey = point
        }

        /// The proof for `alpha` (`ECVRF_prove`); its output is `VRF.output(ofProof:)`.
        public func prove(_ alpha: [UInt8]) -> [UInt8] {
            // H is in the prime-order group (its cofactor cleared), so every
            // multiplication below is by a point libsodium accepts.
            guard let h = VRF.encodeToCurve(publicKey: publicKey, alpha: alpha),
                  let gamma = Self.multiply(scalar, h) else {
                preconditionFailure("hash to curve of a valid key cannot fail")
            }
            let k = Self.reduce(Array(SHA512.hash(data: noncePrefix + h)))
            var u = [UInt8](repeating: 0, count: 32)
            _ = crypto_scalarmult_ed25519_base_noclamp(&u, k)
            guard let v = Self.multiply(k, h) else { preconditionFailure("k·H of a valid H") }
            let c = VRF.challenge(publicKey, h, gamma, u, v)
            // s = k + c·x (mod L)
            var cx = [UInt8](repeating: 0, count: 32), s = [UInt8](repeating: 0, count: 32)
            crypto_core_ed25519_scalar_mul(&cx, c + [UInt8](repeating: 0, count: 16), scalar)
            crypto_core_ed25519_scalar_add(&s, k, cx)
            return gamma + c + s
        }

        /// n·P for P in the prime-order group; nil when libsodium refuses.
        static func multiply(_ scalar: [UInt8], _ point: [UInt8]) -> [UInt8]? {
            var out = [UInt8](repeating: 0, count: 32)
            return crypto_scalarmult_ed25519_noclamp(&out, scalar, point) == 0 ? out : nil
        }

        /// A 64-byte little-endian integer reduced mod L.
        static func reduce(_ wide: [UInt8]) -> [UInt8] {
            var out = [UInt8](repeating: 0, count: 32)
            crypto_core_ed25519_scalar_reduce(&out, wide)
            return out
        }
    }
}
