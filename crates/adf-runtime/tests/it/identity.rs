//! The identity lifecycle on real files with a real runtime home in a temp dir: provisioning
//! (new and older files), the unlock cascade on the reference's `studio-identity.adf`, sealed
//! credentials, sharing and adoption, claim, re-key, reset and the `adf check` pass.
use crate::common::identity_row as row;
use std::path::{Path, PathBuf};

use adf_crypto::envelope::{EnvelopeDescriptor, EnvelopeName, EnvelopeState, Slot, SlotKind};
use adf_crypto::{Attestation, AttestationRecord};
use adf_runtime::home::{HomeError, RuntimeHome};
use adf_runtime::identity::{self, IdentityError, LocalKeys, Provisioned};
use adf_store::check::Severity;
use adf_store::test_support::{OtherConnection, RowsWhere};
use adf_store::{AdfFile, CreateOptions};
use adf_testkit::fixtures::{
    MINIMAL_DID, STUDIO_DID, STUDIO_OWNER_DID, STUDIO_PROVIDER_KEY, TEST_MNEMONIC,
};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    crate::common::fixture(name)
}

struct Env {
    dir: tempfile::TempDir,
    home: RuntimeHome,
}

impl Env {
    /// A temp dir with a home whose owner is the BIP-39 test mnemonic (the studio fixture's).
    fn with_test_owner() -> Self {
        let env = Self::empty();
        env.home.import_owner(TEST_MNEMONIC, false).unwrap();
        env
    }
    /// A home with a fresh, different owner.
    fn with_other_owner() -> Self {
        let env = Self::empty();
        env.home.init_owner(false).unwrap();
        env
    }
    fn empty() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = RuntimeHome::at(dir.path().join("home"));
        Env { dir, home }
    }
    fn keys(&self) -> LocalKeys {
        LocalKeys::from_home(&self.home).unwrap()
    }
    fn copy(&self, name: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::copy(fixture(name), &path).unwrap();
        path
    }
    fn new_file(&self, name: &str) -> (PathBuf, AdfFile) {
        let path = self.dir.path().join(name);
        let file = AdfFile::create(&path, &CreateOptions::default()).unwrap();
        (path, file)
    }
}

fn meta(file: &AdfFile, key: &str) -> String {
    file.meta_get(key)
        .unwrap()
        .map(|e| e.value)
        .unwrap_or_default()
}

fn history(file: &AdfFile) -> Vec<String> {
    serde_json::from_str(&meta(file, "adf_did_history")).unwrap_or_default()
}

fn descriptor(file: &AdfFile, e: EnvelopeName) -> EnvelopeDescriptor {
    let row = row(file, e.descriptor_purpose()).unwrap();
    EnvelopeDescriptor::from_json_bytes(&row.value).unwrap()
}

fn attestations(file: &AdfFile) -> Vec<Attestation> {
    file.attestations()
        .unwrap()
        .iter()
        .map(|r| {
            Attestation::from_record(&AttestationRecord {
                issuer: r.issuer.clone(),
                subject: r.subject.clone(),
                role: r.role.clone(),
                issued_at: r.issued_at.clone(),
                expires_at: r.expires_at.clone(),
                scope: r.scope.clone(),
                signature: r.signature.clone(),
                raw_json: r.raw_json.clone(),
            })
        })
        .collect()
}

fn errors(file: &AdfFile, keys: Option<&LocalKeys>) -> Vec<String> {
    identity::verify(file, keys)
        .unwrap()
        .into_iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.message)
        .collect()
}

