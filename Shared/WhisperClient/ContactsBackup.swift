import Foundation
import WhisperProtocol

/// The contact list as it is backed up (spec 14.1): sealed with `contactsKey`, derived
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

    /// The body of `PUT /backup/contacts`: `{nonce, ciphertext, cryptoVersion, protocolVersion}`.
    public func sealed(with keys: WhisperKeys) throws -> [String: Any] {
        let nonce = Sodium.randomBytes(SecretBox.nonceBytes)
        let plaintext = Array(try JSONEncoder().encode(self))
        let ciphertext = SecretBox.seal(plaintext, nonce: nonce, key: keys.contactsKey)
        return [
            "nonce": Data(nonce).base64EncodedString(), "ciphertext": Data(ciphertext).base64EncodedString(),
            "cryptoVersion": 1, "protocolVersion": 1,
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
