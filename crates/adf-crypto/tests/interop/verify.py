"""Independent check of adf-crypto output with Python's `cryptography` package.

Reads one JSON document on stdin (written by tests/python_interop.rs) and checks:
  1. a did:key decodes (base58btc, multicodec 0xed01) to the given Ed25519 public key;
  2. an attestation verifies over canonical JSON of its fields minus `signature`;
  3. a sealed value decrypts through the runtime key slot of an envelope descriptor.
Exits non-zero with a message on the first failure; prints OK otherwise.
"""
import base64
import json
import sys

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def b58decode(s: str) -> bytes:
    n = 0
    for ch in s:
        n = n * 58 + ALPHABET.index(ch)
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    pad = len(s) - len(s.lstrip("1"))
    return b"\x00" * pad + body


def did_to_public(did: str) -> bytes:
    assert did.startswith("did:key:z"), "not a did:key"
    raw = b58decode(did[len("did:key:z"):])
    assert len(raw) == 34 and raw[:2] == b"\xed\x01", "bad multicodec"
    return raw[2:]


def main() -> None:
    doc = json.load(sys.stdin)

    # 1. did:key
    pub = did_to_public(doc["did"])
    assert pub == base64.b64decode(doc["public_raw_b64"]), "did does not decode to the public key"
    Ed25519PublicKey.from_public_bytes(pub)

    # 2. attestation (ASCII-only fields: sort_keys gives the same order as UTF-16 sorting)
    att = dict(doc["attestation"])
    sig = att.pop("signature")
    alg, b64sig = sig.split(":", 1)
    assert alg == "ed25519", "signature algorithm"
    signed = json.dumps(att, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    Ed25519PublicKey.from_public_bytes(did_to_public(att["issuer"])).verify(base64.b64decode(b64sig), signed)

    # 3. envelope runtime slot -> DEK -> sealed value
    env = doc["envelope"]
    desc = json.loads(env["descriptor_json"])
    priv = serialization.load_der_private_key(base64.b64decode(env["runtime_x25519_pkcs8_b64"]), password=None)
    slot = next(s for s in desc["slots"] if s["type"] == "runtime")
    eph = base64.b64decode(slot["ephemeral_pub"])
    shared = priv.exchange(X25519PublicKey.from_public_bytes(eph))
    wrap = HKDF(algorithm=hashes.SHA256(), length=32, salt=eph,
                info=("adf-envelope-v1:" + env["name"]).encode()).derive(shared)
    dek = AESGCM(wrap).decrypt(base64.b64decode(slot["iv"]), base64.b64decode(slot["wrapped_dek"]), None)
    sealed = base64.b64decode(env["sealed_b64"])
    plain = AESGCM(dek).decrypt(sealed[:12], sealed[12:], None)
    assert plain.decode() == env["expected_plaintext"], "sealed value mismatch"
    print("OK")


if __name__ == "__main__":
    main()
