#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use adf_crypto::SigningKey;
use adf_crypto::keys::{b64_decode, ed25519_from_pkcs8};
use serde_json::Value;

pub fn fixtures_dir() -> PathBuf {
    repo_root().join("testdata/reference-v0.4.2")
}

pub fn vectors() -> Value {
    let p = fixtures_dir().join("crypto-vectors.json");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

pub fn manifest() -> Value {
    let text = std::fs::read_to_string(fixtures_dir().join("manifest.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

pub fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str()
        .unwrap_or_else(|| panic!("missing string {k}"))
}

pub fn b(v: &Value, k: &str) -> Vec<u8> {
    b64_decode(s(v, k), k).unwrap()
}

pub fn arr32(v: &Value, k: &str) -> [u8; 32] {
    b(v, k).try_into().unwrap()
}

/// A keypair object from the vectors (`private_pkcs8_der_b64` etc.).
pub fn signer(v: &Value) -> SigningKey {
    ed25519_from_pkcs8(&b(v, "private_pkcs8_der_b64")).unwrap()
}

pub fn seeded_rng(seed: u64) -> rand::rngs::StdRng {
    use rand::SeedableRng;
    rand::rngs::StdRng::seed_from_u64(seed)
}

/// Flip one bit of byte `i`.
pub fn flip(mut v: Vec<u8>, i: usize) -> Vec<u8> {
    let n = v.len();
    v[i % n] ^= 0x01;
    v
}

/// The repository root, found at run time: cargo sets `CARGO_MANIFEST_DIR` for the test
/// process, and a test binary reused from a shared build cache may have been compiled in
/// another checkout, so the compile-time value could point at someone else's tree.
pub fn repo_root() -> std::path::PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir.join("../..")
}
