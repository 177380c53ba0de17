//! Fuzz ALF ingress: arbitrary bytes must be refused or accepted, never panic.
//! Run with `cargo +nightly fuzz run alf_verify` from `crates/adf-crypto`.
#![no_main]

use adf_crypto::alf::{IngressPolicy, Receiver, ingress_bytes};
use adf_crypto::SigningKey;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let key = SigningKey::from_bytes(&[7u8; 32]);
    let did = adf_crypto::did_from_public(&key.verifying_key());
    let recv = Receiver { did: &did, aliases: &["handle"], signing_key: Some(&key) };
    for policy in [
        IngressPolicy { require_signature: true, require_payload_signature: true },
        IngressPolicy { require_signature: false, require_payload_signature: false },
    ] {
        let _ = ingress_bytes(data, &recv, &policy);
    }
    // Also exercise the canonicaliser on the same input.
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = adf_crypto::canonical::canonicalize_json_text(text);
    }
});
