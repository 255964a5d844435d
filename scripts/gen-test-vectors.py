#!/usr/bin/env python3
"""Writes docs/test-vectors/ with implementations independent of the Swift SDK
(Python's hashlib, the `cryptography` package and PyNaCl for crypto_secretbox:
`pip install cryptography pynacl`; the VRF in plain Python integers, below), so that
every client, the Swift SDK included, is checked against something other than itself.

  scripts/gen-test-vectors.py BIP39_VECTORS_JSON

BIP39_VECTORS_JSON is the reference BIP39 vector file (its "english" list of
[entropy, mnemonic, seed, xprv], passphrase "TREZOR"), e.g. vectors.json from the
`mnemonic` package on PyPI. The script checks each published value it copies.
"""
import base64
import hashlib
import hmac
import json
import pathlib
import sys
import unicodedata

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives import serialization

OUT = pathlib.Path(__file__).resolve().parent.parent / "docs" / "test-vectors"
RAW = serialization.Encoding.Raw, serialization.PublicFormat.Raw
B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


def hkdf(ikm, salt, info, length):
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(ikm)


def bip39_seed(mnemonic, passphrase=""):
    m = unicodedata.normalize("NFKD", mnemonic).encode()
    s = unicodedata.normalize("NFKD", "mnemonic" + passphrase).encode()
    return hashlib.pbkdf2_hmac("sha512", m, s, 2048, 64)


def write(name, document):
    (OUT / name).write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def bip39(path):
    english = json.load(open(path))["english"]
    cases = []
    for entropy, mnemonic, seed, _xprv in english:
        assert bip39_seed(mnemonic, "TREZOR").hex() == seed, mnemonic
        cases.append({"entropy": entropy, "mnemonic": mnemonic, "passphrase": "TREZOR", "seed": seed})
    write("bip39-english.json", {
        "description": "BIP39 reference vectors (English wordlist): entropy -> mnemonic, and "
                       "seed = PBKDF2-HMAC-SHA512(NFKD(mnemonic), NFKD('mnemonic' + passphrase), 2048, 64).",
        "source": "BIP-0039 reference vectors (python-mnemonic vectors.json, 'english')",
        "cases": cases,
    })


def rfc5869():
    cases = [
        {"name": "RFC 5869 A.1", "ikm": "0b" * 22, "salt": bytes(range(0x00, 0x0d)).hex(),
         "info": bytes(range(0xf0, 0xfa)).hex(), "length": 42},
        {"name": "RFC 5869 A.2", "ikm": bytes(range(0x00, 0x50)).hex(), "salt": bytes(range(0x60, 0xb0)).hex(),
         "info": bytes(range(0xb0, 0x100)).hex(), "length": 82},
        {"name": "RFC 5869 A.3", "ikm": "0b" * 22, "salt": "", "info": "", "length": 42},
    ]
    published = {
        "RFC 5869 A.1": "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865",
        "RFC 5869 A.3": "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8",
    }
    for case in cases:
        okm = hkdf(bytes.fromhex(case["ikm"]), bytes.fromhex(case["salt"]) or None, bytes.fromhex(case["info"]), case["length"])
        case["okm"] = okm.hex()
        if case["name"] in published:
            assert published[case["name"]] == case["okm"], case["name"]
    write("hkdf-sha256-rfc5869.json", {
        "description": "HKDF-SHA256 (RFC 5869 appendix A.1 to A.3). An empty salt means a salt of 32 zero bytes.",
        "cases": cases,
    })


