//! `AdfFile::identity_apply`: one identity change is one transaction.
use crate::common;

use adf_store::{AttestationRow, IdentityRow, IdentityWrite};

fn row(purpose: &str, algo: &str, code_access: bool) -> IdentityRow {
    IdentityRow {
        purpose: purpose.into(),
        value: vec![1, 2, 3],
        encryption_algo: algo.into(),
        salt: None,
        kdf_params: None,
        code_access,
    }
}

fn attestation(role: &str, signature: &str) -> AttestationRow {
    AttestationRow {
        id: 0,
        issuer: "did:key:zIssuer".into(),
        subject: "did:key:zSubject".into(),
        role: role.into(),
        issued_at: "2026-01-01T00:00:00.000Z".into(),
        expires_at: None,
        scope: None,
        signature: signature.into(),
        raw_json: "{}".into(),
    }
}

#[test]
fn identity_apply_writes_everything_or_nothing() {
    let (_dir, _path, mut file) = common::new_file("identity");
    file.identity_apply(&IdentityWrite {
        upsert_rows: vec![row("a", "plain", true), row("b", "env:credentials", false)],
        attestations: vec![attestation("owner", "s1"), attestation("member", "s2")],
        meta: vec![("adf_did".into(), "did:key:zSubject".into())],
        ..IdentityWrite::default()
    })
    .unwrap();
    assert_eq!(file.identity_rows().unwrap().len(), 2);
    let did = file.meta_get("adf_did").unwrap().unwrap();
    assert_eq!(did.value, "did:key:zSubject");
    assert_eq!(did.protection.as_str(), "readonly");

    // Replace the owner role, keep member, skip a duplicate, keep code_access on overwrite,
    // drop sealed credentials.
    file.identity_apply(&IdentityWrite {
        delete_sealed_credentials: true,
        upsert_rows: vec![row("a", "env:credentials", false)],
        replace_roles: vec!["owner".into()],
        attestations: vec![attestation("owner", "s3"), attestation("member", "s2")],
        ..IdentityWrite::default()
    })
    .unwrap();
    let rows = file.identity_rows().unwrap();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].code_access, "overwrite keeps the flag");
    let sigs: Vec<String> = file
        .attestations()
        .unwrap()
        .into_iter()
        .map(|a| a.signature)
        .collect();
    assert_eq!(sigs, ["s2", "s3"]);

    // A non-identity meta key is refused and nothing else in the change lands.
    let before = file.identity_rows().unwrap();
    let err = file
        .identity_apply(&IdentityWrite {
            delete_purposes: vec!["a".into()],
            meta: vec![("adf_name".into(), "x".into())],
            ..IdentityWrite::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("adf_name"));
    assert_eq!(file.identity_rows().unwrap(), before);
}
