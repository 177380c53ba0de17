"""Independent verification of an .adf file provisioned by our runtime, using only Python's
`sqlite3` and the `cryptography` package (no code shared with the Rust implementation).

Reads one JSON document on stdin (secrets never go through argv):
  {"path": ..., "runtime_did": ..., "runtime_x25519_pkcs8_b64": ...,
   "credential": {"purpose": ..., "expected_plaintext": ...}}
and checks that
  1. adf_did decodes (did:key, base58btc, multicodec 0xed01) to the stored SPKI public key;
  2. every attestation verifies (Ed25519 over canonical JSON of all fields but `signature`),
     the owner one issued by adf_owner_did and the operator one by adf_runtime_did, both about
     adf_did;
  3. the identity envelope opens through this runtime's key slot and the sealed PKCS#8 private
     key belongs to the public key;
  4. the sealed credential decrypts through the credentials envelope's runtime slot.
Exits non-zero with a message on the first failure; prints OK otherwise.
"""
import base64
import json
import sqlite3
import sys

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
SPKI_ED25519 = bytes.fromhex("302a300506032b6570032100")


def b58decode(s: str) -> bytes:
    n = 0
    for ch in s:
        n = n * 58 + ALPHABET.index(ch)
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    pad = len(s) - len(s.lstrip("1"))
    return b"\x00" * pad + body


def did_to_public(did: str) -> bytes:
    assert did.startswith("did:key:z"), f"not a did:key: {did}"
    raw = b58decode(did[len("did:key:z"):])
    assert len(raw) == 34 and raw[:2] == b"\xed\x01", "bad multicodec"
    return raw[2:]


def open_sealed(dek: bytes, sealed: bytes) -> bytes:
    assert len(sealed) >= 28, "sealed value shorter than iv + tag"
    return AESGCM(dek).decrypt(sealed[:12], sealed[12:], None)


def unwrap(descriptor: dict, envelope: str, runtime_did: str, priv) -> bytes:
    slot = next(
        (s for s in descriptor["slots"] if s["type"] == "runtime" and s["recipient_did"] == runtime_did),
        None,
    )
    assert slot is not None, f"no runtime slot for {runtime_did} in the {envelope} envelope"
    eph = base64.b64decode(slot["ephemeral_pub"])
    shared = priv.exchange(X25519PublicKey.from_public_bytes(eph))
    wrap = HKDF(algorithm=hashes.SHA256(), length=32, salt=eph,
                info=("adf-envelope-v1:" + envelope).encode()).derive(shared)
    return AESGCM(wrap).decrypt(base64.b64decode(slot["iv"]), base64.b64decode(slot["wrapped_dek"]), None)


def main() -> None:
    doc = json.load(sys.stdin)
    conn = sqlite3.connect(f"file:{doc['path']}?immutable=1", uri=True)
    meta = dict(conn.execute("SELECT key, value FROM adf_meta").fetchall())
    rows = {p: (v, algo) for p, v, algo in conn.execute(
        "SELECT purpose, value, encryption_algo FROM adf_identity")}

    # 1. did:key <-> public key row
    did = meta["adf_did"]
    spki, algo = rows["crypto:signing:public_key"]
    assert algo == "plain", "public key must be plain"
    assert len(spki) == 44 and spki[:12] == SPKI_ED25519, "public key is not Ed25519 SPKI DER"
    public = spki[12:]
    assert did_to_public(did) == public, "adf_did does not decode to the stored public key"

    # 2. attestations
    roles = {}
    for (raw,) in conn.execute("SELECT raw_json FROM adf_attestations ORDER BY id"):
        att = json.loads(raw)
        sig = att.pop("signature")
        alg, b64sig = sig.split(":", 1)
        assert alg == "ed25519", "signature algorithm"
        # ASCII-only members: sort_keys gives the reference's UTF-16 key order.
        signed = json.dumps(att, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        Ed25519PublicKey.from_public_bytes(did_to_public(att["issuer"])).verify(
            base64.b64decode(b64sig), signed)
        roles[att["role"]] = att
    assert roles["owner"]["issuer"] == meta["adf_owner_did"], "owner attestation issuer"
    assert roles["operator"]["issuer"] == meta["adf_runtime_did"], "operator attestation issuer"
    assert roles["owner"]["subject"] == did and roles["operator"]["subject"] == did, "subjects"

    priv = serialization.load_der_private_key(
        base64.b64decode(doc["runtime_x25519_pkcs8_b64"]), password=None)
    runtime_did = doc["runtime_did"]
    assert meta["adf_runtime_did"] == runtime_did, "adf_runtime_did"

    # 3. identity envelope -> private key belongs to the public key
    desc = json.loads(rows["crypto:envelope:identity"][0])
    assert not any(s["type"] == "password" for s in desc["slots"]), "identity has a password slot"
    idek = unwrap(desc, "identity", runtime_did, priv)
    sealed_key, algo = rows["crypto:signing:private_key"]
    assert algo == "env:identity", "private key must be sealed in env:identity"
    key = serialization.load_der_private_key(open_sealed(idek, sealed_key), password=None)
    assert isinstance(key, Ed25519PrivateKey), "private key is not Ed25519"
    raw_pub = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert raw_pub == public, "sealed private key does not match the public key"

    # 4. credentials envelope -> sealed credential
    cred = doc["credential"]
    cdesc = json.loads(rows["crypto:envelope:credentials"][0])
    cdek = unwrap(cdesc, "credentials", runtime_did, priv)
    value, algo = rows[cred["purpose"]]
    assert algo == "env:credentials", "credential must be sealed in env:credentials"
    assert open_sealed(cdek, value).decode() == cred["expected_plaintext"], "credential mismatch"
    print("OK")


if __name__ == "__main__":
    main()
