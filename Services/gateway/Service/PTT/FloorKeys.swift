import Crypto
import Foundation
import WhisperShared

/// The Ed25519 keys push-to-talk floor grants are signed with (`GATEWAY_FLOOR_KEYS`):
/// random seeds that only gateways hold, unrelated to any other secret. The first one
/// signs; every one is listed at `GET /ptt/floor-key`, so an operator rotates without a
/// gap behind a balancer (docs/operations.md, "Rotating secrets"): add the new key last,
/// move it first, then drop the old one.
public struct FloorKeys: Sendable, RedactedDescription {
    /// The key that signs, and its ID (named by every grant).
    let signing: Ed25519.KeyPair
    public let signingId: String
    /// What `GET /ptt/floor-key` answers, made once.
    public let listing: PTTFloorKeys

    /// `seeds`: 32-byte Ed25519 seeds, the signing one first (at least one).
    public init(seeds: [[UInt8]]) {
        precondition(!seeds.isEmpty, "at least one floor key")
        let pairs = seeds.map(Ed25519.KeyPair.init(seed:))
        signing = pairs[0]
        signingId = Ed25519.keyId(pairs[0].publicKey)
        listing = PTTFloorKeys(keys: pairs.map { ListedKey(publicKey: $0.publicKey) })
    }
}

extension SettingsReader {
    /// `GATEWAY_FLOOR_KEYS`: base64 32-byte seeds (`openssl rand -base64 32`), comma
    /// separated, the signing one first; required.
    func floorKeys() -> FloorKeys? {
        requiredSeeds("gateway.floor.keys").map(FloorKeys.init(seeds:))
    }
}