def rfc8032():
    cases = [
        {"name": "RFC 8032 7.1 TEST 1", "secretKey": "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", "message": ""},
        {"name": "RFC 8032 7.1 TEST 2", "secretKey": "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb", "message": "72"},
        {"name": "RFC 8032 7.1 TEST 3", "secretKey": "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7", "message": "af82"},
    ]
    published = {
        "RFC 8032 7.1 TEST 1": ("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
                                "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
    }
    for case in cases:
        key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(case["secretKey"]))
        case["publicKey"] = key.public_key().public_bytes(*RAW).hex()
        case["signature"] = key.sign(bytes.fromhex(case["message"])).hex()
        if case["name"] in published:
            assert published[case["name"]] == (case["publicKey"], case["signature"]), case["name"]
    write("ed25519-rfc8032.json", {
        "description": "Ed25519 (RFC 8032 section 7.1): the 32-byte secret key is the seed; signatures are deterministic.",
        "cases": cases,
    })


# ECVRF-EDWARDS25519-SHA512-TAI (RFC 9381, suite 0x03) on affine edwards25519
# points, in Python integers: slow, short, and sharing nothing with libsodium.
ED_P = 2 ** 255 - 19
ED_L = 2 ** 252 + 27742317777372353535851937790883648493
ED_D = -121665 * pow(121666, ED_P - 2, ED_P) % ED_P
ED_SQRT_M1 = pow(2, (ED_P - 1) // 4, ED_P)


def ed_decode(data):
    """RFC 8032 5.1.3: a point of the curve from 32 bytes, or None."""
    y = int.from_bytes(data, "little") & ((1 << 255) - 1)
    sign = data[31] >> 7
    if y >= ED_P:
        return None
    x2 = (y * y - 1) * pow(ED_D * y * y + 1, ED_P - 2, ED_P) % ED_P
    if x2 == 0:
        return None if sign else (0, y)
    x = pow(x2, (ED_P + 3) // 8, ED_P)
    if (x * x - x2) % ED_P:
        x = x * ED_SQRT_M1 % ED_P
    if (x * x - x2) % ED_P:
        return None
    if x & 1 != sign:
        x = ED_P - x
    return (x, y)


def ed_encode(point):
    x, y = point
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def ed_add(a, b):
    (x1, y1), (x2, y2) = a, b
    t = ED_D * x1 * x2 * y1 * y2 % ED_P
    x3 = (x1 * y2 + x2 * y1) * pow(1 + t, ED_P - 2, ED_P) % ED_P
    y3 = (y1 * y2 + x1 * x2) * pow(1 - t, ED_P - 2, ED_P) % ED_P
    return (x3, y3)


def ed_mul(k, point):
    result, addend = (0, 1), point
    while k:
        if k & 1:
            result = ed_add(result, addend)
        addend = ed_add(addend, addend)
        k >>= 1
    return result


ED_B = ed_decode((4 * pow(5, ED_P - 2, ED_P) % ED_P).to_bytes(32, "little"))


def vrf_prove(seed, alpha):
    """Returns (public key, pi, beta) for a 32-byte seed and the bytes alpha."""
    digest = hashlib.sha512(seed).digest()
    x = int.from_bytes(digest[:32], "little")
    x &= (1 << 254) - 8
    x |= 1 << 254
    pk = ed_encode(ed_mul(x, ED_B))
    h = None
    for ctr in range(256):
        candidate = ed_decode(hashlib.sha512(b"\x03\x01" + pk + alpha + bytes([ctr, 0])).digest()[:32])
        if candidate is not None:
            h = ed_mul(8, candidate)
            if h != (0, 1):
                break
    gamma = ed_mul(x, h)
    k = int.from_bytes(hashlib.sha512(digest[32:] + ed_encode(h)).digest(), "little") % ED_L
    points = [pk, ed_encode(h), ed_encode(gamma), ed_encode(ed_mul(k, ED_B)), ed_encode(ed_mul(k, h))]
    c = hashlib.sha512(b"\x03\x02" + b"".join(points) + b"\x00").digest()[:16]
    s = (k + int.from_bytes(c, "little") * x) % ED_L
    pi = ed_encode(gamma) + c + s.to_bytes(32, "little")
    beta = hashlib.sha512(b"\x03\x03" + ed_encode(ed_mul(8, gamma)) + b"\x00").digest()
    return pk, pi, beta


def rfc9381():
    cases = [
        {"name": "RFC 9381 B.3 example 16", "secretKey": "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", "alpha": ""},
        {"name": "RFC 9381 B.3 example 17", "secretKey": "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb", "alpha": "72"},
        {"name": "RFC 9381 B.3 example 18", "secretKey": "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7", "alpha": "af82"},
    ]
    published = {
        "RFC 9381 B.3 example 16": (
            "8657106690b5526245a92b003bb079ccd1a92130477671f6fc01ad16f26f723f26f8a57ccaed74ee1b190bed1f479d97"
            "27d2d0f9b005a6e456a35d4fb0daab1268a1b0db10836d9826a528ca76567805",
            "90cf1df3b703cce59e2a35b925d411164068269d7b2d29f3301c03dd757876ff66b71dda49d2de59d03450451af02679"
            "8e8f81cd2e333de5cdf4f3e140fdd8ae"),
        "RFC 9381 B.3 example 17": (
            "f3141cd382dc42909d19ec5110469e4feae18300e94f304590abdced48aed5933bf0864a62558b3ed7f2fea45c92a465"
            "301b3bbf5e3e54ddf2d935be3b67926da3ef39226bbc355bdc9850112c8f4b02",
            "eb4440665d3891d668e7e0fcaf587f1b4bd7fbfe99d0eb2211ccec90496310eb5e33821bc613efb94db5e5b54c70a848"
            "a0bef4553a41befc57663b56373a5031"),
        "RFC 9381 B.3 example 18": (
            "9bc0f79119cc5604bf02d23b4caede71393cedfbb191434dd016d30177ccbf8096bb474e53895c362d8628ee9f9ea3c0"
            "e52c7a5c691b6c18c9979866568add7a2d41b00b05081ed0f58ee5e31b3a970e",
            "645427e5d00c62a23fb703732fa5d892940935942101e456ecca7bb217c61c452118fec1219202a0edcf038bb6373241"
            "578be7217ba85a2687f7a0310b2df19f"),
    }
    for case in cases:
        pk, pi, beta = vrf_prove(bytes.fromhex(case["secretKey"]), bytes.fromhex(case["alpha"]))
        case["publicKey"], case["pi"], case["beta"] = pk.hex(), pi.hex(), beta.hex()
        assert published[case["name"]] == (case["pi"], case["beta"]), case["name"]
    write("vrf-ecvrf-edwards25519-sha512-tai.json", {
        "description": "ECVRF-EDWARDS25519-SHA512-TAI (RFC 9381 appendix B.3): the secret key is an Ed25519 seed; "
                       "pi is Gamma (32 bytes), c (16) and s (32); beta is the 64-byte output.",
        "cases": cases,
    })


def whisper_id(body):
    digest = hashlib.sha256(body.encode()).digest()
    bits = (digest[0] << 2) | (digest[1] >> 6)
    full = body + B32[bits >> 5] + B32[bits & 31]
    return "WSP-%s-%s-%s" % (full[0:4], full[4:8], full[8:12])


def canonical(message_type, message_id, sender, to, timestamp, nonce_b64, ciphertext_b64, head=None):
    text = ("v1\n" + message_type + "\n" + message_id + "\n" + sender + "\n" + to + "\n" + str(timestamp) + "\n"
            + nonce_b64 + "\n" + ciphertext_b64 + "\n")
    if head is not None:
        # A message carrying its sender's key directory head signs one line more.
        text += "head:" + ",".join([str(head["epoch"]), head["logRoot"], head["prefixRoot"], str(head["publishedAt"]),
                                    head["keyId"], head["signature"]]) + "\n"
    return text.encode()


PROOF_PREFIX = b"whisper-registration-proof-v2:"


def registration_proof_v2(sign_key, challenge):
    signed = PROOF_PREFIX + challenge
    return {"signer": 0, "cryptoVersion": 2, "challenge": base64.b64encode(challenge).decode(),
            "prefix": PROOF_PREFIX.decode(), "signedBytes": signed.hex(),
            "signature": base64.b64encode(sign_key.sign(signed)).decode()}


def chain():
    identities = []
    for mnemonic, passphrase in [
        ("abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about", ""),
        ("legal winner thank year wave sausage worth useful legal winner thank yellow", ""),
        ("letter advice cage absurd amount doctor acoustic avoid letter advice cage above", "TREZOR"),
    ]:
        seed = bip39_seed(mnemonic, passphrase)
        enc_seed = hkdf(seed, b"whisper", b"whisper/enc", 32)
        sign_seed = hkdf(seed, b"whisper", b"whisper/sign", 32)
        contacts_key = hkdf(seed, b"whisper", b"whisper/contacts", 32)
        enc_public = X25519PrivateKey.from_private_bytes(enc_seed).public_key().public_bytes(*RAW)
        sign_key = Ed25519PrivateKey.from_private_bytes(sign_seed)
        sign_public = sign_key.public_key().public_bytes(*RAW)
        identities.append({
            "mnemonic": mnemonic, "passphrase": passphrase, "seed": seed.hex(),
            "encSeed": enc_seed.hex(), "signSeed": sign_seed.hex(), "contactsKey": contacts_key.hex(),
            "encPublicKey": base64.b64encode(enc_public).decode(), "signPublicKey": base64.b64encode(sign_public).decode(),
            "_signKey": sign_key,
        })
    sender, recipient = identities[0], identities[1]
    signatures = []
    # The four call frames sign with the callId in the messageId's place (docs/protocol.md section 11).
    # The last case carries a key directory head (docs/protocol.md sections 5 and 11).
    head = {"epoch": 42, "logRoot": base64.b64encode(hashlib.sha256(b"log").digest()).decode(),
            "prefixRoot": base64.b64encode(hashlib.sha256(b"prefix").digest()).decode(), "publishedAt": 1767268790000,
            "keyId": "5f1c0a9e7b3d2c48", "signature": base64.b64encode(hashlib.sha512(b"head").digest()).decode()}
    for message_type, to, with_head in [
            ("send_message", "WSP-MN6P-QR7S-TVX4", False), ("group_send_message", "grp-1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f", False),
            ("call_initiate", "WSP-MN6P-QR7S-TVX4", False), ("call_answer", "WSP-MN6P-QR7S-TVX4", False),
            ("call_ice_candidate", "WSP-MN6P-QR7S-TVX4", False), ("call_end", "WSP-MN6P-QR7S-TVX4", False),
            ("send_message", "WSP-MN6P-QR7S-TVX4", True)]:
        fields = {
            "messageType": message_type, "messageId": "6f1d2c3b-4a59-4e8f-9d0c-1b2a3f4e5d6c",
            "from": "WSP-AB3D-EF4G-HJQ3", "toOrGroupId": to, "timestamp": 1767268800000,
            "nonce": base64.b64encode(bytes(range(24))).decode(),
            "ciphertext": base64.b64encode(b"not really a ciphertext, just bytes").decode(),
        }
        if with_head:
            fields["directoryHead"] = head
        signed = canonical(fields["messageType"], fields["messageId"], fields["from"], fields["toOrGroupId"],
                           fields["timestamp"], fields["nonce"], fields["ciphertext"], fields.get("directoryHead"))
        digest = hashlib.sha256(signed).digest()
        signatures.append(dict(fields, signedBytes=signed.decode(), sha256=digest.hex(),
                               sig=base64.b64encode(sender["_signKey"].sign(digest)).decode()))
    challenge = bytes(range(32))
    for identity in identities:
        identity.pop("_signKey")
    ids = []
    for body in ["AB3DEF4GHJ", "MN6PQR7STV", "AAAAAAAAAA", "7777777777"]:
        ids.append({"whisperId": whisper_id(body), "valid": True})
    good = ids[0]["whisperId"]
    ids.append({"whisperId": good[:-1] + ("A" if good[-1] != "A" else "B"), "valid": False})
    ids.append({"whisperId": good[:5] + ("Z" if good[5] != "Z" else "Y") + good[6:], "valid": False})
    sign_key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(sender["signSeed"]))
    write("whisper-chain.json", {
        "description": "Whisper's own chain (docs/protocol.md section 4, 'Keys'; section 12, 'Contacts backup'): mnemonic -> BIP39 seed -> HKDF-SHA256(seed, salt='whisper', "
                       "info='whisper/enc'|'whisper/sign'|'whisper/contacts', 32) -> X25519 public key (encSeed is the private "
                       "scalar) and Ed25519 public key (signSeed is the RFC 8032 secret key); canonical signing bytes and "
                       "sig = Ed25519(SHA256(signed_bytes)) by identities[0] (the last case with a directoryHead line); the registration proof = Ed25519(challenge bytes) "
                       "with cryptoVersion 1, Ed25519('whisper-registration-proof-v2:' + challenge bytes) from cryptoVersion 2; "
                       "Whisper ID checksums.",
        "identities": identities,
        "signatures": {"signer": 0, "cases": signatures},
        "registrationProof": {"signer": 0, "challenge": base64.b64encode(challenge).decode(),
                              "signature": base64.b64encode(sign_key.sign(challenge)).decode()},
        "registrationProofV2": registration_proof_v2(sign_key, challenge),
        "whisperIds": ids,
    })


def contacts_backup():
    # PyNaCl's SecretBox is libsodium's crypto_secretbox (XSalsa20-Poly1305): the blob
    # of docs/protocol.md section 12 ("Contacts backup"), sealed with the contactsKey of the first chain identity.
    from nacl.secret import SecretBox

    mnemonic = "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about"
    contacts_key = hkdf(bip39_seed(mnemonic), b"whisper", b"whisper/contacts", 32)
    contacts = {
        "version": 1,
        "exportedAt": 1767268800000,
        "contacts": [
            {"whisperId": whisper_id("MN6PQR7STV"), "addedAt": 1767000000000, "displayName": "Zo\u00eb",
             "notes": "met at the conference", "isBlocked": False, "isPinned": True, "isMuted": False},
            {"whisperId": whisper_id("AAAAAAAAAA"), "addedAt": 1767100000000,
             "isBlocked": True, "isPinned": False, "isMuted": True},
        ],
    }
    # Keys sorted, no spaces, UTF-8 (what the Swift SDK's ContactsBackup.jsonBytes makes).
    plaintext = json.dumps(contacts, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    nonce = bytes(range(100, 124))
    sealed = SecretBox(contacts_key).encrypt(plaintext, nonce).ciphertext
    write("contacts-backup.json", {
        "description": "Contacts backup (docs/protocol.md section 12, 'Contacts backup'): contactsKey = HKDF-SHA256(BIP39 seed of mnemonic, salt='whisper', "
                       "info='whisper/contacts', 32); ciphertext = crypto_secretbox(plaintext, nonce, contactsKey) "
                       "(XSalsa20-Poly1305, 16-byte tag first); plaintext is the contacts JSON as UTF-8 with keys sorted; "
                       "the body of PUT /backup/contacts is {nonce, ciphertext} in base64. Made with PyNaCl.",
        "mnemonic": mnemonic,
        "contactsKey": contacts_key.hex(),
        "plaintext": plaintext.decode(),
        "nonce": base64.b64encode(nonce).decode(),
        "ciphertext": base64.b64encode(sealed).decode(),
    })


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    bip39(sys.argv[1])
    rfc5869()
    rfc8032()
    rfc9381()
    chain()
    contacts_backup()


if __name__ == "__main__":
    main()
