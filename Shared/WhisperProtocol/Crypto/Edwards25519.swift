/// The edwards25519 arithmetic that checking a VRF proof takes (RFC 8032 section 5.1):
/// points decoded and encoded strictly, added, doubled and multiplied by scalars. Only
/// public values pass through it (keys, proofs, hashes), so its multiplication is not
/// constant-time; nothing secret may use it.
enum Edwards25519 {
    /// The group's order L, little-endian.
    static let order: [UInt8] = [
        0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10,
    ]
    /// The base point's encoding (y = 4/5, x even).
    static let baseEncoding: [UInt8] = [0x58] + [UInt8](repeating: 0x66, count: 31)
    static let base: Point = Point.decode(baseEncoding)!
    /// The identity's encoding: y = 1, x = 0.
    static let identityEncoding: [UInt8] = [1] + [UInt8](repeating: 0, count: 31)

    /// A point in extended coordinates (X:Y:Z:T), x = X/Z, y = Y/Z, xy = T/Z.
    struct Point {
        var x: FieldElement, y: FieldElement, z: FieldElement, t: FieldElement

        static let identity = Point(x: .zero, y: .one, z: .one, t: .zero)

        /// RFC 8032's decoding: nil for y ≥ p, for a y with no x on the curve, and for
        /// x = 0 with the sign bit set, so every point has exactly one encoding.
        static func decode(_ bytes: [UInt8]) -> Point? {
            guard bytes.count == 32 else { return nil }
            let sign = bytes[31] >> 7
            var yBytes = bytes
            yBytes[31] &= 0x7f
            let y = FieldElement(bytes: yBytes)
            guard y.encoded() == yBytes else { return nil }
            let yy = y.squared()
            let u = yy - .one
            let v = FieldElement.d * yy + .one
            let v3 = v.squared() * v
            var x = u * v3 * (u * v3.squared() * v).power(FieldElement.pMinus5Over8)
            let vxx = v * x.squared()
            if vxx != u {
                guard vxx == -u else { return nil }
                x = x * FieldElement.sqrtMinusOne
            }
            if x.isZero && sign == 1 { return nil }
            if x.isOdd != (sign == 1) { x = -x }
            return Point(x: x, y: y, z: .one, t: x * y)
        }

        func encoded() -> [UInt8] {
            let inverse = z.inverse()
            let xa = x * inverse, ya = y * inverse
            var bytes = ya.encoded()
            if xa.isOdd { bytes[31] |= 0x80 }
            return bytes
        }

        var isIdentity: Bool { x.isZero && y == z }

        /// The complete addition for a = -1 (add-2008-hwcd-3).
        static func + (p: Point, q: Point) -> Point {
            let a = (p.y - p.x) * (q.y - q.x)
            let b = (p.y + p.x) * (q.y + q.x)
            let c = p.t * FieldElement.twoD * q.t
            let d = (p.z + p.z) * q.z
            let e = b - a, f = d - c, g = d + c, h = b + a
            return Point(x: e * f, y: g * h, z: f * g, t: e * h)
        }

        static prefix func - (p: Point) -> Point {
            Point(x: -p.x, y: p.y, z: p.z, t: -p.t)
        }

        /// Doubling (dbl-2008-hwcd, RFC 8032 section 5.1.4).
        func doubled() -> Point {
            let a = x.squared(), b = y.squared()
            let c = z.squared() + z.squared()
            let h = a + b
            let e = h - (x + y).squared()
            let g = a - b
            let f = c + g
            return Point(x: e * f, y: g * h, z: f * g, t: e * h)
        }

        /// `scalar`·P for a little-endian scalar, four bits at a time (variable time).
        func multiplied(by scalar: [UInt8]) -> Point {
            var table = [Point.identity, self]
            for _ in 2..<16 { table.append(table[table.count - 1] + self) }
            var result = Point.identity
            for index in stride(from: scalar.count - 1, through: 0, by: -1) {
                for shift in [4, 0] {
                    result = result.doubled().doubled().doubled().doubled()
                    let digit = Int((scalar[index] >> UInt8(shift)) & 0x0f)
                    if digit != 0 { result = result + table[digit] }
                }
            }
            return result
        }

