import CSodium

/// ECVRF-EDWARDS25519-SHA512-TAI (RFC 9381, suite 0x03), which hides each directory label:
/// only the secret key's holder computes an output, anyone with the public key checks its
/// proof. Keys are Ed25519 seeds; a proof is 80 bytes (Gamma, c, s), an output 64. Checked
/// against RFC 9381 appendix B.3.
public enum VRF {
    public static let proofBytes = 80
    public static let outputBytes = 64
    public static let publicKeyBytes = 32
    static let suite: UInt8 = 0x03
    static let challengeBytes = 16

    /// A VRF key pair from a 32-byte seed.
    public struct KeyPair: Sendable {
        public let publicKey: [UInt8]
        /// The secret scalar x (RFC 8032's clamped first half of SHA-512(seed), reduced mod L).
        let scalar: [UInt8]
        /// The second half of SHA-512(seed): the nonce's secret prefix.
        let noncePrefix: [UInt8]

        public init(seed: [UInt8]) {
            precondition(seed.count == 32, "a VRF seed is 32 bytes")
            Sodium.ready()
            let hashed = VRF.sha512(seed)
            var clamped = Array(hashed[0..<32])
            clamped[0] &= 248
            clamped[31] &= 127
            clamped[31] |= 64
            scalar = VRF.reduce(clamped + [UInt8](repeating: 0, count: 32))
            noncePrefix = Array(hashed[32..<64])
            var point = [UInt8](repeating: 0, count: 32)
            _ = crypto_scalarmult_ed25519_base_noclamp(&point, scalar)
            publicKey = point
        }

        /// The proof for `alpha` (`ECVRF_prove`); its output is `VRF.output(ofProof:)`.
        public func prove(_ alpha: [UInt8]) -> [UInt8] {
            // H is in the prime-order subgroup (the cofactor is cleared), so every
            // multiplication below is by a point libsodium accepts.
            guard let h = VRF.encodeToCurve(publicKey: publicKey, alpha: alpha),
                  let gamma = VRF.multiply(scalar, h) else {
                preconditionFailure("hash to curve of a valid key cannot fail")
            }
            let k = VRF.reduce(VRF.sha512(noncePrefix + h))
            var u = [UInt8](repeating: 0, count: 32)
            _ = crypto_scalarmult_ed25519_base_noclamp(&u, k)
            guard let v = VRF.multiply(k, h) else { preconditionFailure("k·H of a valid H") }
            let c = VRF.challenge(publicKey, h, gamma, u, v)
            // s = k + c·x (mod L)
            var cx = [UInt8](repeating: 0, count: 32), s = [UInt8](repeating: 0, count: 32)
            crypto_core_ed25519_scalar_mul(&cx, c + [UInt8](repeating: 0, count: 16), scalar)
            crypto_core_ed25519_scalar_add(&s, k, cx)
            return gamma + c + s
        }
    }

    /// The output of a proof (`ECVRF_proof_to_hash`), once the proof is known to verify;
    /// nil for bytes that are no proof.
    public static func output(ofProof proof: [UInt8]) -> [UInt8]? {
        guard proof.count == proofBytes, let gamma = decodePoint(Array(proof[0..<32])) else { return nil }
        guard let cleared = clearCofactor(gamma) else { return nil }
        return sha512([suite, 0x03] + cleared + [0x00])
    }

    /// The output for `alpha` when `proof` is a valid proof under `publicKey`
    /// (`ECVRF_verify`, with the key validated), else nil.
    public static func verify(publicKey: [UInt8], alpha: [UInt8], proof: [UInt8]) -> [UInt8]? {
        Sodium.ready()
        guard publicKey.count == publicKeyBytes, proof.count == proofBytes,
              crypto_core_ed25519_is_valid_point(publicKey) == 1 else { return nil }
        let gamma = Array(proof[0..<32])
        let c = Array(proof[32..<48])
        let s = Array(proof[48..<80])
        // s must be a canonical scalar (below L); Gamma a point of the prime-order group
        // (what an honest prover's Gamma always is).
        guard isCanonical(s), crypto_core_ed25519_is_valid_point(gamma) == 1,
              let h = encodeToCurve(publicKey: publicKey, alpha: alpha) else { return nil }
        let cWide = c + [UInt8](repeating: 0, count: 16)
        // U = s·B − c·Y, V = s·H − c·Gamma
        var sB = [UInt8](repeating: 0, count: 32)
        guard crypto_scalarmult_ed25519_base_noclamp(&sB, s) == 0,
              let cY = multiply(cWide, publicKey), let u = subtract(sB, cY),
              let sH = multiply(s, h), let cGamma = multiply(cWide, gamma), let v = subtract(sH, cGamma)
        else { return nil }
        guard Sodium.constantTimeEqual(challenge(publicKey, h, gamma, u, v), c) else { return nil }
        return output(ofProof: proof)
    }

