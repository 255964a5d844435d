import Foundation
import Testing
import WhisperClient
import WhisperShared

/// The SDK against every vector in docs/test-vectors/ (made by independent implementations).
@Suite struct VectorTests {
    static let directory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("docs/test-vectors")

    static func load(_ name: String) throws -> [String: Any] {
        let data = try Data(contentsOf: directory.appendingPathComponent(name))
        return try JSONSerialization.jsonObject(with: data) as! [String: Any]
    }

    static func hex(_ text: String) -> [UInt8] {
        [UInt8](hex: text)!
    }

    static func base64(_ text: String) -> [UInt8] { [UInt8](Data(base64Encoded: text)!) }

    @Test func bip39EnglishVectors() throws {
        let cases = try Self.load("bip39-english.json")["cases"] as! [[String: String]]
        #expect(cases.count == 24)
        for vector in cases {
            let entropy = Self.hex(vector["entropy"]!)
            let mnemonic = vector["mnemonic"]!
            #expect(try BIP39.mnemonic(entropy: entropy) == mnemonic)
            #expect(try BIP39.entropy(of: mnemonic) == entropy)
            #expect(BIP39.seed(mnemonic: mnemonic, passphrase: vector["passphrase"]!).hexString == vector["seed"]!)
        }
    }

    @Test func bip39RefusesBadMnemonics() {
        let good = "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about"
        #expect(BIP39.isValid(good))
        #expect(BIP39.isValid("  Abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon ABOUT "))
        #expect(throws: BIP39.Failure.checksum) { try BIP39.entropy(of: good.replacingOccurrences(of: "about", with: "abandon")) }
        #expect(throws: BIP39.Failure.unknownWord("whisper!")) {
            try BIP39.entropy(of: good.replacingOccurrences(of: "about", with: "whisper!"))
        }
        #expect(throws: BIP39.Failure.wordCount(11)) { try BIP39.entropy(of: "abandon " + String(repeating: "abandon ", count: 9) + "about") }
        let generated = BIP39.generateMnemonic()
        #expect(generated.split(separator: " ").count == 12)
        #expect(BIP39.isValid(generated))
    }

    @Test func hkdfRFC5869Vectors() throws {
        let cases = try Self.load("hkdf-sha256-rfc5869.json")["cases"] as! [[String: Any]]
        #expect(cases.count == 3)
        for vector in cases {
            let okm = WhisperKeys.hkdf(
                ikm: Self.hex(vector["ikm"] as! String), salt: Self.hex(vector["salt"] as! String),
                info: Self.hex(vector["info"] as! String), length: vector["length"] as! Int
            )
            #expect(okm.hexString == vector["okm"] as! String, "\(vector["name"]!)")
        }
    }

    @Test func ed25519RFC8032Vectors() throws {
        let cases = try Self.load("ed25519-rfc8032.json")["cases"] as! [[String: String]]
        for vector in cases {
            let keys = Ed25519.KeyPair(seed: Self.hex(vector["secretKey"]!))
            let message = Self.hex(vector["message"]!)
            #expect(keys.publicKey.hexString == vector["publicKey"]!, "\(vector["name"]!)")
            let signature = keys.sign(message)
            #expect(signature.hexString == vector["signature"]!, "\(vector["name"]!)")
            #expect(Ed25519.verify(signature: signature, message: message, publicKey: keys.publicKey))
            var forged = signature
            forged[0] ^= 1
            #expect(!Ed25519.verify(signature: forged, message: message, publicKey: keys.publicKey))
        }
    }

    /// The key directory's VRF against RFC 9381's vectors: the same proof and output, a
    /// proof that verifies, and none that verifies once any byte of it, or the input,
    /// changes.
    @Test func vrfRFC9381Vectors() throws {
        let cases = try Self.load("vrf-ecvrf-edwards25519-sha512-tai.json")["cases"] as! [[String: String]]
        #expect(cases.count == 3)
        for vector in cases {
            let name = vector["name"]!
            let keys = VRF.KeyPair(seed: Self.hex(vector["secretKey"]!))
            let alpha = Self.hex(vector["alpha"]!)
            #expect(keys.publicKey.hexString == vector["publicKey"]!, "\(name)")
            let proof = keys.prove(alpha)
            #expect(proof.hexString == vector["pi"]!, "\(name)")
            #expect(VRF.verify(publicKey: keys.publicKey, alpha: alpha, proof: proof)?.hexString == vector["beta"]!, "\(name)")
            #expect(VRF.output(ofProof: proof)?.hexString == vector["beta"]!, "\(name)")
            for index in proof.indices {
                var flipped = proof
                flipped[index] ^= 0x01
                #expect(VRF.verify(publicKey: keys.publicKey, alpha: alpha, proof: flipped) == nil, "\(name): byte \(index) flipped")
            }
            #expect(VRF.verify(publicKey: keys.publicKey, alpha: alpha + [0], proof: proof) == nil, "\(name): another input")
            let other = VRF.KeyPair(seed: [UInt8](repeating: 7, count: 32))
            #expect(VRF.verify(publicKey: other.publicKey, alpha: alpha, proof: proof) == nil, "\(name): another key")
        }
    }

    @Test func whisperChainFromMnemonicToSignature() throws {
        let chain = try Self.load("whisper-chain.json")
        let identities = chain["identities"] as! [[String: String]]
        var derived: [WhisperKeys] = []
        for vector in identities {
            let seed = BIP39.seed(mnemonic: vector["mnemonic"]!, passphrase: vector["passphrase"]!)
            #expect(seed.hexString == vector["seed"]!)
            #expect(WhisperKeys.derive(seed, info: "whisper/enc").hexString == vector["encSeed"]!)
            #expect(WhisperKeys.derive(seed, info: "whisper/sign").hexString == vector["signSeed"]!)
            let keys = try WhisperKeys(mnemonic: vector["mnemonic"]!, passphrase: vector["passphrase"]!)
            #expect(keys.contactsKey.hexString == vector["contactsKey"]!)
            #expect(Data(keys.encPublicKey).base64EncodedString() == vector["encPublicKey"]!)
            #expect(Data(keys.signPublicKey).base64EncodedString() == vector["signPublicKey"]!)
            derived.append(keys)
        }

        let signatures = chain["signatures"] as! [String: Any]
        let signer = derived[signatures["signer"] as! Int]
        var headCases = 0
        for vector in signatures["cases"] as! [[String: Any]] {
            let head = try (vector["directoryHead"] as? [String: Any]).map {
                try JSONDecoder().decode(DirectoryHead.self, from: JSONSerialization.data(withJSONObject: $0))
            }
            headCases += head == nil ? 0 : 1
            let bytes = CanonicalSigning.bytes(
                messageType: vector["messageType"] as! String, messageId: vector["messageId"] as! String,
                from: vector["from"] as! String, toOrGroupId: vector["toOrGroupId"] as! String,
                timestamp: (vector["timestamp"] as! NSNumber).int64Value,
                nonce: vector["nonce"] as! String, ciphertext: vector["ciphertext"] as! String, directoryHead: head
            )
            #expect(String(decoding: bytes, as: UTF8.self) == vector["signedBytes"] as! String)
            let signature = CanonicalSigning.sign(bytes, with: signer.signing)
            #expect(Data(signature).base64EncodedString() == vector["sig"] as! String)
            #expect(CanonicalSigning.verify(signature, over: bytes, publicKey: signer.signPublicKey))
            #expect(!CanonicalSigning.verify(signature, over: bytes + [0], publicKey: signer.signPublicKey))
        }
        #expect(headCases == 1, "one case signs a directory head line")

        let proof = chain["registrationProof"] as! [String: Any]
        let challenge = Self.base64(proof["challenge"] as! String)
        #expect(Data(derived[proof["signer"] as! Int].proveChallenge(challenge, cryptoVersion: 1)).base64EncodedString() == proof["signature"] as! String)
        // cryptoVersion 2: the domain prefix, then the challenge.
        let separated = chain["registrationProofV2"] as! [String: Any]
        let separatedChallenge = Self.base64(separated["challenge"] as! String)
        #expect(Array(RegistrationProof.domainPrefix) == Array((separated["prefix"] as! String).utf8))
        #expect(RegistrationProof.signedBytes(challenge: separatedChallenge, cryptoVersion: 2).map { String(format: "%02x", $0) }.joined()
            == separated["signedBytes"] as! String)
        let prover = derived[separated["signer"] as! Int]
        #expect(Data(prover.proveChallenge(separatedChallenge, cryptoVersion: 2)).base64EncodedString() == separated["signature"] as! String)
        #expect(prover.proveChallenge(separatedChallenge, cryptoVersion: 2) != prover.proveChallenge(separatedChallenge, cryptoVersion: 1))

        for vector in chain["whisperIds"] as! [[String: Any]] {
            #expect(WhisperID.isValid(vector["whisperId"] as! String) == vector["valid"] as! Bool, "\(vector["whisperId"]!)")
        }
    }

    @Test func contactsBackupSealsAndOpensAsTheVectorSays() throws {
        let vector = try Self.load("contacts-backup.json")
        let keys = try WhisperKeys(mnemonic: vector["mnemonic"] as! String)
        #expect(keys.contactsKey == Self.hex(vector["contactsKey"] as! String))
        let plaintext = Array((vector["plaintext"] as! String).utf8)
        let nonce = Self.base64(vector["nonce"] as! String)
        // Opening the published blob gives the published list.
        let opened = try ContactsBackup.open(nonce: vector["nonce"] as! String, ciphertext: vector["ciphertext"] as! String, with: keys)
        #expect(opened == (try JSONDecoder().decode(ContactsBackup.self, from: Data(plaintext))))
        #expect(opened.contacts.first?.displayName == "Zoë")
        // Sealing that list with the same nonce gives the same bytes: the SDK's JSON and box.
        #expect(try opened.jsonBytes() == plaintext)
        let sealed = try opened.seal(with: keys, nonce: nonce)
        #expect(sealed.nonce == vector["nonce"] as! String)
        #expect(sealed.ciphertext == vector["ciphertext"] as! String)
        // Another phrase's key does not open it; a wrong-length nonce is refused, not trapped on.
        let other = try WhisperKeys(mnemonic: "legal winner thank year wave sausage worth useful legal winner thank yellow")
        #expect(throws: MessageCryptoError.cannotDecrypt) {
            _ = try ContactsBackup.open(nonce: vector["nonce"] as! String, ciphertext: vector["ciphertext"] as! String, with: other)
        }
        #expect(throws: MessageCryptoError.invalidNonce) { _ = try opened.seal(with: keys, nonce: [1, 2, 3]) }
    }

    @Test func generatedWhisperIDsCarryAValidChecksum() {
        for _ in 0..<200 {
            let id = WhisperID.generate()
            #expect(Format.isWhisperID(id))
            #expect(WhisperID.isValid(id))
        }
        let id = WhisperID.generate()
        #expect(WhisperID.normalize(id.lowercased().replacingOccurrences(of: "-", with: " ")) == id)
    }

    @Test func boxAndSecretBoxRoundTrip() {
        let alice = WhisperKeys(seed: SecureBytes.random(64))
        let bob = WhisperKeys(seed: SecureBytes.random(64))
        let nonce = SecureBytes.random(24)
        let sealed = X25519Box.seal(Array("hi bob".utf8), nonce: nonce, recipientPublicKey: bob.encPublicKey, senderPrivateKey: alice.encPrivateKey)
        #expect(X25519Box.open(sealed, nonce: nonce, senderPublicKey: alice.encPublicKey, recipientPrivateKey: bob.encPrivateKey) == Array("hi bob".utf8))
        #expect(X25519Box.open(sealed, nonce: nonce, senderPublicKey: bob.encPublicKey, recipientPrivateKey: bob.encPrivateKey) == nil)
        let key = SecureBytes.random(32)
        let boxed = SecretBox.seal(Array("contacts".utf8), nonce: nonce, key: key)
        #expect(SecretBox.open(boxed, nonce: nonce, key: key) == Array("contacts".utf8))
        #expect(SecretBox.open(boxed, nonce: nonce, key: SecureBytes.random(32)) == nil)
    }

    @Test func aConversationKeySealsAndOpensWhatThePerMessageBoxDoes() throws {
        let alice = WhisperKeys(seed: SecureBytes.random(64))
        let bob = WhisperKeys(seed: SecureBytes.random(64))
        let alicePeer = PeerKeys(whisperId: "WSP-AAAA-BBBB-CCCC", encPublicKey: alice.encPublicKey, signPublicKey: alice.signPublicKey)
        let bobPeer = PeerKeys(whisperId: "WSP-DDDD-EEEE-FFFF", encPublicKey: bob.encPublicKey, signPublicKey: bob.signPublicKey)
        let aliceKey = try #require(ConversationKey(mine: alice, peer: bobPeer))
        let bobKey = try #require(ConversationKey(mine: bob, peer: alicePeer))
        let strangerKey = try #require(ConversationKey(mine: WhisperKeys(seed: SecureBytes.random(64)), peer: alicePeer))
        // Sealed with the conversation key, opened per message, and the other way round.
        for (sealKey, openKey) in [(aliceKey, nil), (nil, bobKey), (aliceKey, bobKey)] as [(ConversationKey?, ConversationKey?)] {
            let message = MessageCrypto.makeMessage(Array("hi bob".utf8), from: (alicePeer.whisperId, alice), to: bobPeer, sessionToken: String(repeating: "s", count: 43), key: sealKey)
            let received = MessageReceived(message.fields)
            #expect(try MessageCrypto.open(received, by: (bobPeer.whisperId, bob), sender: alicePeer, key: openKey) == Array("hi bob".utf8))
            #expect(throws: MessageCryptoError.cannotDecrypt) {
                try MessageCrypto.open(received, by: (bobPeer.whisperId, bob), sender: alicePeer, key: strangerKey)
            }
        }
        // An all-zero public key gives no usable key.
        #expect(ConversationKey(mine: alice, peer: PeerKeys(whisperId: "WSP-ZZZZ-ZZZZ-ZZZZ", encPublicKey: [UInt8](repeating: 0, count: 32), signPublicKey: [])) == nil)
    }
}