        /// Whether the point is one of the eight of small order (8·P is the identity).
        var hasSmallOrder: Bool { doubled().doubled().doubled().isIdentity }

        /// Whether the point is in the prime-order subgroup (L·P is the identity).
        var isInPrimeOrderGroup: Bool { multiplied(by: Edwards25519.order).isIdentity }
    }

    /// Whether a 32-byte little-endian scalar is below L.
    static func isCanonicalScalar(_ scalar: [UInt8]) -> Bool {
        guard scalar.count == 32 else { return false }
        for index in stride(from: 31, through: 0, by: -1) where scalar[index] != order[index] {
            return scalar[index] < order[index]
        }
        return false
    }
}

/// An element of GF(2^255 - 19) in ten signed limbs of 26 and 25 bits alternately (limb i
/// weighs 2^ceil(25.5 i)). Every result is carried, so an operand's limbs stay within
/// 2^26 in magnitude and a product's sums fit in 64 bits.
struct FieldElement {
    var l0, l1, l2, l3, l4, l5, l6, l7, l8, l9: Int64

    init(_ l0: Int64, _ l1: Int64, _ l2: Int64, _ l3: Int64, _ l4: Int64, _ l5: Int64, _ l6: Int64, _ l7: Int64, _ l8: Int64, _ l9: Int64) {
        self.l0 = l0
        self.l1 = l1
        self.l2 = l2
        self.l3 = l3
        self.l4 = l4
        self.l5 = l5
        self.l6 = l6
        self.l7 = l7
        self.l8 = l8
        self.l9 = l9
    }

    /// One pass of carries, the top one folded back as 19 times it, then limb 0's again:
    /// every limb within 2^26 in magnitude (limb 1 may be a few units below zero).
    @inline(__always)
    mutating func carry() {
        var c: Int64
        c = l0 >> 26; l0 -= c << 26; l1 += c
        c = l1 >> 25; l1 -= c << 25; l2 += c
        c = l2 >> 26; l2 -= c << 26; l3 += c
        c = l3 >> 25; l3 -= c << 25; l4 += c
        c = l4 >> 26; l4 -= c << 26; l5 += c
        c = l5 >> 25; l5 -= c << 25; l6 += c
        c = l6 >> 26; l6 -= c << 26; l7 += c
        c = l7 >> 25; l7 -= c << 25; l8 += c
        c = l8 >> 26; l8 -= c << 26; l9 += c
        c = l9 >> 25; l9 -= c << 25; l0 += c * 19
        c = l0 >> 26; l0 -= c << 26; l1 += c
    }

    static func + (a: FieldElement, b: FieldElement) -> FieldElement {
        var r = FieldElement(a.l0 + b.l0, a.l1 + b.l1, a.l2 + b.l2, a.l3 + b.l3, a.l4 + b.l4, a.l5 + b.l5, a.l6 + b.l6, a.l7 + b.l7, a.l8 + b.l8, a.l9 + b.l9)
        r.carry()
        return r
    }

    static func - (a: FieldElement, b: FieldElement) -> FieldElement {
        var r = FieldElement(a.l0 - b.l0, a.l1 - b.l1, a.l2 - b.l2, a.l3 - b.l3, a.l4 - b.l4, a.l5 - b.l5, a.l6 - b.l6, a.l7 - b.l7, a.l8 - b.l8, a.l9 - b.l9)
        r.carry()
        return r
    }

