/// NaCl's `crypto_secretbox` (XSalsa20 and Poly1305) in Swift, byte for byte what
/// libsodium's `crypto_secretbox_easy` makes: the 16-byte tag, then the ciphertext.
/// Salsa20 as its specification has it, HSalsa20 as in "Extending the Salsa20 nonce",
/// Poly1305 as RFC 8439 section 2.5 has it. No branch or index depends on a secret.
enum XSalsa20Poly1305 {
    static let keyBytes = 32
    static let nonceBytes = 24
    static let tagBytes = 16

    /// `crypto_secretbox_easy`.
    static func seal(_ message: [UInt8], nonce: [UInt8], key: [UInt8]) -> [UInt8] {
        var stream = Salsa20Stream(key: HSalsa20.derive(key: key, nonce: Array(nonce[0..<16])), nonce: Array(nonce[16..<24]))
        let polyKey = stream.take(32)
        var out = [UInt8](repeating: 0, count: tagBytes + message.count)
        stream.xor(message, into: &out, at: tagBytes)
        let tag = Poly1305.tag(out[tagBytes...], key: polyKey)
        out.replaceSubrange(0..<tagBytes, with: tag)
        return out
    }

    /// `crypto_secretbox_open_easy`: the plaintext, or nil when the tag does not match.
    static func open(_ box: [UInt8], nonce: [UInt8], key: [UInt8]) -> [UInt8]? {
        guard box.count >= tagBytes else { return nil }
        var stream = Salsa20Stream(key: HSalsa20.derive(key: key, nonce: Array(nonce[0..<16])), nonce: Array(nonce[16..<24]))
        let polyKey = stream.take(32)
        let expected = Poly1305.tag(box[tagBytes...], key: polyKey)
        guard SecureBytes.constantTimeEqual(expected, Array(box[0..<tagBytes])) else { return nil }
        var out = [UInt8](repeating: 0, count: box.count - tagBytes)
        stream.xor(Array(box[tagBytes...]), into: &out, at: 0)
        return out
    }
}

/// The Salsa20 core: 20 rounds over a 16-word state.
enum Salsa20Core {
    /// "expand 32-byte k", the four constant words.
    static let sigma: [UInt32] = [0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574]

    @inline(__always)
    static func rotl(_ value: UInt32, _ count: UInt32) -> UInt32 { (value << count) | (value >> (32 &- count)) }

    /// Twenty rounds of `state`; `addInput` adds the input back (Salsa20), or not (HSalsa20).
    static func rounds(_ input: [UInt32]) -> [UInt32] {
        var x = input
        for _ in 0..<10 {
            // Columns.
            x[4] ^= rotl(x[0] &+ x[12], 7); x[8] ^= rotl(x[4] &+ x[0], 9)
            x[12] ^= rotl(x[8] &+ x[4], 13); x[0] ^= rotl(x[12] &+ x[8], 18)
            x[9] ^= rotl(x[5] &+ x[1], 7); x[13] ^= rotl(x[9] &+ x[5], 9)
            x[1] ^= rotl(x[13] &+ x[9], 13); x[5] ^= rotl(x[1] &+ x[13], 18)
            x[14] ^= rotl(x[10] &+ x[6], 7); x[2] ^= rotl(x[14] &+ x[10], 9)
            x[6] ^= rotl(x[2] &+ x[14], 13); x[10] ^= rotl(x[6] &+ x[2], 18)
            x[3] ^= rotl(x[15] &+ x[11], 7); x[7] ^= rotl(x[3] &+ x[15], 9)
            x[11] ^= rotl(x[7] &+ x[3], 13); x[15] ^= rotl(x[11] &+ x[7], 18)
            // Rows.
            x[1] ^= rotl(x[0] &+ x[3], 7); x[2] ^= rotl(x[1] &+ x[0], 9)
            x[3] ^= rotl(x[2] &+ x[1], 13); x[0] ^= rotl(x[3] &+ x[2], 18)
            x[6] ^= rotl(x[5] &+ x[4], 7); x[7] ^= rotl(x[6] &+ x[5], 9)
            x[4] ^= rotl(x[7] &+ x[6], 13); x[5] ^= rotl(x[4] &+ x[7], 18)
            x[11] ^= rotl(x[10] &+ x[9], 7); x[8] ^= rotl(x[11] &+ x[10], 9)
            x[9] ^= rotl(x[8] &+ x[11], 13); x[10] ^= rotl(x[9] &+ x[8], 18)
            x[12] ^= rotl(x[15] &+ x[14], 7); x[13] ^= rotl(x[12] &+ x[15], 9)
            x[14] ^= rotl(x[13] &+ x[12], 13); x[15] ^= rotl(x[14] &+ x[13], 18)
        }
        return x
    }