#[test]
fn idn_01_idn_03_idn_14_a_new_file_gets_a_full_identity() {
    let env = Env::with_test_owner();
    let keys = env.keys();
    let (_, mut file) = env.new_file("new.adf");
    let open = identity::provision_new(&mut file, &keys).unwrap();
    assert_eq!(open.provisioned, Some(Provisioned::NewKey));
    assert_eq!(open.status.identity, EnvelopeState::Unlocked);
    assert_eq!(open.status.credentials, EnvelopeState::Unlocked);

    let did = meta(&file, "adf_did");
    assert!(did.starts_with("did:key:z6Mk"), "{did}");
    assert_eq!(meta(&file, "adf_owner_did"), STUDIO_OWNER_DID);
    assert_eq!(
        meta(&file, "adf_runtime_did"),
        keys.runtime().unwrap().did()
    );
    for key in ["adf_did", "adf_owner_did", "adf_runtime_did"] {
        assert_eq!(
            file.meta_get(key).unwrap().unwrap().protection.as_str(),
            "readonly",
            "{key}"
        );
    }
    // IDN-03: the DID is the did:key of the stored SPKI public key.
    let public = row(&file, "crypto:signing:public_key").unwrap();
    assert_eq!(public.encryption_algo, "plain");
    assert_eq!(public.value.len(), 44);
    assert_eq!(
        adf_crypto::public_bytes_from_did(&did).unwrap().as_slice(),
        &public.value[12..]
    );
    let private = row(&file, "crypto:signing:private_key").unwrap();
    assert_eq!(private.encryption_algo, "env:identity");
    assert!(!private.code_access);
    // Both envelopes: an owner slot (written from the owner's public key, IDN-14) and a runtime slot.
    for e in EnvelopeName::ALL {
        let d = descriptor(&file, e);
        assert_eq!(d.key_slots(SlotKind::Owner).count(), 1);
        assert_eq!(d.key_slots(SlotKind::Runtime).count(), 1);
        assert!(!d.has_password_slot());
    }
    let atts = attestations(&file);
    let roles: Vec<&str> = atts.iter().map(|a| a.role.as_str()).collect();
    assert_eq!(roles, ["owner", "operator"]);
    for a in &atts {
        a.verify(Some(&did), chrono::Utc::now()).unwrap();
    }
    assert_eq!(atts[0].issuer, STUDIO_OWNER_DID);
    assert_eq!(atts[1].issuer, keys.runtime().unwrap().did());
    assert!(errors(&file, Some(&keys)).is_empty());
    assert!(errors(&file, None).is_empty());
}

#[test]
fn idn_25_envelope_rows_never_make_a_file_password_protected() {
    let env = Env::with_test_owner();
    let keys = env.keys();
    let (path, mut file) = env.new_file("envelopes-only.adf");
    identity::provision_new(&mut file, &keys).unwrap();
    drop(file);

    let mut file = AdfFile::open(&path).unwrap();
    let algos: Vec<String> = file
        .identity_rows()
        .unwrap()
        .into_iter()
        .map(|r| r.encryption_algo)
        .collect();
    assert!(algos.iter().any(|a| a.starts_with("env:")), "{algos:?}");
    let open = identity::open_identity(&mut file, &keys).unwrap();
    assert!(
        !identity::status(&file, &keys, &open)
            .unwrap()
            .password_protected
    );

    // One row sealed under the legacy whole-file password is what asks for it.
    file.identity_put(&[adf_store::IdentityRow {
        purpose: "legacy:test".into(),
        value: vec![0],
        encryption_algo: "aes-256-gcm".into(),
        salt: None,
        kdf_params: None,
        code_access: false,
    }])
    .unwrap();
    let open = identity::open_identity(&mut file, &keys).unwrap();
    assert!(
        identity::status(&file, &keys, &open)
            .unwrap()
            .password_protected
    );
}

#[test]
fn idn_02_an_older_plain_key_file_keeps_its_did_and_a_keyless_one_gets_one() {
    let env = Env::with_test_owner();
    let keys = env.keys();
    let path = env.copy("minimal-headless.adf");
    let mut file = AdfFile::open(&path).unwrap();
    assert_eq!(meta(&file, "adf_did"), MINIMAL_DID);
    let before_public = row(&file, "crypto:signing:public_key").unwrap().value;
    let open = identity::open_identity(&mut file, &keys).unwrap();
    assert_eq!(open.provisioned, Some(Provisioned::KeptExistingKey));
    assert_eq!(meta(&file, "adf_did"), MINIMAL_DID);
    assert!(history(&file).is_empty());
    assert_eq!(
        row(&file, "crypto:signing:public_key").unwrap().value,
        before_public
    );
    assert_eq!(
        row(&file, "crypto:signing:private_key")
            .unwrap()
            .encryption_algo,
        "env:identity"
    );
    assert!(errors(&file, Some(&keys)).is_empty());
    file.close().unwrap();
    // The second open finds the envelopes and provisions nothing.
    let mut file = AdfFile::open(&path).unwrap();
    let open = identity::open_identity(&mut file, &keys).unwrap();
    assert_eq!(open.provisioned, None);
    assert_eq!(open.status.identity, EnvelopeState::Unlocked);
    assert_eq!(meta(&file, "adf_did"), MINIMAL_DID);

    // A file with no key at all gets a fresh identity on first open.
    let (_, mut keyless) = env.new_file("keyless.adf");
    assert_eq!(meta(&keyless, "adf_did"), "");
    let open = identity::open_identity(&mut keyless, &keys).unwrap();
    assert_eq!(open.provisioned, Some(Provisioned::NewKey));
    assert!(meta(&keyless, "adf_did").starts_with("did:key:z"));
}

