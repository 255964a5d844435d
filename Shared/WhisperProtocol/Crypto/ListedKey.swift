import Foundation

/// An Ed25519 public key as a list of keys names it for rotation (the floor keys of
/// `GET /ptt/floor-key`, the key directory's signing keys of `GET /kt/keys`): a signature
/// names its key by ID, and every key that may have signed stays listed until nothing
/// signed by it is still checked.
public struct ListedKey: Codable, Equatable, Sendable {
    /// The first 8 bytes of the public key's SHA-256, in hex (``Ed25519/keyId(_:)``).
    public var keyId: String
    /// The Ed25519 public key, base64.
    public var publicKey: String

    public init(keyId: String, publicKey: String) {
        self.keyId = keyId
        self.publicKey = publicKey
    }

    /// The listing of `publicKey`, under its own ID.
    public init(publicKey: [UInt8]) {
        self.init(keyId: Ed25519.keyId(publicKey), publicKey: Data(publicKey).base64EncodedString())
    }
}

extension Array where Element == ListedKey {
    /// The key listed under `keyId`, when it is a key and that is its ID; nil otherwise.
    public func publicKey(_ keyId: String) -> [UInt8]? {
        guard let listed = first(where: { $0.keyId == keyId }), let data = Data(base64Encoded: listed.publicKey) else { return nil }
        let key = [UInt8](data)
        guard key.count == Ed25519.publicKeyBytes, Ed25519.keyId(key) == keyId else { return nil }
        return key
    }
}
