//! The reference-made `studio-identity.adf`: unlock both envelopes through the owner slot and the
//! runtime slot, decrypt the provider key, verify the attestations, re-derive the DIDs.
use crate::common;

use adf_crypto::attestation::parse_iso8601;
use adf_crypto::envelope::{EnvelopeName, UnlockKeys, UnlockedVia};
use adf_crypto::keys::{b64, ed25519_from_pkcs8, x25519_from_pkcs8};
use adf_crypto::provision::{agent_signing_key, identity_status, open_row, unlock_file};
use adf_crypto::rows::AttestationRecord;
use adf_crypto::{Attestation, IdentityRow, OwnerIdentity, RuntimeIdentity, did_from_public};
use adf_store::test_support::OtherConnection;
use common::*;
use serde_json::Value;

struct Fixture {
    _dir: tempfile::TempDir,
    identity: Vec<IdentityRow>,
    meta: std::collections::HashMap<String, String>,
    attestations: Vec<AttestationRecord>,
}

/// A blob (or text) cell's bytes.
fn bytes(cell: &Value) -> Vec<u8> {
    match cell {
        Value::String(text) => text.as_bytes().to_vec(),
        Value::Array(items) => items
            .iter()
            .map(|b| u8::try_from(b.as_u64().unwrap()).unwrap())
            .collect(),
        other => panic!("not bytes: {other}"),
    }
}

fn text(cell: &Value) -> Option<String> {
    cell.as_str().map(str::to_owned)
}

fn load() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("studio-identity.adf");
    std::fs::copy(fixtures_dir().join("studio-identity.adf"), &path).unwrap();
    // Read as the reference wrote it: no migration, nothing written.
    let reader = OtherConnection::open_read_only(&path).unwrap();
    let tables = reader.tables();
    let identity = tables
        .rows("adf_identity")
        .unwrap()
        .iter()
        .map(|r| IdentityRow {
            purpose: text(&r["purpose"]).unwrap(),
            value: bytes(&r["value"]),
            encryption_algo: text(&r["encryption_algo"]).unwrap(),
            salt: (!r["salt"].is_null()).then(|| bytes(&r["salt"])),
            kdf_params: text(&r["kdf_params"]),
            code_access: r["code_access"].as_i64().unwrap() != 0,
        })
        .collect();
    let meta = tables
        .rows("adf_meta")
        .unwrap()
        .iter()
        .map(|r| (text(&r["key"]).unwrap(), text(&r["value"]).unwrap()))
        .collect();
    let mut attestation_rows = tables.rows("adf_attestations").unwrap();
    attestation_rows.sort_by_key(|r| r["id"].as_i64());
    let attestations = attestation_rows
        .iter()
        .map(|r| AttestationRecord {
            issuer: text(&r["issuer"]).unwrap(),
            subject: text(&r["subject"]).unwrap(),
            role: text(&r["role"]).unwrap(),
            issued_at: text(&r["issued_at"]).unwrap(),
            expires_at: text(&r["expires_at"]),
            scope: text(&r["scope"]),
            signature: text(&r["signature"]).unwrap(),
            raw_json: text(&r["raw_json"]).unwrap(),
        })
        .collect();
    Fixture {
        _dir: dir,
        identity,
        meta,
        attestations,
    }
}

fn secrets() -> serde_json::Value {
    manifest()["files"]["studio-identity.adf"].clone()
}

#[test]
fn idn_01_studio_fixture_unlocks_via_owner_and_runtime_slots() {
    let f = load();
    let m = secrets();
    let ts = &m["test_secrets"];
    let owner = OwnerIdentity::from_mnemonic(s(ts, "owner_mnemonic")).unwrap();
    assert_eq!(owner.did(), s(&m, "owner_did"));
    assert_eq!(owner.did(), f.meta["adf_owner_did"]);
    assert_eq!(
        b64(owner.keys().encryption_public().as_bytes()),
        s(ts, "owner_enc_public_key_raw_b64")
    );

    let runtime_x = x25519_from_pkcs8(&b(ts, "runtime_enc_private_key_pkcs8_b64")).unwrap();
    let runtime_sk = ed25519_from_pkcs8(&b(ts, "runtime_signing_private_key_pkcs8_b64")).unwrap();
    let runtime = RuntimeIdentity::from_keys(runtime_sk, runtime_x.clone());
    assert_eq!(runtime.did(), s(&m, "runtime_did"));
    assert_eq!(runtime.did(), f.meta["adf_runtime_did"]);
    assert_eq!(
        b64(runtime.keys().encryption_public().as_bytes()),
        s(ts, "runtime_enc_public_key_raw_b64")
    );

    let plaintext = s(ts, "provider_api_key_plaintext");
    let provider_row = f
        .identity
        .iter()
        .find(|r| r.purpose == "provider:openai-main:apiKey")
        .unwrap();
    assert_eq!(provider_row.encryption_algo, "env:credentials");

    for (name, keys, expect) in [
        (
            "runtime",
            UnlockKeys {
                runtime: Some(&runtime_x),
                owner: None,
            },
            UnlockedVia::Runtime,
        ),
        (
            "owner",
            UnlockKeys {
                runtime: None,
                owner: Some(owner.keys().encryption_secret()),
            },
            UnlockedVia::Owner,
        ),
    ] {
        let u = unlock_file(&f.identity, &keys, None, &mut seeded_rng(9)).unwrap();
        assert_eq!(u.via, [Some(expect), Some(expect)], "{name}");
        assert_eq!(u.status.identity.as_str(), "unlocked");
        assert_eq!(u.status.credentials.as_str(), "unlocked");
        let pt = open_row(provider_row, &u.deks, None).unwrap();
        assert_eq!(std::str::from_utf8(&pt).unwrap(), plaintext, "{name}");
        let sk = agent_signing_key(&f.identity, &u.deks, None).unwrap();
        assert_eq!(
            did_from_public(&sk.verifying_key()),
            f.meta["adf_did"],
            "{name}"
        );
        assert_eq!(f.meta["adf_did"], s(&m, "did"));
    }

    // Without keys: foreign (no password slots in this file), no legacy password prompt.
    let st = identity_status(&f.identity, &Default::default()).unwrap();
    assert_eq!(
        (
            st.identity.as_str(),
            st.credentials.as_str(),
            st.password_protected
        ),
        ("foreign", "foreign", false)
    );
    assert_eq!(
        EnvelopeName::for_purpose("provider:openai-main:apiKey"),
        Some(EnvelopeName::Credentials)
    );
}

#[test]
fn idn_35_studio_fixture_attestations_verify() {
    let f = load();
    let m = secrets();
    let now = parse_iso8601("2026-12-01T00:00:00Z").unwrap();
    assert_eq!(f.attestations.len(), 2);
    let agent = &f.meta["adf_did"];
    let roles: Vec<_> = f.attestations.iter().map(|a| a.role.as_str()).collect();
    assert_eq!(roles, ["owner", "operator"]);
    for rec in &f.attestations {
        let a = Attestation::from_record(rec);
        a.verify(Some(agent), now).unwrap();
        // Our raw_json is byte-identical to what the reference stored.
        assert_eq!(a.to_raw_json(), rec.raw_json);
        assert_eq!(&a.to_record(), rec);
    }
    assert_eq!(f.attestations[0].issuer, s(&m, "owner_did"));
    assert_eq!(f.attestations[1].issuer, s(&m, "runtime_did"));
    // The owner → runtime delegation kept in runtime settings also verifies.
    let del = Attestation::from_json_value(&m["runtime_delegation"]).unwrap();
    del.verify(Some(s(&m, "runtime_did")), now).unwrap();
}
