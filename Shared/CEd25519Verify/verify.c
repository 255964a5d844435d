// Ed25519 verification with a prepared public key (include/ed25519_verify.h). Both
// scalars are split at 2^128, so one loop of 128 doublings serves four half-length
// multiplications, against tables of the key's and the base point's odd multiples.
// Every input is public, so the arithmetic is variable-time.
#include "ed25519_verify.h"
#include <pthread.h>
#include <string.h>

typedef unsigned __int128 u128;
typedef uint64_t fe[5];

#define MASK51 ((uint64_t)0x7ffffffffffff)

// Field arithmetic mod p = 2^255 - 19, five limbs of 51 bits. A "carried" element has
// limbs under 2^52; `mul` and `sq` take limbs under 2^54 and return carried ones.

static inline uint64_t load64(const uint8_t *p) {
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) | ((uint64_t)p[3] << 24) | ((uint64_t)p[4] << 32)
        | ((uint64_t)p[5] << 40) | ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
}

static inline void store64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline void fe_copy(fe h, const fe f) { memcpy(h, f, sizeof(fe)); }
static inline void fe_small(fe h, uint64_t v) { h[0] = v & MASK51; h[1] = v >> 51; h[2] = h[3] = h[4] = 0; }

static inline void fe_carry(fe h) {
    uint64_t c;
    c = h[0] >> 51; h[0] &= MASK51; h[1] += c;
    c = h[1] >> 51; h[1] &= MASK51; h[2] += c;
    c = h[2] >> 51; h[2] &= MASK51; h[3] += c;
    c = h[3] >> 51; h[3] &= MASK51; h[4] += c;
    c = h[4] >> 51; h[4] &= MASK51; h[0] += c * 19;
}

// Sum of two carried elements: limbs under 2^53, not carried.
static inline void fe_add(fe h, const fe f, const fe g) {
    for (int i = 0; i < 5; i++) h[i] = f[i] + g[i];
}

// f - g for g's limbs under 2^53: f + 4p - g, carried.
static inline void fe_sub(fe h, const fe f, const fe g) {
    h[0] = f[0] + 0x1fffffffffffb4 - g[0];
    h[1] = f[1] + 0x1ffffffffffffc - g[1];
    h[2] = f[2] + 0x1ffffffffffffc - g[2];
    h[3] = f[3] + 0x1ffffffffffffc - g[3];
    h[4] = f[4] + 0x1ffffffffffffc - g[4];
    fe_carry(h);
}

static inline void fe_neg(fe h, const fe f) {
    fe zero = {0, 0, 0, 0, 0};
    fe_sub(h, zero, f);
}

static inline void fe_reduce_wide(fe h, u128 t0, u128 t1, u128 t2, u128 t3, u128 t4) {
    uint64_t c;
    h[0] = (uint64_t)t0 & MASK51; t1 += (uint64_t)(t0 >> 51);
    h[1] = (uint64_t)t1 & MASK51; t2 += (uint64_t)(t1 >> 51);
    h[2] = (uint64_t)t2 & MASK51; t3 += (uint64_t)(t2 >> 51);
    h[3] = (uint64_t)t3 & MASK51; t4 += (uint64_t)(t3 >> 51);
    h[4] = (uint64_t)t4 & MASK51; c = (uint64_t)(t4 >> 51);
    h[0] += c * 19;
    c = h[0] >> 51; h[0] &= MASK51; h[1] += c;
}

static void fe_mul(fe h, const fe f, const fe g) {
    const uint64_t f0 = f[0], f1 = f[1], f2 = f[2], f3 = f[3], f4 = f[4];
    const uint64_t g0 = g[0], g1 = g[1], g2 = g[2], g3 = g[3], g4 = g[4];
    const uint64_t g1_19 = 19 * g1, g2_19 = 19 * g2, g3_19 = 19 * g3, g4_19 = 19 * g4;
    u128 t0 = (u128)f0 * g0 + (u128)f1 * g4_19 + (u128)f2 * g3_19 + (u128)f3 * g2_19 + (u128)f4 * g1_19;
    u128 t1 = (u128)f0 * g1 + (u128)f1 * g0 + (u128)f2 * g4_19 + (u128)f3 * g3_19 + (u128)f4 * g2_19;
    u128 t2 = (u128)f0 * g2 + (u128)f1 * g1 + (u128)f2 * g0 + (u128)f3 * g4_19 + (u128)f4 * g3_19;
    u128 t3 = (u128)f0 * g3 + (u128)f1 * g2 + (u128)f2 * g1 + (u128)f3 * g0 + (u128)f4 * g4_19;
    u128 t4 = (u128)f0 * g4 + (u128)f1 * g3 + (u128)f2 * g2 + (u128)f3 * g1 + (u128)f4 * g0;
    fe_reduce_wide(h, t0, t1, t2, t3, t4);
}

