import Crypto
import Foundation
import WhisperShared

/// Ed25519 verification time per implementation: a prepared key (`Ed25519.verifyPrepared`,
/// the services' check of messages and signals), libsodium (`Ed25519.verifyWithSodium`,
/// their one-off checks) and swift-crypto (`Curve25519.Signing`, BoringSSL's code, what
/// the SDK carries). All verify the same signatures by 16 keys over random 420-byte
/// messages, in alternating rounds, so that a slow spell of this shared machine falls on
/// all of them.
struct VerifySpeed {
    var verifications: Int

    func run() {
        let keys = (0..<16).map { _ in Ed25519.KeyPair(seed: SecureBytes.random(Ed25519.seedBytes)) }
        let messages = (0..<64).map { _ in SecureBytes.random(420) }
        let signed = messages.enumerated().map { index, message in
            let key = keys[index % keys.count]
            return (publicKey: key.publicKey, message: message, signature: key.sign(message))
        }
        let crypto = signed.map { entry in
            (key: try! Curve25519.Signing.PublicKey(rawRepresentation: entry.publicKey), message: Data(entry.message), signature: Data(entry.signature))
        }
        let rounds = 10
        let perRound = max(1, verifications / rounds)
        var sodium: Duration = .zero
        var boring: Duration = .zero
        var prepared: Duration = .zero
        var accepted = 0
        let clock = ContinuousClock()
        for _ in 0..<rounds {
            sodium += clock.measure {
                for index in 0..<perRound {
                    let entry = signed[index % signed.count]
                    if Ed25519.verifyWithSodium(signature: entry.signature, message: entry.message, publicKey: entry.publicKey) { accepted += 1 }
                }
            }
            prepared += clock.measure {
                for index in 0..<perRound {
                    let entry = signed[index % signed.count]
                    if Ed25519.verifyPrepared(signature: entry.signature, message: entry.message, publicKey: entry.publicKey) { accepted += 1 }
                }
            }
            boring += clock.measure {
                for index in 0..<perRound {
                    let entry = crypto[index % crypto.count]
                    if entry.key.isValidSignature(entry.signature, for: entry.message) { accepted += 1 }
                }
            }
        }
        let count = Double(perRound * rounds)
        func micros(_ duration: Duration) -> Double {
            (Double(duration.components.seconds) * 1e6 + Double(duration.components.attoseconds) / 1e12) / count
        }
        print(String(format: "Ed25519 verify, %d each: prepared key %.1f us, libsodium %.1f us, swift-crypto %.1f us (all %@)",
                     perRound * rounds, micros(prepared), micros(sodium), micros(boring), accepted == perRound * rounds * 3 ? "valid" : "NOT all valid"))
    }
}
