//! Key encodings, Ed25519 signatures, Ed25519→X25519 conversion and the shared AEAD/KDF helpers.
//!
//! The reference stores keys as DER (PKCS#8 for private, SPKI for public); the DER prefixes are
//! fixed byte strings for these two curves, so we compare and prepend them instead of pulling in a
//! general ASN.1 parser.

use aes_gcm::Aes256Gcm;
use aes_gcm::aead::{Aead, KeyInit};
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier as _, VerifyingKey};
use hkdf::Hkdf;
use rand::CryptoRng;
use sha2::{Digest as _, Sha256};
use x25519_dalek::{PublicKey as XPublic, StaticSecret};
use zeroize::Zeroizing;

use crate::error::{Error, Result};

/// PKCS#8 prefix of a 48-byte Ed25519 private key (followed by the 32-byte seed).
pub const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];
/// SPKI prefix of a 44-byte Ed25519 public key.
pub const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];
/// PKCS#8 prefix of a 48-byte X25519 private key.
pub const X25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x04, 0x22, 0x04, 0x20,
];
/// SPKI prefix of a 44-byte X25519 public key.
pub const X25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x6e, 0x03, 0x21, 0x00,
];

/// Prefix of every signature string the reference writes.
pub const SIGNATURE_PREFIX: &str = "ed25519:";

// ---------------------------------------------------------------------------------------------
// base64

/// Standard base64 with padding, as Node's `Buffer.toString('base64')`.
pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decode standard base64, padded or not (the spec asks us to accept both).
pub fn b64_decode(s: &str, what: &str) -> Result<Vec<u8>> {
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    engine
        .decode(s.trim())
        .map_err(|_| Error::Base64(what.to_string()))
}

pub(crate) fn b64_array<const N: usize>(s: &str, what: &str) -> Result<[u8; N]> {
    let v = b64_decode(s, what)?;
    <[u8; N]>::try_from(v.as_slice())
        .map_err(|_| Error::InvalidKey(format!("{what}: expected {N} bytes, got {}", v.len())))
}

// ---------------------------------------------------------------------------------------------
// DER encodings

fn strip_prefix(der: &[u8], prefix: &[u8], what: &str) -> Result<[u8; 32]> {
    let rest = der
        .strip_prefix(prefix)
        .ok_or_else(|| Error::InvalidKey(format!("{what}: unexpected DER prefix")))?;
    <[u8; 32]>::try_from(rest)
        .map_err(|_| Error::InvalidKey(format!("{what}: expected {} bytes", prefix.len() + 32)))
}

fn with_prefix(prefix: &[u8], raw: &[u8; 32]) -> Vec<u8> {
    let mut v = Vec::with_capacity(prefix.len() + 32);
    v.extend_from_slice(prefix);
    v.extend_from_slice(raw);
    v
}

/// Ed25519 private key as the 48-byte PKCS#8 DER stored in `crypto:signing:private_key`.
pub fn ed25519_to_pkcs8(key: &SigningKey) -> Zeroizing<Vec<u8>> {
    Zeroizing::new(with_prefix(&ED25519_PKCS8_PREFIX, &key.to_bytes()))
}

/// Parse a 48-byte Ed25519 PKCS#8 DER.
pub fn ed25519_from_pkcs8(der: &[u8]) -> Result<SigningKey> {
    let seed = Zeroizing::new(strip_prefix(der, &ED25519_PKCS8_PREFIX, "Ed25519 PKCS#8")?);
    Ok(SigningKey::from_bytes(&seed))
}

/// Ed25519 public key as the 44-byte SPKI DER stored in `crypto:signing:public_key`.
pub fn ed25519_to_spki(key: &VerifyingKey) -> Vec<u8> {
    with_prefix(&ED25519_SPKI_PREFIX, key.as_bytes())
}

/// Parse a 44-byte Ed25519 SPKI DER.
pub fn ed25519_from_spki(der: &[u8]) -> Result<VerifyingKey> {
    let raw = strip_prefix(der, &ED25519_SPKI_PREFIX, "Ed25519 SPKI")?;
    VerifyingKey::from_bytes(&raw)
        .map_err(|_| Error::InvalidKey("Ed25519 SPKI: not a curve point".into()))
}

/// X25519 private key as 48-byte PKCS#8 DER; the scalar is written exactly as held (unclamped).
pub fn x25519_to_pkcs8(key: &StaticSecret) -> Zeroizing<Vec<u8>> {
    let raw = Zeroizing::new(key.to_bytes());
    Zeroizing::new(with_prefix(&X25519_PKCS8_PREFIX, &raw))
}

/// Parse a 48-byte X25519 PKCS#8 DER.
pub fn x25519_from_pkcs8(der: &[u8]) -> Result<StaticSecret> {
    let raw = Zeroizing::new(strip_prefix(der, &X25519_PKCS8_PREFIX, "X25519 PKCS#8")?);
    Ok(StaticSecret::from(*raw))
}

/// X25519 public key as 44-byte SPKI DER.
pub fn x25519_to_spki(key: &XPublic) -> Vec<u8> {
    with_prefix(&X25519_SPKI_PREFIX, key.as_bytes())
}

/// Parse a 44-byte X25519 SPKI DER.
pub fn x25519_from_spki(der: &[u8]) -> Result<XPublic> {
    Ok(XPublic::from(strip_prefix(
        der,
        &X25519_SPKI_PREFIX,
        "X25519 SPKI",
    )?))
}

// ---------------------------------------------------------------------------------------------
// Ed25519 -> X25519