static void fe_sq(fe h, const fe f) {
    const uint64_t f0 = f[0], f1 = f[1], f2 = f[2], f3 = f[3], f4 = f[4];
    const uint64_t f0_2 = 2 * f0, f1_2 = 2 * f1, f1_38 = 38 * f1, f2_38 = 38 * f2, f3_38 = 38 * f3, f3_19 = 19 * f3, f4_19 = 19 * f4;
    u128 t0 = (u128)f0 * f0 + (u128)f1_38 * f4 + (u128)f2_38 * f3;
    u128 t1 = (u128)f0_2 * f1 + (u128)f2_38 * f4 + (u128)f3_19 * f3;
    u128 t2 = (u128)f0_2 * f2 + (u128)f1 * f1 + (u128)f3_38 * f4;
    u128 t3 = (u128)f0_2 * f3 + (u128)f1_2 * f2 + (u128)f4_19 * f4;
    u128 t4 = (u128)f0_2 * f4 + (u128)f1_2 * f3 + (u128)f2 * f2;
    fe_reduce_wide(h, t0, t1, t2, t3, t4);
}

static void fe_sqn(fe h, const fe f, int n) {
    fe_sq(h, f);
    for (int i = 1; i < n; i++) fe_sq(h, h);
}

// The canonical 32-byte encoding (the value mod p, little-endian).
static void fe_tobytes(uint8_t s[32], const fe f) {
    fe h;
    fe_copy(h, f);
    fe_carry(h);
    fe_carry(h);
    fe_carry(h);
    uint64_t q = (h[0] + 19) >> 51;
    q = (h[1] + q) >> 51;
    q = (h[2] + q) >> 51;
    q = (h[3] + q) >> 51;
    q = (h[4] + q) >> 51;
    h[0] += 19 * q;
    uint64_t c;
    c = h[0] >> 51; h[0] &= MASK51; h[1] += c;
    c = h[1] >> 51; h[1] &= MASK51; h[2] += c;
    c = h[2] >> 51; h[2] &= MASK51; h[3] += c;
    c = h[3] >> 51; h[3] &= MASK51; h[4] += c;
    h[4] &= MASK51;
    store64(s, h[0] | (h[1] << 51));
    store64(s + 8, (h[1] >> 13) | (h[2] << 38));
    store64(s + 16, (h[2] >> 26) | (h[3] << 25));
    store64(s + 24, (h[3] >> 39) | (h[4] << 12));
}

// Bits 0 to 254 of s (the top bit, a point's sign, is left out); not reduced.
static void fe_frombytes(fe h, const uint8_t s[32]) {
    h[0] = load64(s) & MASK51;
    h[1] = (load64(s + 6) >> 3) & MASK51;
    h[2] = (load64(s + 12) >> 6) & MASK51;
    h[3] = (load64(s + 19) >> 1) & MASK51;
    h[4] = (load64(s + 24) >> 12) & MASK51;
}

static int fe_iszero(const fe f) {
    uint8_t s[32], any = 0;
    fe_tobytes(s, f);
    for (int i = 0; i < 32; i++) any |= s[i];
    return any == 0;
}

static int fe_isnegative(const fe f) {
    uint8_t s[32];
    fe_tobytes(s, f);
    return s[0] & 1;
}

