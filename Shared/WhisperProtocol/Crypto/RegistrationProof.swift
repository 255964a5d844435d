/// What a `register_proof` signature covers (docs/protocol.md, "The registration proof").
///
/// With `cryptoVersion` 1 the identity key signs the server's 32 random bytes as they
/// are. The same key signs SHA-256 digests of messages, which are 32 bytes too, so a
/// server that picked its "challenge" as the digest of a message of its choosing would
/// get that message signed. From `cryptoVersion` 2 the proof signs a fixed ASCII
/// prefix followed by the challenge (62 bytes): never a digest, never a message.
public enum RegistrationProof {
    /// `whisper-registration-proof-v2:` (30 bytes, no terminator).
    public static let domainPrefix: [UInt8] = Array("whisper-registration-proof-v2:".utf8)

    /// The first `cryptoVersion` whose proof is domain-separated.
    public static let separatedFrom = 2

    public static func signedBytes(challenge: [UInt8], cryptoVersion: Int) -> [UInt8] {
        cryptoVersion >= separatedFrom ? domainPrefix + challenge : challenge
    }
}
