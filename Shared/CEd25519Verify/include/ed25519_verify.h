// Ed25519 verification against a prepared public key, for the services' check of every
// signed frame a client sends: the same predicate as libsodium's
// crypto_sign_verify_detached, in about half its time once the key is prepared.
// docs/architecture.md, "Signatures".
#ifndef WHISPER_ED25519_VERIFY_H
#define WHISPER_ED25519_VERIFY_H

#include <stdint.h>

/// A public key made ready for many verifications: -A and -(2^128)A with their odd
/// multiples, in affine form (1,920 bytes). `whisper_ed25519_prepare` fills it.
typedef struct {
    uint64_t limbs[2 * 8 * 3 * 5];
} whisper_ed25519_key;

/// Prepares a 32-byte Ed25519 public key. 0; -1 for a key libsodium's verification
/// refuses (y not below p, of small order, or no point); -2 when this code cannot serve
/// (its own constants failed their derivation: never expected), so that the caller
/// verifies another way.
int whisper_ed25519_prepare(whisper_ed25519_key *key, const uint8_t public_key[32]);

/// 0 when sig = R || S has S below the group order, R not of small order, and
/// [S]B - [h]A encoded equal to R; -1 otherwise. `h` is SHA-512(R || A || M) reduced
/// mod the group order.
int whisper_ed25519_check(const whisper_ed25519_key *key, const uint8_t sig[64], const uint8_t h[32]);

#endif