    static func * (f: FieldElement, g: FieldElement) -> FieldElement {
        let f0 = f.l0, f1 = f.l1, f2 = f.l2, f3 = f.l3, f4 = f.l4, f5 = f.l5, f6 = f.l6, f7 = f.l7, f8 = f.l8, f9 = f.l9
        let g0 = g.l0, g1 = g.l1, g2 = g.l2, g3 = g.l3, g4 = g.l4, g5 = g.l5, g6 = g.l6, g7 = g.l7, g8 = g.l8, g9 = g.l9
        let g1x19 = 19 &* g1, g2x19 = 19 &* g2, g3x19 = 19 &* g3, g4x19 = 19 &* g4, g5x19 = 19 &* g5, g6x19 = 19 &* g6, g7x19 = 19 &* g7, g8x19 = 19 &* g8, g9x19 = 19 &* g9
        let f1x2 = 2 &* f1, f3x2 = 2 &* f3, f5x2 = 2 &* f5, f7x2 = 2 &* f7, f9x2 = 2 &* f9
        let h0 = f0 &* g0 &+ f1x2 &* g9x19 &+ f2 &* g8x19 &+ f3x2 &* g7x19 &+ f4 &* g6x19 &+ f5x2 &* g5x19 &+ f6 &* g4x19 &+ f7x2 &* g3x19 &+ f8 &* g2x19 &+ f9x2 &* g1x19
        let h1 = f0 &* g1 &+ f1 &* g0 &+ f2 &* g9x19 &+ f3 &* g8x19 &+ f4 &* g7x19 &+ f5 &* g6x19 &+ f6 &* g5x19 &+ f7 &* g4x19 &+ f8 &* g3x19 &+ f9 &* g2x19
        let h2 = f0 &* g2 &+ f1x2 &* g1 &+ f2 &* g0 &+ f3x2 &* g9x19 &+ f4 &* g8x19 &+ f5x2 &* g7x19 &+ f6 &* g6x19 &+ f7x2 &* g5x19 &+ f8 &* g4x19 &+ f9x2 &* g3x19
        let h3 = f0 &* g3 &+ f1 &* g2 &+ f2 &* g1 &+ f3 &* g0 &+ f4 &* g9x19 &+ f5 &* g8x19 &+ f6 &* g7x19 &+ f7 &* g6x19 &+ f8 &* g5x19 &+ f9 &* g4x19
        let h4 = f0 &* g4 &+ f1x2 &* g3 &+ f2 &* g2 &+ f3x2 &* g1 &+ f4 &* g0 &+ f5x2 &* g9x19 &+ f6 &* g8x19 &+ f7x2 &* g7x19 &+ f8 &* g6x19 &+ f9x2 &* g5x19
        let h5 = f0 &* g5 &+ f1 &* g4 &+ f2 &* g3 &+ f3 &* g2 &+ f4 &* g1 &+ f5 &* g0 &+ f6 &* g9x19 &+ f7 &* g8x19 &+ f8 &* g7x19 &+ f9 &* g6x19
        let h6 = f0 &* g6 &+ f1x2 &* g5 &+ f2 &* g4 &+ f3x2 &* g3 &+ f4 &* g2 &+ f5x2 &* g1 &+ f6 &* g0 &+ f7x2 &* g9x19 &+ f8 &* g8x19 &+ f9x2 &* g7x19
        let h7 = f0 &* g7 &+ f1 &* g6 &+ f2 &* g5 &+ f3 &* g4 &+ f4 &* g3 &+ f5 &* g2 &+ f6 &* g1 &+ f7 &* g0 &+ f8 &* g9x19 &+ f9 &* g8x19
        let h8 = f0 &* g8 &+ f1x2 &* g7 &+ f2 &* g6 &+ f3x2 &* g5 &+ f4 &* g4 &+ f5x2 &* g3 &+ f6 &* g2 &+ f7x2 &* g1 &+ f8 &* g0 &+ f9x2 &* g9x19
        let h9 = f0 &* g9 &+ f1 &* g8 &+ f2 &* g7 &+ f3 &* g6 &+ f4 &* g5 &+ f5 &* g4 &+ f6 &* g3 &+ f7 &* g2 &+ f8 &* g1 &+ f9 &* g0
        var r = FieldElement(h0, h1, h2, h3, h4, h5, h6, h7, h8, h9)
        r.carry()
        return r
    }

    static let zero = FieldElement(limbs: [Int64](repeating: 0, count: 10))
    static let one = FieldElement(limbs: [1] + [Int64](repeating: 0, count: 9))
    /// d = -121665/121666, the curve's constant, and 2d.
    static let d: FieldElement = -FieldElement(limbs: [121_665] + [Int64](repeating: 0, count: 9))
        * FieldElement(limbs: [121_666] + [Int64](repeating: 0, count: 9)).inverse()
    static let twoD = d + d
    /// A square root of -1: 2^((p-1)/4).
    static let sqrtMinusOne = FieldElement(limbs: [2] + [Int64](repeating: 0, count: 9)).power(pMinus1Over4)