#[test]
fn idn_02_provisioning_seals_plain_secrets_and_never_touches_a_file_without_an_owner() {
    let env = Env::with_test_owner();
    let (_, mut file) = env.new_file("plain.adf");
    file.identity_put(&[adf_store::IdentityRow {
        purpose: "openai_key".into(),
        value: b"sk-plain-secret".to_vec(),
        encryption_algo: "plain".into(),
        salt: None,
        kdf_params: None,
        code_access: true,
    }])
    .unwrap();
    let warnings: Vec<_> = identity::verify(&file, None)
        .unwrap()
        .into_iter()
        .filter(|f| f.message.contains("openai_key"))
        .collect();
    assert_eq!(warnings.len(), 1, "plain secret warned about (IDN-23)");

    // No owner on this installation: status only, no writes.
    let ownerless = Env::empty();
    let keys = ownerless.keys();
    let open = identity::open_identity(&mut file, &keys).unwrap();
    assert_eq!(open.provisioned, None);
    assert_eq!(open.status.identity, EnvelopeState::Absent);
    assert_eq!(row(&file, "openai_key").unwrap().encryption_algo, "plain");

    let keys = env.keys();
    let open = identity::open_identity(&mut file, &keys).unwrap();
    assert_eq!(open.sealed_plain_rows, 1);
    let sealed = row(&file, "openai_key").unwrap();
    assert_eq!(sealed.encryption_algo, "env:credentials");
    assert!(sealed.code_access, "the flag survives sealing");
    assert_eq!(
        identity::read_credential(&file, &open, "openai_key")
            .unwrap()
            .unwrap()
            .as_slice(),
        b"sk-plain-secret"
    );
}

#[test]
fn idn_17_idn_18_studio_fixture_unlocks_through_the_owner_slot_then_the_runtime_slot() {
    let env = Env::with_test_owner();
    let keys = env.keys();
    let path = env.copy("studio-identity.adf");
    let mut file = AdfFile::open(&path).unwrap();
    let before = descriptor(&file, EnvelopeName::Identity);
    let open = identity::open_identity(&mut file, &keys).unwrap();
    assert_eq!(open.provisioned, None);
    assert_eq!(open.status.identity, EnvelopeState::Unlocked);
    assert_eq!(open.status.credentials, EnvelopeState::Unlocked);
    assert_eq!(
        open.via,
        [
            Some(adf_crypto::envelope::UnlockedVia::Owner),
            Some(adf_crypto::envelope::UnlockedVia::Owner)
        ]
    );
    assert_eq!(open.runtime_slot_added, ["identity", "credentials"]);
    let local_runtime = keys.runtime().unwrap().did();
    for e in EnvelopeName::ALL {
        let d = descriptor(&file, e);
        assert!(
            d.key_slots(SlotKind::Runtime)
                .any(|s| s.recipient_did == local_runtime),
            "{e:?} gained a slot for this installation"
        );
        // The reference installation keeps its slot.
        assert_eq!(d.key_slots(SlotKind::Runtime).count(), 2);
    }
    assert_eq!(
        before.slots.len() + 1,
        descriptor(&file, EnvelopeName::Identity).slots.len()
    );
    assert_eq!(
        identity::read_credential(&file, &open, "provider:openai-main:apiKey")
            .unwrap()
            .unwrap()
            .as_slice(),
        STUDIO_PROVIDER_KEY.as_bytes()
    );
    assert_eq!(meta(&file, "adf_did"), STUDIO_DID);
    file.close().unwrap();

    // Next time the runtime slot opens it, with the runtime key alone.
    let runtime_only = LocalKeys::new(None, Some(env.home.runtime().unwrap()));
    let mut file = AdfFile::open(&path).unwrap();
    let open = identity::open_identity(&mut file, &runtime_only).unwrap();
    assert_eq!(
        open.via,
        [
            Some(adf_crypto::envelope::UnlockedVia::Runtime),
            Some(adf_crypto::envelope::UnlockedVia::Runtime)
        ]
    );
    assert!(open.runtime_slot_added.is_empty());
    assert!(errors(&file, Some(&keys)).is_empty());
}