    /// The state for a 32-byte key and 16 bytes of nonce and counter.
    static func state(key: [UInt8], input: [UInt8]) -> [UInt32] {
        let k = words(key), n = words(input)
        return [sigma[0], k[0], k[1], k[2], k[3], sigma[1], n[0], n[1], n[2], n[3], sigma[2], k[4], k[5], k[6], k[7], sigma[3]]
    }

    static func words(_ bytes: [UInt8]) -> [UInt32] {
        stride(from: 0, to: bytes.count, by: 4).map { index in
            UInt32(bytes[index]) | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2]) << 16 | UInt32(bytes[index + 3]) << 24
        }
    }
}

/// HSalsa20: a 32-byte key and a 16-byte nonce to a new 32-byte key.
enum HSalsa20 {
    static func derive(key: [UInt8], nonce: [UInt8]) -> [UInt8] {
        let x = Salsa20Core.rounds(Salsa20Core.state(key: key, input: nonce))
        var out: [UInt8] = []
        out.reserveCapacity(32)
        for index in [0, 5, 10, 15, 6, 7, 8, 9] {
            withUnsafeBytes(of: x[index].littleEndian) { out.append(contentsOf: $0) }
        }
        return out
    }
}

/// The Salsa20 key stream for a key and an 8-byte nonce, from block 0, taken in order.
struct Salsa20Stream {
    private var input: [UInt32]
    private var block: [UInt8] = []
    private var used = 64

    init(key: [UInt8], nonce: [UInt8]) {
        input = Salsa20Core.state(key: key, input: nonce + [UInt8](repeating: 0, count: 8))
    }

    private mutating func next() -> UInt8 {
        if used == 64 {
            let x = Salsa20Core.rounds(input)
            block.removeAll(keepingCapacity: true)
            for index in 0..<16 {
                withUnsafeBytes(of: (x[index] &+ input[index]).littleEndian) { block.append(contentsOf: $0) }
            }
            // The 64-bit block counter, words 8 and 9.
            input[8] &+= 1
            if input[8] == 0 { input[9] &+= 1 }
            used = 0
        }
        defer { used += 1 }
        return block[used]
    }

    mutating func take(_ count: Int) -> [UInt8] {
        (0..<count).map { _ in next() }
    }

    /// `out[offset...]` = `bytes` XOR the next `bytes.count` bytes of the stream.
    mutating func xor(_ bytes: [UInt8], into out: inout [UInt8], at offset: Int) {
        for index in bytes.indices { out[offset + index] = bytes[index] ^ next() }
    }
}

