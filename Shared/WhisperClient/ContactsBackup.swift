import Foundation
import WhisperProtocol

/// The contact list as it is backed up (docs/protocol.md section 12, "Contacts backup"): sealed with `contactsKey`, derived
/// from the seed phrase, so a device restored from the phrase alone can open it.
public struct ContactsBackup: Codable, Sendable, Equatable {
    public var version: Int
    public var exportedAt: Int64
    public var contacts: [Contact]

    public struct Contact: Codable, Sendable, Equatable {
        public var whisperId: String
        public var addedAt: Int64
        public var displayName: String?
        public var notes: String?
        public var isBlocked: Bool
        public var isPinned: Bool
        public var isMuted: Bool

        public init(
            whisperId: String, addedAt: Int64, displayName: String? = nil, notes: String? = nil, isBlocked: Bool = false,
            isPinned: Bool = false, isMuted: Bool = false
        ) {
            self.whisperId = whisperId
            self.addedAt = addedAt
            self.displayName = displayName
            self.notes = notes
            self.isBlocked = isBlocked
            self.isPinned = isPinned
            self.isMuted = isMuted
        }
    }

    public init(version: Int = 1, exportedAt: Int64 = Clock.millisecondsNow(), contacts: [Contact]) {
        self.version = version
        self.exportedAt = exportedAt
        self.contacts = contacts
    }

    /// The contact list as JSON (keys sorted, so the same list gives the same bytes).
    public func jsonBytes() throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return Array(try encoder.encode(self))
    }

    /// Sealed for `PUT /backup/contacts`: `crypto_secretbox(jsonBytes, nonce, contactsKey)`
    /// (the same section), under a fresh random nonce unless one is given (test vectors).
    public func seal(with keys: WhisperKeys, nonce: [UInt8]? = nil) throws -> SealedContactsBackup {
        let nonce = nonce ?? SecureBytes.random(SecretBox.nonceBytes)
        guard nonce.count == SecretBox.nonceBytes else { throw MessageCryptoError.invalidNonce }
        let ciphertext = SecretBox.seal(try jsonBytes(), nonce: nonce, key: keys.contactsKey)
        return SealedContactsBackup(nonce: Data(nonce).base64EncodedString(), ciphertext: Data(ciphertext).base64EncodedString())
    }

    /// The body of `PUT /backup/contacts` as a dictionary (tests alter it field by field).
    public func sealed(with keys: WhisperKeys) throws -> [String: Any] {
        let sealed = try seal(with: keys)
        return [
            "nonce": sealed.nonce, "ciphertext": sealed.ciphertext,
            "cryptoVersion": sealed.cryptoVersion, "protocolVersion": sealed.protocolVersion,
        ]
    }

    /// Opens what `GET /backup/contacts` returned.
    public static func open(nonce: String, ciphertext: String, with keys: WhisperKeys) throws(MessageCryptoError) -> ContactsBackup {
        guard let nonceBytes = Data(base64Encoded: nonce), let box = Data(base64Encoded: ciphertext),
              let plaintext = SecretBox.open([UInt8](box), nonce: [UInt8](nonceBytes), key: keys.contactsKey),
              let backup = try? JSONDecoder().decode(ContactsBackup.self, from: Data(plaintext)) else {
            throw .cannotDecrypt
        }
        return backup
    }
}

/// The body of `PUT /backup/contacts`: base64 `nonce` (24 bytes) and `ciphertext`.
public struct SealedContactsBackup: Codable, Sendable, Equatable {
    public var nonce: String
    public var ciphertext: String
    public var cryptoVersion = 1
    public var protocolVersion = 1

    public init(nonce: String, ciphertext: String) {
        self.nonce = nonce
        self.ciphertext = ciphertext
    }
}