#[test]
fn idn_24_idn_28_envelope_states_for_each_case() {
    // foreign: another owner's file.
    let env = Env::with_other_owner();
    let keys = env.keys();
    let path = env.copy("studio-identity.adf");
    let mut file = AdfFile::open(&path).unwrap();
    let before = file.identity_rows().unwrap();
    let open = identity::open_identity(&mut file, &keys).unwrap();
    assert_eq!(open.status.identity, EnvelopeState::Foreign);
    assert_eq!(open.status.credentials, EnvelopeState::Foreign);
    // IDN-26: opening a foreign file changes nothing.
    assert_eq!(file.identity_rows().unwrap(), before);
    let report = identity::status(&file, &keys, &open).unwrap();
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["identity"]["state"], "foreign");
    assert_eq!(json["credentials"]["state"], "foreign");
    assert_eq!(json["password_protected"], false);
    // Never key material: only DIDs, states and slot types.
    let text = json.to_string();
    for slot in descriptor(&file, EnvelopeName::Identity).slots {
        if let Slot::Key(k) = slot {
            assert!(!text.contains(&adf_crypto::keys::b64(&k.wrapped_dek)));
        }
    }

    // locked: credentials with a password slot this installation cannot open otherwise.
    let owner_env = Env::with_test_owner();
    let owner_keys = owner_env.keys();
    let mut file = AdfFile::open(&path).unwrap();
    let open = identity::open_identity(&mut file, &owner_keys).unwrap();
    identity::share_credentials(&mut file, &open, "correct horse").unwrap();
    file.close().unwrap();
    let mut file = AdfFile::open(&path).unwrap();
    let open = identity::open_identity(&mut file, &keys).unwrap();
    assert_eq!(open.status.identity, EnvelopeState::Foreign);
    assert_eq!(open.status.credentials, EnvelopeState::Locked);

    // absent: no envelopes.
    let (_, mut bare) = env.new_file("bare.adf");
    let open = identity::open_identity(&mut bare, &LocalKeys::new(None, None)).unwrap();
    assert_eq!(open.status.identity, EnvelopeState::Absent);
    assert_eq!(open.status.credentials, EnvelopeState::Absent);
}

#[test]
fn idn_11_set_credential_seals_into_credentials_and_refuses_runtime_purposes() {
    let env = Env::with_test_owner();
    let keys = env.keys();
    let (_, mut file) = env.new_file("creds.adf");
    let open = identity::provision_new(&mut file, &keys).unwrap();
    identity::set_credential(&mut file, &open, "provider:openai:apiKey", b"sk-123", false).unwrap();
    let r = row(&file, "provider:openai:apiKey").unwrap();
    assert_eq!(r.encryption_algo, "env:credentials");
    assert!(r.salt.is_none() && r.kdf_params.is_none());
    assert!(!r.value.windows(6).any(|w| w == b"sk-123"));
    assert_eq!(
        identity::read_credential(&file, &open, "provider:openai:apiKey")
            .unwrap()
            .unwrap()
            .as_slice(),
        b"sk-123"
    );
    // Overwriting keeps the code_access flag (§3.3).
    identity::set_credential(&mut file, &open, "provider:openai:apiKey", b"sk-456", true).unwrap();
    assert!(!row(&file, "provider:openai:apiKey").unwrap().code_access);
    for purpose in [
        "crypto:signing:private_key",
        "crypto:envelope:identity",
        "crypto:x",
    ] {
        assert!(matches!(
            identity::set_credential(&mut file, &open, purpose, b"x", false),
            Err(IdentityError::ReservedPurpose(_))
        ));
    }
    let listed = identity::list_purposes(&file).unwrap();
    let text = serde_json::to_string(&listed).unwrap();
    assert!(text.contains("provider:openai:apiKey") && !text.contains("sk-456"));
    assert!(errors(&file, Some(&keys)).is_empty());
}

