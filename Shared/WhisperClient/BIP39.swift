import Crypto
import Foundation
import WhisperProtocol

/// BIP-0039 mnemonics with the English wordlist: Whisper's seed phrase (docs/protocol.md section 4, "Keys").
public enum BIP39 {
    /// Why a phrase (or entropy) was refused.
    public enum Failure: Error, Equatable {
        /// Not 12, 15, 18, 21 or 24 words.
        case wordCount(Int)
        /// A word not on the English list (a typo).
        case unknownWord(String)
        /// The words do not carry their own checksum: one is wrong or out of order.
        case checksum
        /// Not 16, 20, 24, 28 or 32 bytes.
        case entropyLength(Int)
    }

    /// A new 12-word mnemonic from 128 bits of secure randomness.
    public static func generateMnemonic() -> String {
        do {
            return try mnemonic(entropy: SecureBytes.random(16))
        } catch {
            preconditionFailure("16 bytes of entropy always make a mnemonic")
        }
    }

    /// The mnemonic for 16, 20, 24, 28 or 32 bytes of entropy.
    public static func mnemonic(entropy: [UInt8]) throws(Failure) -> String {
        guard [16, 20, 24, 28, 32].contains(entropy.count) else { throw .entropyLength(entropy.count) }
        let checksumBits = entropy.count * 8 / 32
        let hash = Array(SHA256.hash(data: entropy))
        var bits = entropy.flatMap(Self.bits)
        bits += Self.bits(hash[0]).prefix(checksumBits)
        return stride(from: 0, to: bits.count, by: 11).map { start in
            englishWords[bits[start..<start + 11].reduce(0) { $0 << 1 | $1 }]
        }.joined(separator: " ")
    }

    /// The entropy a mnemonic encodes, after checking its words and checksum.
    public static func entropy(of mnemonic: String) throws(Failure) -> [UInt8] {
        let words = normalizedWords(mnemonic)
        guard [12, 15, 18, 21, 24].contains(words.count) else { throw .wordCount(words.count) }
        var bits: [Int] = []
        for word in words {
            guard let index = wordIndex[word] else { throw .unknownWord(word) }
            bits += (0..<11).reversed().map { index >> $0 & 1 }
        }
        let checksumBits = words.count * 11 / 33
        let entropyBits = bits.count - checksumBits
        let entropy = stride(from: 0, to: entropyBits, by: 8).map { start in
            UInt8(bits[start..<start + 8].reduce(0) { $0 << 1 | $1 })
        }
        let hash = Array(SHA256.hash(data: entropy))
        guard Array(Self.bits(hash[0]).prefix(checksumBits)) == Array(bits[entropyBits...]) else { throw .checksum }
        return entropy
    }

    /// True for a mnemonic whose words are all in the list and whose checksum holds.
    public static func isValid(_ mnemonic: String) -> Bool {
        (try? entropy(of: mnemonic)) != nil
    }

    /// seed = PBKDF2-HMAC-SHA512(NFKD(mnemonic), NFKD("mnemonic" + passphrase), 2048, 64).
    public static func seed(mnemonic: String, passphrase: String = "") -> [UInt8] {
        let password = Array(mnemonic.decomposedStringWithCompatibilityMapping.utf8)
        let salt = Array(("mnemonic" + passphrase).decomposedStringWithCompatibilityMapping.utf8)
        return PBKDF2.sha512(password: password, salt: salt, iterations: 2048, length: 64)
    }

    /// The words of a phrase as typed: lower-cased, split on any whitespace.
    public static func normalizedWords(_ mnemonic: String) -> [String] {
        mnemonic.decomposedStringWithCompatibilityMapping.lowercased()
            .split(whereSeparator: { $0.isWhitespace }).map(String.init)
    }

    static let wordIndex: [String: Int] = Dictionary(uniqueKeysWithValues: englishWords.enumerated().map { ($1, $0) })

    static func bits(_ byte: UInt8) -> [Int] {
        (0..<8).reversed().map { Int(byte >> $0 & 1) }
    }
}

/// PBKDF2 (RFC 8018) with HMAC-SHA512.
public enum PBKDF2 {
    /// `length` bytes of PBKDF2-HMAC-SHA512 (BIP39 uses 2,048 iterations and 64 bytes).
    public static func sha512(password: [UInt8], salt: [UInt8], iterations: Int, length: Int) -> [UInt8] {
        let key = SymmetricKey(data: password)
        var output: [UInt8] = []
        var block: UInt32 = 1
        while output.count < length {
            var u = Array(HMAC<SHA512>.authenticationCode(for: salt + withUnsafeBytes(of: block.bigEndian, Array.init), using: key))
            var t = u
            for _ in 1..<iterations {
                u = Array(HMAC<SHA512>.authenticationCode(for: u, using: key))
                for index in t.indices { t[index] ^= u[index] }
            }
            output += t
            block += 1
        }
        return Array(output.prefix(length))
    }
}
