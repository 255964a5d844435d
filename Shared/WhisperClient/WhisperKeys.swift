import Crypto
import Foundation
import WhisperProtocol

/// The keys of an identity, derived from the BIP39 seed of its phrase by HKDF-SHA256 (salt
/// "whisper"): `whisper/enc` the X25519 key, `whisper/sign` the Ed25519 seed,
/// `whisper/contacts` the backup key (docs/protocol.md section 4, "Keys").
public struct WhisperKeys: Sendable {
    public let encPrivateKey: [UInt8]
    public let encPublicKey: [UInt8]
    public let signing: Ed25519.KeyPair
    public let contactsKey: [UInt8]

    public var signPublicKey: [UInt8] { signing.publicKey }

    public init(seed: [UInt8]) {
        encPrivateKey = Self.derive(seed, info: "whisper/enc")
        encPublicKey = X25519Box.publicKey(privateKey: encPrivateKey)
        signing = Ed25519.KeyPair(seed: Self.derive(seed, info: "whisper/sign"))
        contactsKey = Self.derive(seed, info: "whisper/contacts")
    }

    public init(mnemonic: String, passphrase: String = "") throws(BIP39.Failure) {
        _ = try BIP39.entropy(of: mnemonic)
        // What a person typed (case, extra spaces) must give the same identity.
        let canonical = BIP39.normalizedWords(mnemonic).joined(separator: " ")
        self.init(seed: BIP39.seed(mnemonic: canonical, passphrase: passphrase))
    }

    /// HKDF-SHA256 with Whisper's salt.
    public static func derive(_ seed: [UInt8], info: String) -> [UInt8] {
        hkdf(ikm: seed, salt: Array("whisper".utf8), info: Array(info.utf8), length: 32)
    }

    public static func hkdf(ikm: [UInt8], salt: [UInt8], info: [UInt8], length: Int) -> [UInt8] {
        HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: ikm), salt: salt, info: info, outputByteCount: length
        ).withUnsafeBytes { Array($0) }
    }

    /// The proof for `register_proof`: Ed25519 over what `RegistrationProof` says the
    /// version signs (from `cryptoVersion` 2: the domain prefix, then the challenge).
    public func proveChallenge(_ challenge: [UInt8], cryptoVersion: Int = WhisperKeys.cryptoVersion) -> [UInt8] {
        signing.sign(RegistrationProof.signedBytes(challenge: challenge, cryptoVersion: cryptoVersion))
    }

    /// The signed request to delete `whisperId` for good (`account_delete`): Ed25519 over
    /// `AccountDeleteFields.signedBytes`, at `timestamp`.
    public func accountDeletion(whisperId: String, timestamp: Int64 = Clock.millisecondsNow()) -> AccountDeleteFields {
        let signature = signing.sign(AccountDeleteFields.signedBytes(whisperId: whisperId, timestamp: timestamp))
        return AccountDeleteFields(whisperId: whisperId, timestamp: timestamp, signature: Data(signature).base64EncodedString())
    }

    /// These keys as a peer sees them (what `GET /users/{id}/keys` returns for `whisperId`).
    public func peerKeys(whisperId: String) -> PeerKeys {
        PeerKeys(whisperId: whisperId, encPublicKey: encPublicKey, signPublicKey: signPublicKey)
    }

    /// The `cryptoVersion` this SDK speaks: 2, the domain-separated registration proof.
    public static let cryptoVersion = 2
}
