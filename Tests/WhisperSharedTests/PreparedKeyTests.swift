import CSodium
import Foundation
import Testing
import WhisperProtocol
@testable import WhisperShared

/// The services' Ed25519 verification against a prepared key (`Ed25519.verifyPrepared`,
/// CEd25519Verify) gives libsodium's answer on every input: RFC 8032's vectors, valid
/// signatures, every kind of damage, keys and R values of small order or not canonical,
/// S not below the group order, and random bytes.
@Suite struct PreparedKeyTests {
    init() { #expect(sodium_init() >= 0) }

    /// libsodium's own answer, straight from its C API.
    static func sodium(_ signature: [UInt8], _ message: [UInt8], _ publicKey: [UInt8]) -> Bool {
        crypto_sign_verify_detached(signature, message, UInt64(message.count), publicKey) == 0
    }

    /// Both answers for one input, with a fresh cache so that a key's preparation is
    /// part of every case.
    static func bothAnswers(_ signature: [UInt8], _ message: [UInt8], _ publicKey: [UInt8], keys: Ed25519.PreparedKeys) -> (sodium: Bool, prepared: Bool) {
        (sodium(signature, message, publicKey), Ed25519.verifyPrepared(signature: signature, message: message, publicKey: publicKey, keys: keys))
    }

    static func random(_ count: Int) -> [UInt8] { SecureBytes.random(count) }

    /// p = 2^255 - 19 and the group order L, little-endian.
    static let p: [UInt8] = [0xed] + [UInt8](repeating: 0xff, count: 30) + [0x7f]
    static let order = [UInt8](hex: "edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010")!

    static func add(_ a: [UInt8], _ b: [UInt8]) -> [UInt8] {
        var carry = 0, out = [UInt8](repeating: 0, count: 32)
        for index in 0..<32 {
            let sum = Int(a[index]) + Int(b[index]) + carry
            out[index] = UInt8(sum & 0xff)
            carry = sum >> 8
        }
        return out
    }

    static func little(_ value: Int) -> [UInt8] {
        (0..<32).map { $0 < 8 ? UInt8((value >> (8 * $0)) & 0xff) : 0 }
    }

    /// Point encodings libsodium treats specially: the y of every point of small order
    /// (0, 1, p - 1, and the two of order 8 as libsodium lists them), the y values p to
    /// p + 18 that are not canonical, small values, each with and without the sign bit.
    static func specialEncodings() -> [[UInt8]] {
        let orderEight = [
            [UInt8](hex: "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05")!,
            [UInt8](hex: "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")!,
        ]
        let minusOne = [UInt8](hex: "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f")!
        let encodings: [[UInt8]] = (0..<20).map { little($0) } + (0..<19).map { add(p, little($0)) } + [minusOne] + orderEight
        return encodings + encodings.map { var flipped = $0; flipped[31] ^= 0x80; return flipped }
    }

    @Test func rfc8032VectorsVerify() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../docs/test-vectors/ed25519-rfc8032.json")
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as! [String: Any]
        let cases = json["cases"] as! [[String: String]]
        #expect(!cases.isEmpty)
        let keys = Ed25519.PreparedKeys(capacity: 16)
        for vector in cases {
            let publicKey = [UInt8](hex: vector["publicKey"]!)!, message = [UInt8](hex: vector["message"]!)!
            let signature = [UInt8](hex: vector["signature"]!)!
            #expect(Ed25519.verifyPrepared(signature: signature, message: message, publicKey: publicKey, keys: keys), "\(vector["name"]!)")
            var forged = signature
            forged[40] ^= 4
            #expect(!Ed25519.verifyPrepared(signature: forged, message: message, publicKey: publicKey, keys: keys), "\(vector["name"]!)")
        }
    }

    /// Valid signatures are accepted, and each damage (a bit of R, of S, of the message,
    /// of the key) gets libsodium's answer.
    @Test func validAndDamagedSignaturesGetLibsodiumsAnswer() {
        var accepted = 0, cases = 0
        for round in 0..<1_000 {
            let pair = Ed25519.KeyPair(seed: Self.random(32))
            let message = Self.random(round % 3 == 0 ? 32 : 1 + round % 200)
            let signature = pair.sign(message)
            let keys = Ed25519.PreparedKeys(capacity: 4)
            var inputs = [(signature, message, pair.publicKey)]
            var bit = signature
            bit[Int.random(in: 0..<64)] ^= UInt8(1) << UInt8.random(in: 0..<8)
            inputs.append((bit, message, pair.publicKey))
            var text = message
            text[Int.random(in: 0..<text.count)] ^= 1
            inputs.append((signature, text, pair.publicKey))
            var key = pair.publicKey
            key[Int.random(in: 0..<32)] ^= UInt8(1) << UInt8.random(in: 0..<8)
            inputs.append((signature, message, key))
            // S + L: the same point, but S not canonical.
            inputs.append((Array(signature[0..<32]) + Self.add(Array(signature[32...]), Self.order), message, pair.publicKey))
            for (sig, msg, publicKey) in inputs {
                let answers = Self.bothAnswers(sig, msg, publicKey, keys: keys)
                #expect(answers.sodium == answers.prepared, "round \(round): \(sig.hexString) \(publicKey.hexString)")
                cases += 1
                if answers.prepared { accepted += 1 }
            }
            #expect(Self.sodium(signature, message, pair.publicKey))
        }
        // Every valid one, and a damaged key now and then that happens to be the same point.
        #expect(accepted >= 1_000 && accepted < 1_050, "\(accepted) of \(cases) accepted")
    }