// z^(2^250 - 1), with z^11 on the side: the common start of inversion and pow22523.
static void fe_pow2_250(fe out, fe z11, const fe z) {
    fe t, z9, z2_5, z2_10, z2_20, z2_50, z2_100;
    fe_sq(t, z);            // z^2
    fe_sqn(z9, t, 2);       // z^8
    fe_mul(z9, z9, z);      // z^9
    fe_mul(z11, z9, t);     // z^11
    fe_sq(t, z11);          // z^22
    fe_mul(z2_5, t, z9);    // z^(2^5 - 1)
    fe_sqn(t, z2_5, 5);
    fe_mul(z2_10, t, z2_5); // z^(2^10 - 1)
    fe_sqn(t, z2_10, 10);
    fe_mul(z2_20, t, z2_10);
    fe_sqn(t, z2_20, 20);
    fe_mul(t, t, z2_20);    // z^(2^40 - 1)
    fe_sqn(t, t, 10);
    fe_mul(z2_50, t, z2_10);
    fe_sqn(t, z2_50, 50);
    fe_mul(z2_100, t, z2_50);
    fe_sqn(t, z2_100, 100);
    fe_mul(t, t, z2_100);   // z^(2^200 - 1)
    fe_sqn(t, t, 50);
    fe_mul(out, t, z2_50);  // z^(2^250 - 1)
}

// z^(p - 2) = z^(2^255 - 21) = 1/z.
static void fe_invert(fe out, const fe z) {
    fe t, z11;
    fe_pow2_250(t, z11, z);
    fe_sqn(t, t, 5);
    fe_mul(out, t, z11);
}

// z^((p - 5) / 8) = z^(2^252 - 3).
static void fe_pow22523(fe out, const fe z) {
    fe t, z11;
    fe_pow2_250(t, z11, z);
    fe_sqn(t, t, 2);
    fe_mul(out, t, z);
}

// Points: extended (X:Y:Z:T), projective (X:Y:Z), completed ((X:Z),(Y:T)), and affine
// "niels" form (y + x, y - x, 2d·x·y) for the tables.
typedef struct { fe X, Y, Z, T; } ge_p3;
typedef struct { fe X, Y, Z; } ge_p2;
typedef struct { fe X, Y, Z, T; } ge_p1p1;
typedef struct { fe ypx, ymx, xy2d; } ge_niels;

// The window widths: 5 for a key's tables (8 odd multiples each), 8 for the base point's.
#define KEY_WINDOW 5
#define BASE_WINDOW 8
#define KEY_POINTS (1 << (KEY_WINDOW - 2))
#define BASE_POINTS (1 << (BASE_WINDOW - 2))

_Static_assert(sizeof(ge_niels) * KEY_POINTS * 2 == sizeof(whisper_ed25519_key), "a prepared key is two tables");

static fe curve_d, curve_2d, sqrtm1;
// Set once the constants below were derived and checked.
static int constants_ready;
static uint8_t small_order_y[5][32];
static ge_niels base_table[BASE_POINTS], base128_table[BASE_POINTS];

static void p1p1_to_p2(ge_p2 *r, const ge_p1p1 *p) {
    fe_mul(r->X, p->X, p->T);
    fe_mul(r->Y, p->Y, p->Z);
    fe_mul(r->Z, p->Z, p->T);
}

static void p1p1_to_p3(ge_p3 *r, const ge_p1p1 *p) {
    fe_mul(r->X, p->X, p->T);
    fe_mul(r->Y, p->Y, p->Z);
    fe_mul(r->Z, p->Z, p->T);
    fe_mul(r->T, p->X, p->Y);
}

// 2P for a = -1: x = 2XY / (Y^2 - X^2), y = (Y^2 + X^2) / (2Z^2 - (Y^2 - X^2)).
static void p2_dbl(ge_p1p1 *r, const fe X, const fe Y, const fe Z) {
    fe xx, yy, zz2, s;
    fe_sq(xx, X);
    fe_sq(yy, Y);
    fe_sq(zz2, Z);
    fe_add(zz2, zz2, zz2);
    fe_add(s, X, Y);
    fe_sq(s, s);
    fe_add(r->Y, yy, xx);
    fe_sub(r->Z, yy, xx);
    fe_sub(r->X, s, r->Y);
    fe_sub(r->T, zz2, r->Z);
}

