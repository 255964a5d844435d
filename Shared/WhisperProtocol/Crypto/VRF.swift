import Crypto

/// ECVRF-EDWARDS25519-SHA512-TAI (RFC 9381, suite 0x03), which hides each directory label:
/// only the secret key's holder computes an output, anyone with the public key checks its
/// proof. Keys are Ed25519 seeds; a proof is 80 bytes (Gamma, c, s), an output 64. This
/// side checks proofs (in Swift, `Edwards25519`); the prover is the server's
/// (`VRF.KeyPair`, WhisperShared). Checked against RFC 9381 appendix B.3.
public enum VRF {
    public static let proofBytes = 80
    public static let outputBytes = 64
    public static let publicKeyBytes = 32
    static let suite: UInt8 = 0x03
    static let challengeBytes = 16

    typealias Point = Edwards25519.Point

    /// The output of a proof (`ECVRF_proof_to_hash`), once the proof is known to verify;
    /// nil for bytes that are no proof.
    public static func output(ofProof proof: [UInt8]) -> [UInt8]? {
        guard proof.count == proofBytes, let gamma = Point.decode(Array(proof[0..<32])) else { return nil }
        return output(of: gamma)
    }

    /// `proof_to_hash` of a decoded Gamma.
    static func output(of gamma: Point) -> [UInt8] {
        sha512([suite, 0x03] + gamma.doubled().doubled().doubled().encoded() + [0x00])
    }

    /// The output for `alpha` when `proof` is a valid proof under `publicKey`
    /// (`ECVRF_verify`, with the key validated), else nil.
    public static func verify(publicKey: [UInt8], alpha: [UInt8], proof: [UInt8]) -> [UInt8]? {
        guard publicKey.count == publicKeyBytes, proof.count == proofBytes,
              let y = validPoint(publicKey) else { return nil }
        let c = Array(proof[32..<48])
        let s = Array(proof[48..<80])
        let cWide = c + [UInt8](repeating: 0, count: 16)
        // s must be a canonical scalar (below L); Gamma a point of the prime-order group
        // (what an honest prover's Gamma always is).
        guard Edwards25519.isCanonicalScalar(s), let gamma = validPoint(Array(proof[0..<32])),
              let h = hashToCurve(publicKey: publicKey, alpha: alpha) else { return nil }
        let hBytes = h.encoded()
        // U = s·B − c·Y, V = s·H − c·Gamma; a product that is the identity is refused,
        // as libsodium's multiplications refuse it.
        let sB = Edwards25519.base.multiplied(by: s), cY = y.multiplied(by: cWide)
        let sH = h.multiplied(by: s), cGamma = gamma.multiplied(by: cWide)
        guard !sB.isIdentity, !cY.isIdentity, !sH.isIdentity, !cGamma.isIdentity else { return nil }
        let u = (sB + -cY).encoded(), v = (sH + -cGamma).encoded()
        guard SecureBytes.constantTimeEqual(challenge(publicKey, hBytes, Array(proof[0..<32]), u, v), c) else { return nil }
        return output(of: gamma)
    }

    // MARK: - RFC 9381 section 5.4

    /// `ECVRF_encode_to_curve_try_and_increment`: the first counter whose hash decodes to
    /// a point, with the cofactor cleared, as its encoding.
    public static func encodeToCurve(publicKey: [UInt8], alpha: [UInt8]) -> [UInt8]? {
        hashToCurve(publicKey: publicKey, alpha: alpha)?.encoded()
    }

    /// The point `encodeToCurve` encodes, for a check that goes on with it.
    static func hashToCurve(publicKey: [UInt8], alpha: [UInt8]) -> Point? {
        for counter in 0...255 {
            let hash = sha512([suite, 0x01] + publicKey + alpha + [UInt8(counter), 0x00])
            if let point = Point.decode(Array(hash[0..<32])) {
                let cleared = point.doubled().doubled().doubled()
                if !cleared.isIdentity { return cleared }
            }
        }
        return nil
    }

    /// `ECVRF_challenge_generation`: the first 16 bytes of the hash of the five points.
    public static func challenge(_ y: [UInt8], _ h: [UInt8], _ gamma: [UInt8], _ u: [UInt8], _ v: [UInt8]) -> [UInt8] {
        Array(sha512([suite, 0x02] + y + h + gamma + u + v + [0x00])[0..<challengeBytes])
    }

    /// A point a key or Gamma may be: canonically encoded, on the curve, not of small
    /// order, and in the prime-order group (libsodium's `crypto_core_ed25519_is_valid_point`).
    static func validPoint(_ bytes: [UInt8]) -> Point? {
        guard let point = Point.decode(bytes), !point.hasSmallOrder, point.isInPrimeOrderGroup else { return nil }
        return point
    }

    static func sha512(_ bytes: [UInt8]) -> [UInt8] {
        Array(SHA512.hash(data: bytes))
    }
}
