//! The reference-made `studio-identity.adf`: unlock both envelopes through the owner slot and the
//! runtime slot, decrypt the provider key, verify the attestations, re-derive the DIDs.
use crate::common;

use adf_crypto::attestation::parse_iso8601;
use adf_crypto::envelope::{EnvelopeName, UnlockKeys, UnlockedVia};
use adf_crypto::keys::{b64, ed25519_from_pkcs8, x25519_from_pkcs8};
use adf_crypto::provision::{agent_signing_key, identity_status, open_row, unlock_file};
use adf_crypto::rows::AttestationRecord;
use adf_crypto::{Attestation, IdentityRow, OwnerIdentity, RuntimeIdentity, did_from_public};
use common::*;
use rusqlite::{Connection, OpenFlags};

struct Fixture {
    _dir: tempfile::TempDir,
    identity: Vec<IdentityRow>,
    meta: std::collections::HashMap<String, String>,
    attestations: Vec<AttestationRecord>,
}

/// Every row `sql` selects, each turned into a value by `map`.
fn select<T, C: FromIterator<T>>(
    conn: &Connection,
    sql: &str,
    map: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> C {
    conn.prepare(sql)
        .unwrap()
        .query_map([], map)
        .unwrap()
        .collect::<Result<C, _>>()
        .unwrap()
}

fn load() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("studio-identity.adf");
    std::fs::copy(fixtures_dir().join("studio-identity.adf"), &path).unwrap();
    let conn = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let identity = select(
        &conn,
        "SELECT purpose, value, encryption_algo, salt, kdf_params, code_access FROM adf_identity",
        |r| {
            Ok(IdentityRow {
                purpose: r.get(0)?,
                value: r.get(1)?,
                encryption_algo: r.get(2)?,
                salt: r.get(3)?,
                kdf_params: r.get(4)?,
                code_access: r.get::<_, i64>(5)? != 0,
            })
        },
    );
    let meta = select(&conn, "SELECT key, value FROM adf_meta", |r| {
        Ok((r.get(0)?, r.get(1)?))
    });
    let attestations = select(
        &conn,
        "SELECT issuer, subject, role, issued_at, expires_at, scope, signature, raw_json FROM adf_attestations ORDER BY id",
        |r| {
            Ok(AttestationRecord {
                issuer: r.get(0)?,
                subject: r.get(1)?,
                role: r.get(2)?,
                issued_at: r.get(3)?,
                expires_at: r.get(4)?,
                scope: r.get(5)?,
                signature: r.get(6)?,
                raw_json: r.get(7)?,
            })
        },
    );
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