// P + Q (negate: P - Q) for Q in niels form.
static void p3_madd(ge_p1p1 *r, const ge_p3 *p, const ge_niels *q, int negate) {
    fe a, b, c, d;
    fe_add(a, p->Y, p->X);
    fe_sub(b, p->Y, p->X);
    fe_mul(a, a, negate ? q->ymx : q->ypx);
    fe_mul(b, b, negate ? q->ypx : q->ymx);
    fe_mul(c, q->xy2d, p->T);
    fe_add(d, p->Z, p->Z);
    fe_sub(r->X, a, b);
    fe_add(r->Y, a, b);
    if (negate) {
        fe_sub(r->Z, d, c);
        fe_add(r->T, d, c);
    } else {
        fe_add(r->Z, d, c);
        fe_sub(r->T, d, c);
    }
}

// P + Q, both extended.
static void p3_add(ge_p3 *r, const ge_p3 *p, const ge_p3 *q) {
    fe a, b, c, d, t;
    ge_p1p1 s;
    fe_sub(a, p->Y, p->X);
    fe_sub(t, q->Y, q->X);
    fe_mul(a, a, t);
    fe_add(b, p->Y, p->X);
    fe_add(t, q->Y, q->X);
    fe_mul(b, b, t);
    fe_mul(c, p->T, q->T);
    fe_mul(c, c, curve_2d);
    fe_mul(d, p->Z, q->Z);
    fe_add(d, d, d);
    fe_sub(s.X, b, a);
    fe_add(s.Y, b, a);
    fe_add(s.Z, d, c);
    fe_sub(s.T, d, c);
    p1p1_to_p3(r, &s);
}

static void p3_dbl(ge_p3 *r, const ge_p3 *p) {
    ge_p1p1 s;
    p2_dbl(&s, p->X, p->Y, p->Z);
    p1p1_to_p3(r, &s);
}

// 1, 3, 5, ... (2n - 1) times p, in niels form, with one inversion for them all.
static void odd_multiples(ge_niels *out, const ge_p3 *p, int n) {
    ge_p3 points[BASE_POINTS], twice;
    fe z[BASE_POINTS], acc, inv, zinv, x, y;
    p3_dbl(&twice, p);
    points[0] = *p;
    for (int i = 1; i < n; i++) p3_add(&points[i], &points[i - 1], &twice);
    // Montgomery's trick: z[i] = Z0 ... Zi, then one inversion walked back.
    fe_copy(z[0], points[0].Z);
    for (int i = 1; i < n; i++) fe_mul(z[i], z[i - 1], points[i].Z);
    fe_invert(inv, z[n - 1]);
    for (int i = n - 1; i >= 0; i--) {
        if (i > 0) {
            fe_mul(zinv, inv, z[i - 1]);
            fe_mul(inv, inv, points[i].Z);
        } else {
            fe_copy(zinv, inv);
        }
        fe_mul(x, points[i].X, zinv);
        fe_mul(y, points[i].Y, zinv);
        fe_add(out[i].ypx, y, x);
        fe_carry(out[i].ypx);
        fe_sub(out[i].ymx, y, x);
        fe_mul(acc, x, y);
        fe_mul(out[i].xy2d, acc, curve_2d);
    }
}

// Decodes a point (y and x's sign); -1 when no x exists. Like libsodium, an x of zero
// with the sign bit set is taken as zero.
static int p3_frombytes(ge_p3 *h, const uint8_t s[32]) {
    fe u, v, v3, vxx, check, one;
    fe_small(one, 1);
    fe_frombytes(h->Y, s);
    fe_copy(h->Z, one);
    fe_sq(u, h->Y);
    fe_mul(v, u, curve_d);
    fe_sub(u, u, one);          // y^2 - 1
    fe_add(v, v, one);          // d y^2 + 1
    fe_carry(v);
    fe_sq(v3, v);
    fe_mul(v3, v3, v);          // v^3
    fe_sq(h->X, v3);
    fe_mul(h->X, h->X, v);
    fe_mul(h->X, h->X, u);      // u v^7
    fe_pow22523(h->X, h->X);
    fe_mul(h->X, h->X, v3);
    fe_mul(h->X, h->X, u);      // u v^3 (u v^7)^((p - 5) / 8)
    fe_sq(vxx, h->X);
    fe_mul(vxx, vxx, v);
    fe_sub(check, vxx, u);
    if (!fe_iszero(check)) {
        fe_add(check, vxx, u);
        if (!fe_iszero(check)) return -1;
        fe_mul(h->X, h->X, sqrtm1);
    }
    if (fe_isnegative(h->X) != (s[31] >> 7)) fe_neg(h->X, h->X);
    fe_mul(h->T, h->X, h->Y);
    return 0;
}

