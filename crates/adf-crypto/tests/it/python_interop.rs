//! Python's `cryptography` package independently checks our did:key, an attestation we issue,
//! and a value sealed in an envelope opened through a runtime slot.
use crate::common;

use std::process::Command;

use adf_crypto::envelope::{Dek, EnvelopeDescriptor, EnvelopeName, seal};
use adf_crypto::keys::{b64, x25519_to_pkcs8};
use adf_crypto::{Attestation, OwnerIdentity, RuntimeIdentity};
use serde_json::json;

#[test]
fn idn_13_35_python_cryptography_verifies_our_output() {
    let probe = Command::new("python3")
        .args(["-c", "import cryptography"])
        .status();
    assert!(
        matches!(probe, Ok(s) if s.success()),
        "python3 with the `cryptography` module is required: run `pip install cryptography`"
    );
    let mut rng = common::seeded_rng(42);
    let owner = OwnerIdentity::from_mnemonic(
        "legal winner thank year wave sausage worth useful legal winner thank yellow",
    )
    .unwrap();
    let rt = RuntimeIdentity::generate_with(&mut rng);
    let agent = RuntimeIdentity::generate_with(&mut rng);
    let att = Attestation::issue(
        owner.keys().signing_key(),
        &agent.did(),
        "member",
        "2026-11-30T00:00:00.000Z",
        Some("2099-01-01T00:00:00.000Z"),
        Some("group:research"),
    );
    let e = EnvelopeName::Credentials;
    let dek = Dek::generate_with(&mut rng);
    let desc = EnvelopeDescriptor::for_recipients(
        e,
        &dek,
        Some(&owner.public()),
        Some(&rt.public()),
        &mut rng,
    )
    .unwrap();
    let secret = "sk-interop ✓ not-real";
    let sealed = seal(&dek, secret.as_bytes(), &mut rng).unwrap();
    let doc = json!({
        "did": agent.did(),
        "public_raw_b64": b64(agent.keys().verifying_key().as_bytes()),
        "attestation": serde_json::to_value(&att).unwrap(),
        "envelope": {
            "name": e.as_str(),
            "descriptor_json": String::from_utf8(desc.to_json_bytes()).unwrap(),
            "runtime_x25519_pkcs8_b64": b64(&x25519_to_pkcs8(rt.keys().encryption_secret())),
            "sealed_b64": b64(&sealed),
            "expected_plaintext": secret,
        }
    });
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/verify.py");
    adf_testkit::processes::assert_python_says_ok(&script, doc.to_string().as_bytes());
}