/// libsodium `crypto_sign_ed25519_sk_to_curve25519`: clamp(SHA-512(seed)[0..32]).
///
/// The reference stores this scalar clamped, so we clamp here too (dalek's `to_scalar_bytes`
/// returns it unclamped) to keep PKCS#8 output byte-identical.
pub fn ed25519_secret_to_x25519(key: &SigningKey) -> StaticSecret {
    let mut s = Zeroizing::new(key.to_scalar_bytes());
    s[0] &= 248;
    s[31] &= 127;
    s[31] |= 64;
    StaticSecret::from(*s)
}

/// libsodium `crypto_sign_ed25519_pk_to_curve25519`; refuses small-order points, for which
/// Diffie-Hellman would produce a predictable shared secret.
pub fn ed25519_public_to_x25519(key: &VerifyingKey) -> Result<XPublic> {
    if key.to_edwards().is_small_order() {
        return Err(Error::InvalidKey(
            "Ed25519 public key is a small-order point".into(),
        ));
    }
    Ok(XPublic::from(key.to_montgomery().to_bytes()))
}

// ---------------------------------------------------------------------------------------------
// signatures

/// Sign `msg` and return the reference's signature string `ed25519:<base64>`.
pub fn sign(key: &SigningKey, msg: &[u8]) -> String {
    let sig: Signature = key.sign(msg);
    format!("{SIGNATURE_PREFIX}{}", b64(&sig.to_bytes()))
}

/// Parse `ed25519:<base64>`: split on the first `:`, demand the `ed25519` algorithm and 64 bytes.
pub fn parse_signature(s: &str) -> Result<Signature> {
    let (alg, body) = s
        .split_once(':')
        .ok_or_else(|| Error::MalformedSignature("missing `<alg>:` prefix".into()))?;
    if alg != "ed25519" {
        return Err(Error::UnsupportedAlgorithm(alg.chars().take(32).collect()));
    }
    let bytes = b64_decode(body, "signature")?;
    let arr = <[u8; 64]>::try_from(bytes.as_slice()).map_err(|_| {
        Error::MalformedSignature(format!("expected 64 bytes, got {}", bytes.len()))
    })?;
    Ok(Signature::from_bytes(&arr))
}

/// Verify a signature string over `msg`. `what` names the signed object in the error.
pub fn verify(key: &VerifyingKey, msg: &[u8], sig: &str, what: &str) -> Result<()> {
    let sig = parse_signature(sig)?;
    key.verify(msg, &sig)
        .map_err(|_| Error::BadSignature(what.to_string()))
}

/// Deterministic test-input derivation used by the interop vectors: `sha256("adf-test-vector-v1/<label>")`.
pub fn test_vector_seed(label: &str) -> [u8; 32] {
    Sha256::digest(format!("adf-test-vector-v1/{label}").as_bytes()).into()
}

// ---------------------------------------------------------------------------------------------
// AEAD / KDF building blocks shared by envelopes, ALF and the legacy format

pub(crate) fn random_bytes<const N: usize, R: CryptoRng + ?Sized>(rng: &mut R) -> [u8; N] {
    let mut b = [0u8; N];
    rng.fill_bytes(&mut b);
    b
}

/// AES-256-GCM without AAD; returns `ciphertext || tag`.
pub(crate) fn aes_gcm_encrypt(key: &[u8; 32], iv: &[u8; 12], pt: &[u8]) -> Result<Vec<u8>> {
    let cipher = Aes256Gcm::new_from_slice(key)
        .map_err(|_| Error::InvalidKey("AES-256 key length".into()))?;
    cipher
        .encrypt(&aes_gcm::Nonce::from(*iv), pt)
        .map_err(|_| Error::Decrypt("AES-GCM encryption failed".into()))
}

/// AES-256-GCM open of `ciphertext || tag`; `what` names the object in the error.
pub(crate) fn aes_gcm_decrypt(
    key: &[u8; 32],
    iv: &[u8; 12],
    ct: &[u8],
    what: &str,
) -> Result<Zeroizing<Vec<u8>>> {
    let cipher = Aes256Gcm::new_from_slice(key)
        .map_err(|_| Error::InvalidKey("AES-256 key length".into()))?;
    if ct.len() < 16 {
        return Err(Error::Decrypt(format!("{what}: shorter than a GCM tag")));
    }
    cipher
        .decrypt(&aes_gcm::Nonce::from(*iv), ct)
        .map(Zeroizing::new)
        .map_err(|_| Error::Decrypt(format!("{what}: authentication failed")))
}

/// HKDF-SHA256 to 32 bytes.
pub(crate) fn hkdf32(ikm: &[u8], salt: &[u8], info: &[u8]) -> Zeroizing<[u8; 32]> {
    let hk = Hkdf::<Sha256>::new(Some(salt), ikm);
    let mut out = Zeroizing::new([0u8; 32]);
    // 32 bytes is far below HKDF-SHA256's 8160-byte limit, so expand cannot fail.
    let _ = hk.expand(info, out.as_mut_slice());
    out
}

/// X25519 DH + HKDF(salt = ephemeral public) — the key schedule shared by key slots and
/// level-2 ALF payloads (only `info` differs).
pub(crate) fn x25519_hkdf(
    secret: &StaticSecret,
    peer: &XPublic,
    eph_pub: &[u8; 32],
    info: &[u8],
) -> Zeroizing<[u8; 32]> {
    let shared = secret.diffie_hellman(peer);
    hkdf32(shared.as_bytes(), eph_pub, info)
}