/// Poly1305 with 26-bit limbs (the product of two limbs and a small factor fits in 64 bits).
enum Poly1305 {
    static func tag(_ message: ArraySlice<UInt8>, key: [UInt8]) -> [UInt8] {
        func le32(_ bytes: [UInt8], _ at: Int) -> UInt64 {
            UInt64(bytes[at]) | UInt64(bytes[at + 1]) << 8 | UInt64(bytes[at + 2]) << 16 | UInt64(bytes[at + 3]) << 24
        }
        // r, clamped, as five 26-bit limbs.
        let r0 = le32(key, 0) & 0x3ff_ffff
        let r1 = (le32(key, 3) >> 2) & 0x3ff_ff03
        let r2 = (le32(key, 6) >> 4) & 0x3ff_c0ff
        let r3 = (le32(key, 9) >> 6) & 0x3f0_3fff
        let r4 = (le32(key, 12) >> 8) & 0x00f_ffff
        let s1 = r1 * 5, s2 = r2 * 5, s3 = r3 * 5, s4 = r4 * 5
        var h0: UInt64 = 0, h1: UInt64 = 0, h2: UInt64 = 0, h3: UInt64 = 0, h4: UInt64 = 0

        var offset = message.startIndex
        while offset < message.endIndex {
            let count = min(16, message.endIndex - offset)
            var block = [UInt8](repeating: 0, count: 17)
            for index in 0..<count { block[index] = message[offset + index] }
            // The block with a 1 byte after it (2^128 for a whole block).
            block[count] = 1
            h0 += le32(block, 0) & 0x3ff_ffff
            h1 += (le32(block, 3) >> 2) & 0x3ff_ffff
            h2 += (le32(block, 6) >> 4) & 0x3ff_ffff
            h3 += (le32(block, 9) >> 6) & 0x3ff_ffff
            h4 += (le32(block, 12) >> 8) | (UInt64(block[16]) << 24)

            let d0 = h0 * r0 + h1 * s4 + h2 * s3 + h3 * s2 + h4 * s1
            var d1 = h0 * r1 + h1 * r0 + h2 * s4 + h3 * s3 + h4 * s2
            var d2 = h0 * r2 + h1 * r1 + h2 * r0 + h3 * s4 + h4 * s3
            var d3 = h0 * r3 + h1 * r2 + h2 * r1 + h3 * r0 + h4 * s4
            var d4 = h0 * r4 + h1 * r3 + h2 * r2 + h3 * r1 + h4 * r0
            var carry = d0 >> 26; h0 = d0 & 0x3ff_ffff
            d1 += carry; carry = d1 >> 26; h1 = d1 & 0x3ff_ffff
            d2 += carry; carry = d2 >> 26; h2 = d2 & 0x3ff_ffff
            d3 += carry; carry = d3 >> 26; h3 = d3 & 0x3ff_ffff
            d4 += carry; carry = d4 >> 26; h4 = d4 & 0x3ff_ffff
            h0 += carry * 5; carry = h0 >> 26; h0 &= 0x3ff_ffff
            h1 += carry
            offset += count
        }

        // Fully carried, then h - p chosen when it does not borrow (h >= p).
        var carry = h1 >> 26; h1 &= 0x3ff_ffff
        h2 += carry; carry = h2 >> 26; h2 &= 0x3ff_ffff
        h3 += carry; carry = h3 >> 26; h3 &= 0x3ff_ffff
        h4 += carry; carry = h4 >> 26; h4 &= 0x3ff_ffff
        h0 += carry * 5; carry = h0 >> 26; h0 &= 0x3ff_ffff
        h1 += carry
        var g0 = h0 + 5; carry = g0 >> 26; g0 &= 0x3ff_ffff
        var g1 = h1 + carry; carry = g1 >> 26; g1 &= 0x3ff_ffff
        var g2 = h2 + carry; carry = g2 >> 26; g2 &= 0x3ff_ffff
        var g3 = h3 + carry; carry = g3 >> 26; g3 &= 0x3ff_ffff
        let g4 = (h4 + carry) &- (1 << 26)
        // All ones when g4 did not borrow (take g), else zero (keep h).
        let takeG = (g4 >> 63) &- 1
        let keepH = ~takeG
        h0 = (h0 & keepH) | (g0 & takeG)
        h1 = (h1 & keepH) | (g1 & takeG)
        h2 = (h2 & keepH) | (g2 & takeG)
        h3 = (h3 & keepH) | (g3 & takeG)
        h4 = (h4 & keepH) | (g4 & takeG)

        // h mod 2^128 as four words, plus s.
        let w0 = (h0 | (h1 << 26)) & 0xffff_ffff
        let w1 = ((h1 >> 6) | (h2 << 20)) & 0xffff_ffff
        let w2 = ((h2 >> 12) | (h3 << 14)) & 0xffff_ffff
        let w3 = ((h3 >> 18) | (h4 << 8)) & 0xffff_ffff
        var f = w0 + le32(key, 16)
        var out = [UInt8](repeating: 0, count: 16)
        func put(_ word: UInt64, _ at: Int) {
            for index in 0..<4 { out[at + index] = UInt8(truncatingIfNeeded: word >> (8 * UInt64(index))) }
        }
        put(f, 0)
        f = w1 + le32(key, 20) + (f >> 32); put(f, 4)
        f = w2 + le32(key, 24) + (f >> 32); put(f, 8)
        f = w3 + le32(key, 28) + (f >> 32); put(f, 12)
        return out
    }
}