// A square root of a, or -1.
static int fe_sqrt(fe out, const fe a) {
    fe r, check, neg;
    fe_pow22523(r, a);
    fe_mul(r, r, a);            // a^((p + 3) / 8)
    fe_sq(check, r);
    fe_sub(check, check, a);
    if (!fe_iszero(check)) {
        fe_sq(check, r);
        fe_neg(neg, a);
        fe_sub(check, check, neg);
        if (!fe_iszero(check)) return -1;
        fe_mul(r, r, sqrtm1);
    }
    fe_copy(out, r);
    return 0;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

// The curve's constants, derived rather than written out: d = -121665/121666,
// sqrt(-1) = 2^((p - 1) / 4), the base point (y = 4/5, x even), the y of every point of
// small order (0, 1, -1 and the two of order 8), and the base point's tables.
static void init_constants(void) {
    fe t, u, one, two;
    fe_small(one, 1);
    fe_small(two, 2);
    fe_small(t, 121666);
    fe_invert(t, t);
    fe_small(u, 121665);
    fe_mul(t, t, u);
    fe_neg(curve_d, t);
    fe_add(curve_2d, curve_d, curve_d);
    fe_carry(curve_2d);
    fe_pow22523(t, two);        // 2^(2^252 - 3)
    fe_sq(t, t);
    fe_mul(sqrtm1, t, two);     // 2^(2^253 - 5)

    // Order 8: 2P has y = 0, so y^2 = -x^2, and the curve gives d y^4 + 2 y^2 - 1 = 0.
    fe root, y2, dinv, y8;
    fe_add(t, one, curve_d);
    fe_carry(t);
    int found = 0;
    if (fe_sqrt(root, t) == 0) {
        fe_invert(dinv, curve_d);
        for (int sign = 0; sign < 2 && !found; sign++) {
            fe_neg(t, one);
            if (sign) fe_sub(t, t, root); else { fe_add(t, t, root); fe_carry(t); }
            fe_mul(y2, t, dinv);
            found = fe_sqrt(y8, y2) == 0;
        }
    }
    if (!found) return;
    fe zero = {0, 0, 0, 0, 0}, minus;
    fe_tobytes(small_order_y[0], zero);
    fe_tobytes(small_order_y[1], one);
    fe_neg(minus, one);
    fe_tobytes(small_order_y[2], minus);
    fe_tobytes(small_order_y[3], y8);
    fe_neg(minus, y8);
    fe_tobytes(small_order_y[4], minus);

    uint8_t encoded[32];
    ge_p3 base;
    fe_small(t, 5);
    fe_invert(t, t);
    fe_small(u, 4);
    fe_mul(t, t, u);
    fe_tobytes(encoded, t);
    if (p3_frombytes(&base, encoded) != 0) return;
    odd_multiples(base_table, &base, BASE_POINTS);
    for (int i = 0; i < 128; i++) p3_dbl(&base, &base);
    odd_multiples(base128_table, &base, BASE_POINTS);
    constants_ready = 1;
}

// libsodium's refusal of small order: the encoding's y (its top bit left out, reduced
// mod p) is that of a point of order 1, 2, 4 or 8.
static int has_small_order(const uint8_t s[32]) {
    fe y;
    uint8_t canonical[32];
    fe_frombytes(y, s);
    fe_tobytes(canonical, y);
    for (int i = 0; i < 5; i++) {
        if (memcmp(canonical, small_order_y[i], 32) == 0) return 1;
    }
    return 0;
}

// y < p, the sign bit left out.
static int is_canonical_point(const uint8_t s[32]) {
    if ((s[31] & 0x7f) != 0x7f) return 1;
    for (int i = 30; i > 0; i--) {
        if (s[i] != 0xff) return 1;
    }
    return s[0] < 0xed;
}

// S < L = 2^252 + 27742317777372353535851937790883648493.
static int is_canonical_scalar(const uint8_t s[32]) {
    static const uint8_t order[32] = {
        0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
    };
    for (int i = 31; i >= 0; i--) {
        if (s[i] < order[i]) return 1;
        if (s[i] > order[i]) return 0;
    }
    return 0;
}

// The width-w non-adjacent form of a 128-bit little-endian number: odd digits under
// 2^(w-1) in magnitude, each followed by at least w - 1 zeros. Returns its length.
static int wnaf(int8_t digits[130], const uint8_t bytes[16], int w) {
    uint64_t k0 = load64(bytes), k1 = load64(bytes + 8), k2 = 0;
    const uint64_t window = (uint64_t)1 << w, mask = window - 1;
    int length = 0;
    memset(digits, 0, 130);
    while (k0 | k1 | k2) {
        if (k0 & 1) {
            int64_t digit = (int64_t)(k0 & mask);
            if (digit >= (int64_t)(window >> 1)) digit -= (int64_t)window;
            digits[length] = (int8_t)digit;
            if (digit > 0) {
                k0 -= (uint64_t)digit; // its low bits are digit: no borrow
            } else {
                uint64_t before = k0;
                k0 += (uint64_t)(-digit);
                if (k0 < before && ++k1 == 0) k2++;
            }
        }
        k0 = (k0 >> 1) | (k1 << 63);
        k1 = (k1 >> 1) | (k2 << 63);
        k2 >>= 1;
        length++;
    }
    return length;
}

int whisper_ed25519_prepare(whisper_ed25519_key *key, const uint8_t public_key[32]) {
    pthread_once(&once, init_constants);
    if (!constants_ready) return -2;
    if (!is_canonical_point(public_key) || has_small_order(public_key)) return -1;
    ge_p3 a;
    if (p3_frombytes(&a, public_key) != 0) return -1;
    fe_neg(a.X, a.X);
    fe_neg(a.T, a.T);
    ge_niels *tables = (ge_niels *)key->limbs;
    odd_multiples(tables, &a, KEY_POINTS);
    for (int i = 0; i < 128; i++) p3_dbl(&a, &a);
    odd_multiples(tables + KEY_POINTS, &a, KEY_POINTS);
    return 0;
}

static inline void add_digit(ge_p1p1 *t, ge_p3 *u, int digit, const ge_niels *table) {
    if (digit == 0) return;
    p1p1_to_p3(u, t);
    if (digit > 0) p3_madd(t, u, &table[digit >> 1], 0);
    else p3_madd(t, u, &table[(-digit) >> 1], 1);
}

int whisper_ed25519_check(const whisper_ed25519_key *key, const uint8_t sig[64], const uint8_t h[32]) {
    pthread_once(&once, init_constants);
    if (!constants_ready) return -1;
    if (!is_canonical_scalar(sig + 32) || has_small_order(sig)) return -1;
    int8_t h0[130], h1[130], s0[130], s1[130];
    int length = wnaf(h0, h, KEY_WINDOW), n;
    if ((n = wnaf(h1, h + 16, KEY_WINDOW)) > length) length = n;
    if ((n = wnaf(s0, sig + 32, BASE_WINDOW)) > length) length = n;
    if ((n = wnaf(s1, sig + 48, BASE_WINDOW)) > length) length = n;
    const ge_niels *tables = (const ge_niels *)key->limbs;
    ge_p2 r;
    ge_p1p1 t;
    ge_p3 u;
    memset(&r, 0, sizeof r);
    r.Y[0] = 1;
    r.Z[0] = 1;
    for (int i = length - 1; i >= 0; i--) {
        p2_dbl(&t, r.X, r.Y, r.Z);
        add_digit(&t, &u, h0[i], tables);
        add_digit(&t, &u, h1[i], tables + KEY_POINTS);
        add_digit(&t, &u, s0[i], base_table);
        add_digit(&t, &u, s1[i], base128_table);
        p1p1_to_p2(&r, &t);
    }
    fe zinv, x, y;
    uint8_t encoded[32];
    fe_invert(zinv, r.Z);
    fe_mul(x, r.X, zinv);
    fe_mul(y, r.Y, zinv);
    fe_tobytes(encoded, y);
    encoded[31] ^= (uint8_t)(fe_isnegative(x) << 7);
    return memcmp(encoded, sig, 32) == 0 ? 0 : -1;
}