    // MARK: - RFC 9381 section 5.4

    /// `ECVRF_encode_to_curve_try_and_increment`: the first counter whose hash decodes to
    /// a point, with the cofactor cleared.
    static func encodeToCurve(publicKey: [UInt8], alpha: [UInt8]) -> [UInt8]? {
        for counter in 0...255 {
            let hash = sha512([suite, 0x01] + publicKey + alpha + [UInt8(counter), 0x00])
            if let point = decodePoint(Array(hash[0..<32])), let cleared = clearCofactor(point), cleared != identity { return cleared }
        }
        return nil
    }

    /// `ECVRF_challenge_generation`: the first 16 bytes of the hash of the five points.
    static func challenge(_ y: [UInt8], _ h: [UInt8], _ gamma: [UInt8], _ u: [UInt8], _ v: [UInt8]) -> [UInt8] {
        Array(sha512([suite, 0x02] + y + h + gamma + u + v + [0x00])[0..<challengeBytes])
    }

    // MARK: - Points and scalars

    /// The identity point's encoding: y = 1, x = 0.
    static let identity: [UInt8] = [1] + [UInt8](repeating: 0, count: 31)

    /// RFC 8032 decoding (`string_to_point`): any point of the curve, in canonical form.
    /// libsodium decodes and checks the point is on the curve; adding the identity
    /// encodes it again, which differs from the input exactly when the input was not
    /// canonical (y ≥ p, or x = 0 with its sign bit set).
    static func decodePoint(_ bytes: [UInt8]) -> [UInt8]? {
        var again = [UInt8](repeating: 0, count: 32)
        guard bytes.count == 32, crypto_core_ed25519_add(&again, bytes, identity) == 0, again == bytes else { return nil }
        return bytes
    }

    /// 8·P by three doublings (libsodium's addition takes any point of the curve).
    static func clearCofactor(_ point: [UInt8]) -> [UInt8]? {
        var current = point
        for _ in 0..<3 {
            var doubled = [UInt8](repeating: 0, count: 32)
            guard crypto_core_ed25519_add(&doubled, current, current) == 0 else { return nil }
            current = doubled
        }
        return current
    }

    /// n·P for P in the prime-order group; nil when libsodium refuses (P outside it, or
    /// the result the identity).
    static func multiply(_ scalar: [UInt8], _ point: [UInt8]) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: 32)
        return crypto_scalarmult_ed25519_noclamp(&out, scalar, point) == 0 ? out : nil
    }

    static func subtract(_ p: [UInt8], _ q: [UInt8]) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: 32)
        return crypto_core_ed25519_sub(&out, p, q) == 0 ? out : nil
    }

    /// L, the order of the prime-order group, little-endian.
    static let order: [UInt8] = [
        0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10,
    ]

    /// Whether a 32-byte little-endian scalar is below L.
    static func isCanonical(_ scalar: [UInt8]) -> Bool {
        guard scalar.count == 32 else { return false }
        for index in stride(from: 31, through: 0, by: -1) where scalar[index] != order[index] {
            return scalar[index] < order[index]
        }
        return false
    }

    /// A 64-byte little-endian integer reduced mod L.
    static func reduce(_ wide: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        crypto_core_ed25519_scalar_reduce(&out, wide)
        return out
    }

    static func sha512(_ bytes: [UInt8]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 64)
        _ = crypto_hash_sha512(&out, bytes, UInt64(bytes.count))
        return out
    }
}