    /// Keys and R values of small order, not canonical, or near p; random keys (about
    /// half of them points) with random signatures.
    @Test func specialAndRandomEncodingsGetLibsodiumsAnswer() {
        let special = Self.specialEncodings()
        #expect(special.count >= 80)
        let keys = Ed25519.PreparedKeys(capacity: 64)
        var refused = 0
        for round in 0..<40 {
            let pair = Ed25519.KeyPair(seed: Self.random(32))
            let message = Self.random(32)
            let signature = pair.sign(message)
            for encoding in special {
                var withR = signature
                withR.replaceSubrange(0..<32, with: encoding)
                var cases = [(withR, pair.publicKey), (signature, encoding)]
                var randomS = Self.random(64)
                randomS[63] &= 0x0f
                cases.append((randomS, encoding))
                for (sig, key) in cases {
                    let answers = Self.bothAnswers(sig, message, key, keys: keys)
                    #expect(answers.sodium == answers.prepared, "round \(round): R \(sig[0..<32].hexString) key \(key.hexString)")
                    if !answers.prepared { refused += 1 }
                }
            }
            for _ in 0..<50 {
                let key = Self.random(32)
                var randomS = Self.random(64)
                randomS[63] &= 0x0f
                for sig in [randomS, signature] {
                    let answers = Self.bothAnswers(sig, message, key, keys: keys)
                    #expect(answers.sodium == answers.prepared, "round \(round): key \(key.hexString)")
                }
            }
        }
        #expect(refused > 0)
        #expect(keys.count <= 64)
    }

    /// Two signatures whose equation holds, [S]B - [h]A = R, but only through a point of
    /// small order, which libsodium refuses: a key that is the identity (any R = [r]B
    /// with S = r), and R the identity (S = h·a for the key's own scalar a).
    @Test func equationsThatHoldThroughSmallOrderPointsAreRefused() {
        let identity = Self.little(1)
        let message = Self.random(32)
        func reduce(_ wide: [UInt8]) -> [UInt8] {
            var out = [UInt8](repeating: 0, count: 32)
            crypto_core_ed25519_scalar_reduce(&out, wide)
            return out
        }
        func h(_ r: [UInt8], _ key: [UInt8]) -> [UInt8] {
            var digest = [UInt8](repeating: 0, count: 64)
            let input = r + key + message
            crypto_hash_sha512(&digest, input, UInt64(input.count))
            return reduce(digest)
        }
        let keys = Ed25519.PreparedKeys(capacity: 8)
        // The identity as the key.
        let r = reduce(Self.random(64))
        var point = [UInt8](repeating: 0, count: 32)
        #expect(crypto_scalarmult_ed25519_base_noclamp(&point, r) == 0)
        let byIdentity = point + r
        #expect(!Self.sodium(byIdentity, message, identity))
        #expect(!Ed25519.verifyPrepared(signature: byIdentity, message: message, publicKey: identity, keys: keys))
        // The identity as R, for a real key: S = h·a.
        let seed = Self.random(32)
        var publicKey = [UInt8](repeating: 0, count: 32), secret = [UInt8](repeating: 0, count: 64)
        #expect(crypto_sign_seed_keypair(&publicKey, &secret, seed) == 0)
        var hashed = [UInt8](repeating: 0, count: 64)
        crypto_hash_sha512(&hashed, seed, 32)
        hashed[0] &= 248
        hashed[31] &= 127
        hashed[31] |= 64
        let a = reduce(Array(hashed[0..<32]) + [UInt8](repeating: 0, count: 32))
        var s = [UInt8](repeating: 0, count: 32)
        crypto_core_ed25519_scalar_mul(&s, h(identity, publicKey), a)
        let identityR = identity + s
        #expect(!Self.sodium(identityR, message, publicKey))
        #expect(!Ed25519.verifyPrepared(signature: identityR, message: message, publicKey: publicKey, keys: keys))
        // The same key's real signature passes: the refusals above are the small order's.
        #expect(Ed25519.verifyPrepared(signature: Ed25519.KeyPair(seed: seed).sign(message), message: message, publicKey: publicKey, keys: keys))
    }

    /// The cache holds at most its capacity, and a key that fell out verifies again.
    @Test func theCacheStaysWithinItsCapacity() {
        let keys = Ed25519.PreparedKeys(capacity: 8)
        let pairs = (0..<40).map { _ in Ed25519.KeyPair(seed: Self.random(32)) }
        let message = Self.random(32)
        for _ in 0..<3 {
            for pair in pairs {
                #expect(Ed25519.verifyPrepared(signature: pair.sign(message), message: message, publicKey: pair.publicKey, keys: keys))
                #expect(keys.count <= 8)
            }
        }
    }
}