#[test]
fn idn_15_idn_16_share_adds_a_scrypt_password_slot_to_credentials_only() {
    let env = Env::with_test_owner();
    let keys = env.keys();
    let (_, mut file) = env.new_file("share.adf");
    let open = identity::provision_new(&mut file, &keys).unwrap();
    let identity_before = row(&file, "crypto:envelope:identity").unwrap();
    identity::share_credentials(&mut file, &open, "hunter2-share").unwrap();
    assert_eq!(
        row(&file, "crypto:envelope:identity").unwrap(),
        identity_before
    );
    let d = descriptor(&file, EnvelopeName::Credentials);
    let password: Vec<_> = d
        .slots
        .iter()
        .filter_map(|s| match s {
            Slot::Password(p) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(password.len(), 1);
    assert_eq!(password[0].kdf, "scrypt");
    assert_eq!(
        (
            password[0].params.n,
            password[0].params.r,
            password[0].params.p
        ),
        (131_072, 8, 1)
    );
    assert_eq!(password[0].salt.len(), 32);
    assert_eq!(d.key_slots(SlotKind::Owner).count(), 1);
    assert_eq!(d.key_slots(SlotKind::Runtime).count(), 1);
}

#[test]
fn idn_20_idn_26_claim_of_a_shared_foreign_file_keeps_and_adopts_its_credentials() {
    // The sender seals a key and shares the credentials with a password.
    let sender = Env::with_test_owner();
    let skeys = sender.keys();
    let (path, mut file) = sender.new_file("shared.adf");
    let open = identity::provision_new(&mut file, &skeys).unwrap();
    identity::set_credential(&mut file, &open, "provider:x:apiKey", b"sk-shared", false).unwrap();
    identity::share_credentials(&mut file, &open, "pass phrase").unwrap();
    let old_did = meta(&file, "adf_did");
    file.close().unwrap();

    let recipient = Env::with_other_owner();
    let rkeys = recipient.keys();
    let mut file = AdfFile::open(&path).unwrap();
    let (outcome, mut open) = identity::claim(&mut file, &rkeys).unwrap();
    assert!(!outcome.credentials_replaced, "a shared envelope is kept");
    assert_eq!(open.status.credentials, EnvelopeState::Locked);
    assert!(identity::adopt_shared_credentials(&mut file, &rkeys, &mut open, "wrong").is_err());
    identity::adopt_shared_credentials(&mut file, &rkeys, &mut open, "pass phrase").unwrap();
    let d = descriptor(&file, EnvelopeName::Credentials);
    assert!(!d.has_password_slot());
    assert_eq!(d.slots.len(), 2);
    assert_eq!(
        identity::read_credential(&file, &open, "provider:x:apiKey")
            .unwrap()
            .unwrap()
            .as_slice(),
        b"sk-shared"
    );
    assert_eq!(history(&file), [old_did]);
    file.close().unwrap();
    // The recipient's runtime now opens it without any password.
    let mut file = AdfFile::open(&path).unwrap();
    let open = identity::open_identity(&mut file, &rkeys).unwrap();
    assert_eq!(open.status.credentials, EnvelopeState::Unlocked);
    assert_eq!(open.status.identity, EnvelopeState::Unlocked);
}

#[test]
fn idn_26_idn_05_claim_of_a_foreign_file_makes_a_new_did_with_a_clone_attestation() {
    let env = Env::with_other_owner();
    let keys = env.keys();
    let path = env.copy("studio-identity.adf");
    let mut file = AdfFile::open(&path).unwrap();
    let config_id = file.config().unwrap()["id"].clone();
    let (outcome, open) = identity::claim(&mut file, &keys).unwrap();
    assert_eq!(outcome.previous_did.as_deref(), Some(STUDIO_DID));
    assert_ne!(outcome.did, STUDIO_DID);
    assert_eq!(meta(&file, "adf_did"), outcome.did);
    assert_eq!(history(&file), [STUDIO_DID]);
    assert_eq!(open.status.identity, EnvelopeState::Unlocked);
    // The foreign credentials had no password slot: dead, replaced by an empty envelope.
    assert!(outcome.credentials_replaced);
    assert!(row(&file, "provider:openai-main:apiKey").is_none());
    assert_eq!(open.status.credentials, EnvelopeState::Unlocked);
    let atts = attestations(&file);
    let clone = atts.iter().find(|a| a.role == "clone").unwrap();
    assert_eq!(clone.scope, Some(Some(STUDIO_DID.to_owned())));
    assert_eq!(clone.subject, outcome.did);
    assert_eq!(clone.issuer, keys.owner().unwrap().did());
    clone.verify_signature().unwrap();
    let owner = atts
        .iter()
        .filter(|a| a.role == "owner")
        .collect::<Vec<_>>();
    assert_eq!(
        owner.len(),
        1,
        "the reference's owner attestation was replaced"
    );
    assert_eq!(owner[0].issuer, keys.owner().unwrap().did());
    assert_eq!(meta(&file, "adf_owner_did"), keys.owner().unwrap().did());
    assert_eq!(
        meta(&file, "adf_runtime_did"),
        keys.runtime().unwrap().did()
    );
    assert_eq!(file.config().unwrap()["id"], config_id, "IDN-06");
    assert!(
        errors(&file, Some(&keys)).is_empty(),
        "{:?}",
        errors(&file, Some(&keys))
    );
    // Claiming again is refused: the identity is ours now.
    assert!(matches!(
        identity::claim(&mut file, &keys),
        Err(IdentityError::NotForeign(_))
    ));
}

#[test]
fn idn_05_idn_06_idn_34_rotation_appends_history_in_order_and_keeps_other_roles() {
    let env = Env::with_test_owner();
    let keys = env.keys();
    let (_, mut file) = env.new_file("rotate.adf");
    let mut open = identity::provision_new(&mut file, &keys).unwrap();
    let config_id = file.config().unwrap()["id"].clone();
    identity::set_credential(&mut file, &open, "k", b"v", false).unwrap();
    // A member certificate issued by someone else survives re-keying.
    let did0 = meta(&file, "adf_did");
    let issuer = adf_crypto::RuntimeIdentity::generate();
    let member = Attestation::issue(
        issuer.keys().signing_key(),
        &did0,
        "member",
        "2026-01-01T00:00:00.000Z",
        None,
        None,
    );
    let r = member.to_record();
    file.attestation_insert(&adf_store::AttestationRow {
        id: 0,
        issuer: r.issuer,
        subject: r.subject,
        role: r.role,
        issued_at: r.issued_at,
        expires_at: r.expires_at,
        scope: r.scope,
        signature: r.signature,
        raw_json: r.raw_json,
    })
    .unwrap();
    let did1 = identity::rotate(&mut file, &keys, &mut open).unwrap();
    let did2 = identity::rotate(&mut file, &keys, &mut open).unwrap();
    assert_ne!(did1, did0);
    assert_ne!(did2, did1);
    assert_eq!(meta(&file, "adf_did"), did2);
    assert_eq!(history(&file), [did0.clone(), did1]);
    assert_eq!(file.config().unwrap()["id"], config_id);
    let roles: Vec<String> = attestations(&file).into_iter().map(|a| a.role).collect();
    assert_eq!(roles.iter().filter(|r| *r == "member").count(), 1);
    assert_eq!(roles.iter().filter(|r| *r == "owner").count(), 1);
    assert_eq!(roles.iter().filter(|r| *r == "operator").count(), 1);
    // Credentials are untouched by a re-key.
    assert_eq!(
        identity::read_credential(&file, &open, "k")
            .unwrap()
            .unwrap()
            .as_slice(),
        b"v"
    );
    let signing = open.status.identity;
    assert_eq!(signing, EnvelopeState::Unlocked);
}

#[test]
fn idn_04_reset_moves_the_did_to_history_and_clears_it() {
    let env = Env::with_test_owner();
    let keys = env.keys();
    let (_, mut file) = env.new_file("reset.adf");
    identity::provision_new(&mut file, &keys).unwrap();
    let did = meta(&file, "adf_did");
    identity::reset(&mut file).unwrap();
    assert_eq!(meta(&file, "adf_did"), "");
    assert_eq!(history(&file), [did]);
    assert!(row(&file, "crypto:signing:private_key").is_none());
    assert!(row(&file, "crypto:signing:public_key").is_none());
    assert!(row(&file, "crypto:envelope:identity").is_none());
    // Provisioning again starts a new identity; history keeps the old one once.
    let open = identity::open_identity(&mut file, &keys).unwrap();
    assert_eq!(open.provisioned, Some(Provisioned::NewKey));
    assert_eq!(history(&file).len(), 1);
}

#[test]
fn idn_03_idn_35_verify_reports_tampering_without_secrets() {
    let env = Env::with_test_owner();
    let keys = env.keys();
    let (path, mut file) = env.new_file("tamper.adf");
    identity::provision_new(&mut file, &keys).unwrap();
    file.close().unwrap();
    {
        let other_writer = OtherConnection::open(&path).unwrap();
        let tables = other_writer.tables();
        // A different public key row and a flipped attestation signature byte.
        let other = adf_crypto::RuntimeIdentity::generate();
        let spki = adf_crypto::keys::ed25519_to_spki(&other.keys().verifying_key());
        let key_row = RowsWhere::new("purpose", "crypto:signing:public_key");
        assert_eq!(
            tables
                .set_column("adf_identity", &key_row, "value", &Value::from(spki))
                .unwrap(),
            1
        );
        for row in tables.rows("adf_attestations").unwrap() {
            if row["role"] == "owner" {
                let raw = row["raw_json"].as_str().unwrap();
                let flipped = raw.replace("\"role\":\"owner\"", "\"role\":\"admin\"");
                let this_row = RowsWhere::new("id", row["id"].clone());
                tables
                    .set_column(
                        "adf_attestations",
                        &this_row,
                        "raw_json",
                        &Value::from(flipped),
                    )
                    .unwrap();
            }
        }
    }
    let file = AdfFile::inspect(&path).unwrap();
    let found = errors(&file, None);
    assert!(
        found
            .iter()
            .any(|m| m.contains("does not match crypto:signing:public_key")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|m| m.contains("attestation #1")),
        "{found:?}"
    );
    let with_keys = errors(&file, Some(&keys));
    assert!(
        with_keys.iter().any(|m| m.contains("agent key")),
        "{with_keys:?}"
    );
}

#[test]
fn home_files_are_private_and_owner_init_refuses_to_overwrite() {
    let env = Env::empty();
    assert!(matches!(env.home.owner(), Err(HomeError::NoOwner(_))));
    let message = env.home.owner().unwrap_err().to_string();
    assert!(message.contains("adf owner init") && message.contains("adf owner import"));
    let created = env.home.init_owner(false).unwrap();
    assert_eq!(created.mnemonic().unwrap().split(' ').count(), 12);
    let runtime = env.home.runtime().unwrap();
    assert_eq!(env.home.runtime().unwrap().did(), runtime.did(), "stable");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(env.home.dir()), 0o700);
        assert_eq!(mode(&env.home.dir().join("owner.json")), 0o600);
        assert_eq!(mode(&env.home.dir().join("runtime.json")), 0o600);
    }
    assert!(matches!(
        env.home.init_owner(false),
        Err(HomeError::OwnerExists { .. })
    ));
    assert!(matches!(
        env.home.import_owner(TEST_MNEMONIC, false),
        Err(HomeError::OwnerExists { .. })
    ));
    // Importing the owner that is already there is a no-op.
    let phrase = created.mnemonic().unwrap().to_owned();
    let again = env.home.import_owner(&phrase, false).unwrap();
    assert_eq!(again.identity.did(), created.identity.did());
    let replaced = env.home.import_owner(TEST_MNEMONIC, true).unwrap();
    assert_eq!(replaced.identity.did(), STUDIO_OWNER_DID);
    assert_eq!(env.home.owner().unwrap().mnemonic(), Some(TEST_MNEMONIC));
    // A bad phrase is refused without echoing its words.
    let err = env
        .home
        .import_owner("abandon zebra secretword", true)
        .unwrap_err()
        .to_string();
    assert!(
        !err.contains("secretword") && !err.contains("zebra"),
        "{err}"
    );
    // No stray temporary files.
    let names: Vec<String> = std::fs::read_dir(env.home.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    // Debug never shows the phrase.
    let debug = format!("{:?}", env.home.owner().unwrap());
    assert!(!debug.contains("abandon"), "{debug}");
}

#[test]
fn idn_01_idn_13_python_cryptography_verifies_a_file_we_provisioned() {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import cryptography"])
        .status();
    assert!(
        matches!(probe, Ok(s) if s.success()),
        "python3 with the `cryptography` module is required: run `pip install cryptography`"
    );
    let env = Env::with_test_owner();
    let keys = env.keys();
    let (path, mut file) = env.new_file("interop.adf");
    let open = identity::provision_new(&mut file, &keys).unwrap();
    let secret = "sk-interop-provisioned-not-real";
    identity::set_credential(
        &mut file,
        &open,
        "provider:openai:apiKey",
        secret.as_bytes(),
        false,
    )
    .unwrap();
    file.close().unwrap();
    // The runtime's private X25519 key, straight from the home keystore.
    let keystore: Value =
        serde_json::from_slice(&std::fs::read(env.home.dir().join("runtime.json")).unwrap())
            .unwrap();
    let doc = serde_json::json!({
        "path": path.display().to_string(),
        "runtime_did": keystore["did"],
        "runtime_x25519_pkcs8_b64": keystore["encryption_private_key_pkcs8"],
        "credential": {"purpose": "provider:openai:apiKey", "expected_plaintext": secret},
    });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/verify_file.py");
    adf_testkit::processes::assert_python_says_ok(&script, doc.to_string().as_bytes());
}

#[test]
fn idn_15_remove_password_slot_needs_the_credentials_open_here_and_keeps_key_slots() {
    let sender = Env::with_test_owner();
    let skeys = sender.keys();
    let (path, mut file) = sender.new_file("unshare.adf");
    let open = identity::provision_new(&mut file, &skeys).unwrap();
    identity::set_credential(&mut file, &open, "provider:x:apiKey", b"sk-kept", false).unwrap();
    assert!(
        !identity::remove_password_slot(&mut file, &open).unwrap(),
        "no slot yet: nothing removed"
    );
    identity::share_credentials(&mut file, &open, "pass phrase").unwrap();
    file.close().unwrap();

    // Another owner holds no key slot of a copy: it cannot remove the slot; nothing is written.
    let other = Env::with_other_owner();
    let okeys = other.keys();
    let copy = other.dir.path().join("copy.adf");
    std::fs::copy(&path, &copy).unwrap();
    let mut file = AdfFile::open(&copy).unwrap();
    let (_, open_elsewhere) = identity::claim(&mut file, &okeys).unwrap();
    let claimed = descriptor(&file, EnvelopeName::Credentials);
    assert!(claimed.has_password_slot());
    assert!(identity::remove_password_slot(&mut file, &open_elsewhere).is_err());
    assert_eq!(
        descriptor(&file, EnvelopeName::Credentials).slots.len(),
        claimed.slots.len(),
        "a refused removal writes nothing"
    );
    file.close().unwrap();

    // The sender removes it: the password no longer opens anything, the key slots remain.
    let mut file = AdfFile::open(&path).unwrap();
    let open = identity::open_identity(&mut file, &skeys).unwrap();
    assert!(identity::remove_password_slot(&mut file, &open).unwrap());
    let d = descriptor(&file, EnvelopeName::Credentials);
    assert!(!d.has_password_slot());
    assert!(d.key_slots(SlotKind::Owner).count() >= 1);
    assert!(
        d.unlock_with_password(EnvelopeName::Credentials, "pass phrase")
            .is_err()
    );
    assert_eq!(
        identity::read_credential(&file, &open, "provider:x:apiKey")
            .unwrap()
            .unwrap()
            .as_slice(),
        b"sk-kept"
    );
}
