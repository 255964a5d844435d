import CSodium
import Foundation
import Testing
@testable import WhisperProtocol
import WhisperShared

/// The client's crypto in Swift (WhisperProtocol: XSalsa20-Poly1305, `crypto_box` on
/// swift-crypto's X25519, edwards25519 and the VRF's check) against published vectors and,
/// byte for byte, against libsodium on random inputs.
@Suite struct ClientCryptoTests {
    init() { #expect(sodium_init() >= 0) }

    static func hex(_ text: String) -> [UInt8] {
        [UInt8](hex: text)!
    }

    // NaCl's own test (tests/secretbox.c, box.c and core1.c): Alice's secret key, Bob's
    // public key, their shared secret and its HSalsa20 ("firstkey"), a nonce, a 131-byte
    // message and its box.
    static let aliceSecret = hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
    static let bobPublic = hex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f")
    static let firstKey = hex("1b27556473e985d462cd51197a9a46c76009549eac6474f206c4ee0844f68389")
    static let naclNonce = hex("69696ee955b62b73cd62bda875fc73d68219e0036b7a0b37")
    static let naclMessage = hex(
        "be075fc53c81f2d5cf141316ebeb0c7b5228c52a4c62cbd44b66849b64244ffce5ecbaaf33bd751a1ac728d45e6c61296cdc3c01"
            + "233561f41db66cce314adb310e3be8250c46f06dceea3a7fa1348057e2f6556ad6b1318a024a838f21af1fde048977eb48f59f"
            + "fd4924ca1c60902e52f0a089bc76897040e082f937763848645e0705")
    static let naclBox = hex(
        "f3ffc7703f9400e52a7dfb4b3d3305d98e993b9f48681273c29650ba32fc76ce48332ea7164d96a4476fb8c531a1186ac0dfc17c"
            + "98dce87b4da7f011ec48c97271d2c20f9b928fe2270d6fb863d51738b48eeee314a7cc8ab932164548e526ae90224368517acf"
            + "eabd6bb3732bc0e9da99832b61ca01b6de56244a9e88d5f9b37973f622a43d14a6599b1f654cb45a74e355a5")

    @Test func naclsVectorsPass() {
        #expect(X25519Box.sharedKey(publicKey: Self.bobPublic, privateKey: Self.aliceSecret) == Self.firstKey)
        #expect(SecretBox.seal(Self.naclMessage, nonce: Self.naclNonce, key: Self.firstKey) == Self.naclBox)
        #expect(X25519Box.seal(Self.naclMessage, nonce: Self.naclNonce, recipientPublicKey: Self.bobPublic, senderPrivateKey: Self.aliceSecret) == Self.naclBox)
        #expect(SecretBox.open(Self.naclBox, nonce: Self.naclNonce, key: Self.firstKey) == Self.naclMessage)
        var tampered = Self.naclBox
        tampered[40] ^= 1
        #expect(SecretBox.open(tampered, nonce: Self.naclNonce, key: Self.firstKey) == nil)
    }

    /// RFC 8439 section 2.5.2.
    @Test func poly1305MatchesRFC8439() {
        let key = Self.hex("85d6be7857556d337f4452fe42d506a80103808afb0db2fd4abff6af4149f51b")
        let tag = Poly1305.tag(ArraySlice(Array("Cryptographic Forum Research Group".utf8)), key: key)
        #expect(tag == Self.hex("a8061dc1305136c6c22b8baf0c0127a9"))
    }

    /// Random keys, nonces and messages of every length up to 300 bytes: the same boxes as
    /// libsodium's, opened by both, and refused by both once a byte is changed.
    @Test func secretBoxesAreLibsodiumsByteForByte() {
        for round in 0..<10_000 {
            let key = SecureBytes.random(32), nonce = SecureBytes.random(24)
            let message = SecureBytes.random(round % 301)
            var theirs = [UInt8](repeating: 0, count: message.count + 16)
            _ = crypto_secretbox_easy(&theirs, message, UInt64(message.count), nonce, key)
            let ours = SecretBox.seal(message, nonce: nonce, key: key)
            guard ours == theirs else { Issue.record("a box differs from libsodium's (round \(round))"); return }
            #expect(SecretBox.open(theirs, nonce: nonce, key: key) == message)
            var tampered = theirs
            tampered[round % tampered.count] ^= UInt8(1 << (round % 8))
            var opened = [UInt8](repeating: 0, count: message.count)
            let sodiumOpens = crypto_secretbox_open_easy(&opened, tampered, UInt64(tampered.count), nonce, key) == 0
            #expect(!sodiumOpens && SecretBox.open(tampered, nonce: nonce, key: key) == nil)
        }
    }

    /// Random key pairs: the same shared keys and boxes as libsodium's `crypto_box`.
    @Test func boxesAreLibsodiumsByteForByte() {
        for round in 0..<10_000 {
            let mine = SecureBytes.random(32), theirsSecret = SecureBytes.random(32)
            var theirsPublic = [UInt8](repeating: 0, count: 32)
            _ = crypto_scalarmult_base(&theirsPublic, theirsSecret)
            #expect(X25519Box.publicKey(privateKey: theirsSecret) == theirsPublic)
            var sodiumKey = [UInt8](repeating: 0, count: 32)
            _ = crypto_box_beforenm(&sodiumKey, theirsPublic, mine)
            guard X25519Box.sharedKey(publicKey: theirsPublic, privateKey: mine) == sodiumKey else {
                Issue.record("a shared key differs from libsodium's (round \(round))"); return
            }
            let nonce = SecureBytes.random(24), message = SecureBytes.random(round % 97)
            var sodiumBox = [UInt8](repeating: 0, count: message.count + 16)
            _ = crypto_box_easy(&sodiumBox, message, UInt64(message.count), nonce, theirsPublic, mine)
            #expect(X25519Box.seal(message, nonce: nonce, recipientPublicKey: theirsPublic, senderPrivateKey: mine) == sodiumBox)
        }
        // A public key of small order: no key, as libsodium refuses one.
        let smallOrder = [UInt8](repeating: 0, count: 32)
        var ignored = [UInt8](repeating: 0, count: 32)
        #expect(crypto_box_beforenm(&ignored, smallOrder, SecureBytes.random(32)) != 0)
        #expect(X25519Box.sharedKey(publicKey: smallOrder, privateKey: SecureBytes.random(32)) == nil)
    }

    /// Random 32-byte strings and random points: decoded, added, validated and multiplied
    /// as libsodium does.
    @Test func edwards25519IsLibsodiumsOnRandomInputs() {
        var points = 0
        for round in 0..<10_000 {
            // Half random bytes (about half of them on the curve), half points of the group.
            var bytes = SecureBytes.random(32)
            if round % 2 == 1 { crypto_core_ed25519_random(&bytes) }
            var sum = [UInt8](repeating: 0, count: 32)
            let sodiumDecodes = crypto_core_ed25519_add(&sum, bytes, Edwards25519.identityEncoding) == 0 && sum == bytes
            let point = Edwards25519.Point.decode(bytes)
            guard (point != nil) == sodiumDecodes else { Issue.record("decoding differs from libsodium's (round \(round))"); return }
            guard let point else { continue }
            points += 1
            var doubled = [UInt8](repeating: 0, count: 32)
            _ = crypto_core_ed25519_add(&doubled, bytes, bytes)
            #expect(point.doubled().encoded() == doubled && (point + point).encoded() == doubled)
            #expect((point + -point).isIdentity)
            // Validity (small order, prime-order group) on a tenth: each costs a multiplication by L.
            if round % 10 < 2 {
                #expect((VRF.validPoint(bytes) != nil) == (crypto_core_ed25519_is_valid_point(bytes) == 1))
            }
            if round % 10 == 1 {
                let scalar = SecureBytes.random(32).enumerated().map { $0.offset == 31 ? $0.element & 0x0f : $0.element }
                var product = [UInt8](repeating: 0, count: 32)
                if crypto_scalarmult_ed25519_noclamp(&product, scalar, bytes) == 0 {
                    #expect(point.multiplied(by: scalar).encoded() == product)
                }
                var base = [UInt8](repeating: 0, count: 32)
                _ = crypto_scalarmult_ed25519_base_noclamp(&base, scalar)
                #expect(Edwards25519.base.multiplied(by: scalar).encoded() == base)
            }
        }
        #expect(points > 5_000)
    }

    /// Proofs of the server's prover (libsodium) checked here: every honest proof
    /// verifies with the same output, and a changed byte anywhere makes it fail.
    @Test func vrfProofsOfTheServerVerifyAndChangedOnesDoNot() {
        let keys = VRF.KeyPair(seed: SecureBytes.random(32))
        for round in 0..<200 {
            let alpha = SecureBytes.random(round % 40)
            let proof = keys.prove(alpha)
            let output = VRF.verify(publicKey: keys.publicKey, alpha: alpha, proof: proof)
            #expect(output != nil && output == VRF.output(ofProof: proof))
            var changed = proof
            changed[round % VRF.proofBytes] ^= UInt8(1 << (round % 8))
            #expect(VRF.verify(publicKey: keys.publicKey, alpha: alpha, proof: changed) == nil)
            #expect(VRF.verify(publicKey: keys.publicKey, alpha: alpha + [1], proof: proof) == nil)
        }
    }
}