    /// Exponents, little-endian bytes: p - 2, (p - 5)/8 and (p - 1)/4.
    static let pMinus2: [UInt8] = [0xeb] + [UInt8](repeating: 0xff, count: 30) + [0x7f]
    static let pMinus5Over8: [UInt8] = [0xfd] + [UInt8](repeating: 0xff, count: 30) + [0x0f]
    static let pMinus1Over4: [UInt8] = [0xfb] + [UInt8](repeating: 0xff, count: 30) + [0x1f]

    static let widths: [Int64] = [26, 25, 26, 25, 26, 25, 26, 25, 26, 25]
    static let offsets = [0, 26, 51, 77, 102, 128, 153, 179, 204, 230]

    init(limbs: [Int64]) {
        self.init(limbs[0], limbs[1], limbs[2], limbs[3], limbs[4], limbs[5], limbs[6], limbs[7], limbs[8], limbs[9])
    }

    var limbs: [Int64] { [l0, l1, l2, l3, l4, l5, l6, l7, l8, l9] }

    /// The low 255 bits of 32 little-endian bytes (the top bit is ignored).
    init(bytes: [UInt8]) {
        var limbs = [Int64](repeating: 0, count: 10)
        for index in 0..<10 {
            for bit in 0..<Int(Self.widths[index]) {
                let position = Self.offsets[index] + bit
                if position >= 255 { break }
                limbs[index] |= Int64((bytes[position >> 3] >> UInt8(position & 7)) & 1) << Int64(bit)
            }
        }
        self.init(limbs: limbs)
    }

    /// The canonical 32-byte little-endian encoding (below p).
    func encoded() -> [UInt8] {
        // Carried until every limb is within its width: the value is then in [0, 2^255).
        var h = limbs
        for _ in 0..<4 {
            for index in 0..<10 {
                let carry = h[index] >> Self.widths[index]
                h[index] -= carry << Self.widths[index]
                if index == 9 { h[0] += carry * 19 } else { h[index + 1] += carry }
            }
        }
        // It is at least p exactly when h + 19 reaches 2^255; then h - p is that sum's low bits.
        var g = h
        g[0] += 19
        var overflow: Int64 = 0
        for index in 0..<10 {
            let carry = g[index] >> Self.widths[index]
            g[index] -= carry << Self.widths[index]
            if index == 9 { overflow = carry } else { g[index + 1] += carry }
        }
        let value = overflow != 0 ? g : h
        var bytes = [UInt8](repeating: 0, count: 32)
        for index in 0..<10 {
            for bit in 0..<Int(Self.widths[index]) where (value[index] >> Int64(bit)) & 1 == 1 {
                let position = Self.offsets[index] + bit
                bytes[position >> 3] |= 1 << UInt8(position & 7)
            }
        }
        return bytes
    }

    var isZero: Bool { encoded().allSatisfy { $0 == 0 } }
    var isOdd: Bool { encoded()[0] & 1 == 1 }

    static func == (a: FieldElement, b: FieldElement) -> Bool { a.encoded() == b.encoded() }
    static func != (a: FieldElement, b: FieldElement) -> Bool { !(a == b) }

    static prefix func - (a: FieldElement) -> FieldElement { .zero - a }

    func squared() -> FieldElement { self * self }

    /// self^exponent, the exponent little-endian (public: variable time).
    func power(_ exponent: [UInt8]) -> FieldElement {
        var result = FieldElement.one
        for index in stride(from: exponent.count - 1, through: 0, by: -1) {
            for bit in stride(from: 7, through: 0, by: -1) {
                result = result.squared()
                if (exponent[index] >> UInt8(bit)) & 1 == 1 { result = result * self }
            }
        }
        return result
    }

    func inverse() -> FieldElement { power(Self.pMinus2) }
}
