/// What a `register_proof` signature covers (docs/protocol.md, "The registration proof"):
/// in `cryptoVersion` 1 the server's 32 bytes as they are (which a server could pick as a
/// message digest); from 2 a fixed ASCII prefix and the challenge, never a digest.
public enum RegistrationProof {
    /// `whisper-registration-proof-v2:` (30 bytes, no terminator).
    public static let domainPrefix: [UInt8] = Array("whisper-registration-proof-v2:".utf8)

    /// The first `cryptoVersion` whose proof is domain-separated.
    public static let separatedFrom = 2

    public static func signedBytes(challenge: [UInt8], cryptoVersion: Int) -> [UInt8] {
        cryptoVersion >= separatedFrom ? domainPrefix + challenge : challenge
    }
}
