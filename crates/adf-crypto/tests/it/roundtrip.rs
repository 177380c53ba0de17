//! Round-trip and tamper tests for every primitive, lifecycle flows, and secret hygiene.
use crate::common;

use adf_crypto::alf::{self, IngressPolicy, Receiver};
use adf_crypto::attestation::{parse_iso8601, to_iso8601};
use adf_crypto::card::{CardInputs, build_card, verify_card};
use adf_crypto::envelope::{
    Dek, EnvelopeDescriptor, EnvelopeName, EnvelopeState, ScryptParams, Slot, SlotKind, UnlockKeys,
    create_password_slot, envelope_state, open_sealed, seal,
};
use adf_crypto::keys::{
    ed25519_from_pkcs8, ed25519_from_spki, ed25519_to_pkcs8, ed25519_to_spki, parse_signature,
    x25519_from_pkcs8, x25519_from_spki, x25519_to_pkcs8, x25519_to_spki,
};
use adf_crypto::owner::KeystoreKind;
use adf_crypto::provision::{
    ProvisionRequest, agent_signing_key, claim, identity_status, is_protected_purpose, open_row,
    provision, reset, rotate, seal_secret, unlock_file,
};
use adf_crypto::{
    Attestation, Error, OwnerIdentity, RuntimeIdentity, did_from_public, sign, verify,
    verifying_key_from_did,
};
use common::*;
use serde_json::json;

const MNEMONIC: &str =
    "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about";
const CHEAP: ScryptParams = ScryptParams {
    n: 1024,
    r: 8,
    p: 1,
};

fn parties() -> (OwnerIdentity, RuntimeIdentity) {
    (
        OwnerIdentity::from_mnemonic(MNEMONIC).unwrap(),
        RuntimeIdentity::generate_with(&mut seeded_rng(10)),
    )
}

#[test]
fn idn_03_key_encodings_roundtrip_and_reject_tampering() {
    let rt = RuntimeIdentity::generate_with(&mut seeded_rng(1));
    let sk = rt.keys().signing_key();
    let der = ed25519_to_pkcs8(sk);
    assert_eq!(der.len(), 48);
    assert_eq!(ed25519_from_pkcs8(&der).unwrap().to_bytes(), sk.to_bytes());
    let spki = ed25519_to_spki(&sk.verifying_key());
    assert_eq!(spki.len(), 44);
    assert_eq!(ed25519_from_spki(&spki).unwrap(), sk.verifying_key());
    assert!(
        ed25519_from_pkcs8(&flip(der.to_vec(), 3)).is_err(),
        "prefix byte flipped"
    );
    assert!(ed25519_from_pkcs8(&der[..47]).is_err());
    let x = rt.keys().encryption_secret();
    assert_eq!(
        x25519_from_pkcs8(&x25519_to_pkcs8(x)).unwrap().to_bytes(),
        x.to_bytes()
    );
    let xp = rt.keys().encryption_public();
    assert_eq!(x25519_from_spki(&x25519_to_spki(&xp)).unwrap(), xp);
    assert!(
        x25519_from_pkcs8(&der).is_err(),
        "Ed25519 DER is not X25519 DER"
    );
    let did = rt.did();
    assert_eq!(verifying_key_from_did(&did).unwrap(), sk.verifying_key());
}

#[test]
fn idn_35_signature_roundtrip_and_tamper() {
    let rt = RuntimeIdentity::generate_with(&mut seeded_rng(2));
    let sig = sign(rt.keys().signing_key(), b"hello");
    assert!(sig.starts_with("ed25519:"));
    verify(&rt.keys().verifying_key(), b"hello", &sig, "test").unwrap();
    let e = verify(&rt.keys().verifying_key(), b"hellp", &sig, "test").unwrap_err();
    assert!(matches!(e, Error::BadSignature(_)), "{e}");
    let raw = parse_signature(&sig).unwrap().to_bytes().to_vec();
    let bad = format!("ed25519:{}", adf_crypto::keys::b64(&flip(raw, 10)));
    assert!(verify(&rt.keys().verifying_key(), b"hello", &bad, "test").is_err());
    assert!(matches!(
        parse_signature("rsa:AAAA"),
        Err(Error::UnsupportedAlgorithm(_))
    ));
    assert!(matches!(
        parse_signature("ed25519:AAAA"),
        Err(Error::MalformedSignature(_))
    ));
    assert!(parse_signature("nocolon").is_err());
}

#[test]
fn idn_12_sealed_value_roundtrip_and_tamper() {
    let mut rng = seeded_rng(3);
    let dek = Dek::generate_with(&mut rng);
    let sealed = seal(&dek, b"sk-secret", &mut rng).unwrap();
    assert_eq!(sealed.len(), 12 + 9 + 16);
    assert_eq!(&*open_sealed(&dek, &sealed).unwrap(), b"sk-secret");
    for i in 0..sealed.len() {
        let e = open_sealed(&dek, &flip(sealed.clone(), i)).unwrap_err();
        assert!(e.to_string().contains("authentication failed"), "{e}");
    }
    assert!(open_sealed(&dek, &sealed[..20]).is_err());
    assert!(open_sealed(&Dek::generate_with(&mut rng), &sealed).is_err());
}

#[test]
fn idn_13_key_slot_roundtrip_and_tamper() {
    let (owner, rt) = parties();
    let mut rng = seeded_rng(4);
    let dek = Dek::generate_with(&mut rng);
    for e in EnvelopeName::ALL {
        let d = EnvelopeDescriptor::for_recipients(
            e,
            &dek,
            Some(&owner.public()),
            Some(&rt.public()),
            &mut rng,
        )
        .unwrap();
        let parsed = EnvelopeDescriptor::from_json_bytes(&d.to_json_bytes()).unwrap();
        assert_eq!(parsed, d);
        let (got, _) = parsed
            .unlock(
                e,
                &UnlockKeys {
                    runtime: Some(rt.keys().encryption_secret()),
                    owner: None,
                },
            )
            .unwrap();
        assert_eq!(got, dek);
        // Flip a byte of the wrapped DEK: neither slot opens any more for the runtime.
        let mut t = parsed.clone();
        for s in &mut t.slots {
            if let Slot::Key(k) = s {
                k.wrapped_dek[0] ^= 1;
            }
        }
        let e2 = t
            .unlock(
                e,
                &UnlockKeys {
                    runtime: Some(rt.keys().encryption_secret()),
                    owner: Some(owner.keys().encryption_secret()),
                },
            )
            .unwrap_err();
        assert!(matches!(e2, Error::NoSlotOpens(_)), "{e2}");
    }
    assert!(EnvelopeDescriptor::from_json_bytes(b"{\"v\":1}").is_err());
    assert!(EnvelopeDescriptor::from_json_bytes(b"not json").is_err());
}

#[test]
fn idn_15_16_password_slots() {
    let mut rng = seeded_rng(5);
    let dek = Dek::generate_with(&mut rng);
    let e = create_password_slot(EnvelopeName::Identity, &dek, "pw", CHEAP, &mut rng).unwrap_err();
    assert!(matches!(e, Error::PasswordSlotOnIdentity));
    let d = EnvelopeDescriptor {
        v: 1,
        slots: vec![],
    };
    assert!(
        d.with_password_slot(EnvelopeName::Identity, &dek, "pw", CHEAP, &mut rng)
            .is_err()
    );
    let d = d
        .with_password_slot(EnvelopeName::Credentials, &dek, "pw", CHEAP, &mut rng)
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&d.to_json_bytes()).unwrap();
    assert_eq!(v["slots"][0]["kdf"], "scrypt");
    assert_eq!(
        v["slots"][0]["kdf_params"],
        json!({"N": 1024, "r": 8, "p": 1})
    );
    assert_eq!(
        adf_crypto::keys::b64_decode(v["slots"][0]["salt"].as_str().unwrap(), "salt")
            .unwrap()
            .len(),
        32
    );
    assert_eq!(
        ScryptParams::default(),
        ScryptParams {
            n: 131_072,
            r: 8,
            p: 1
        }
    );
    let d2 = EnvelopeDescriptor::from_json_bytes(&d.to_json_bytes()).unwrap();
    assert_eq!(
        d2.unlock_with_password(EnvelopeName::Credentials, "pw")
            .unwrap(),
        dek
    );
    assert!(matches!(
        d2.unlock_with_password(EnvelopeName::Credentials, "pW"),
        Err(Error::WrongPassword)
    ));
    // A non-scrypt KDF is refused.
    let mut v2 = v.clone();
    v2["slots"][0]["kdf"] = json!("argon2");
    let d3 = EnvelopeDescriptor::from_json_bytes(v2.to_string().as_bytes()).unwrap();
    assert!(matches!(
        d3.unlock_with_password(EnvelopeName::Credentials, "pw"),
        Err(Error::Kdf(_))
    ));
    // An absurd cost is refused rather than run.
    let mut v3 = v;
    v3["slots"][0]["kdf_params"]["N"] = json!(1u64 << 40);
    let d4 = EnvelopeDescriptor::from_json_bytes(v3.to_string().as_bytes()).unwrap();
    assert!(matches!(
        d4.unlock_with_password(EnvelopeName::Credentials, "pw"),
        Err(Error::Kdf(_))
    ));
}

#[test]
fn idn_24_envelope_states() {
    let mut rng = seeded_rng(6);
    let dek = Dek::generate_with(&mut rng);
    let (owner, rt) = parties();
    let keyed = EnvelopeDescriptor::for_recipients(
        EnvelopeName::Credentials,
        &dek,
        Some(&owner.public()),
        Some(&rt.public()),
        &mut rng,
    )
    .unwrap();
    let pw = keyed
        .with_password_slot(EnvelopeName::Credentials, &dek, "x", CHEAP, &mut rng)
        .unwrap();
    assert_eq!(envelope_state(None, false), EnvelopeState::Absent);
    assert_eq!(envelope_state(Some(&keyed), false), EnvelopeState::Foreign);
    assert_eq!(envelope_state(Some(&pw), false), EnvelopeState::Locked);
    assert_eq!(envelope_state(Some(&pw), true), EnvelopeState::Unlocked);
}

fn request<'a>(
    owner: &'a OwnerIdentity,
    rt: &'a RuntimeIdentity,
    op: &'a adf_crypto::PublicIdentity,
    rp: &'a adf_crypto::PublicIdentity,
) -> ProvisionRequest<'a> {
    ProvisionRequest {
        owner: op,
        runtime: rp,
        owner_signer: Some(owner.keys().signing_key()),
        runtime_signer: Some(rt.keys().signing_key()),
        issued_at: "2026-11-30T00:00:00.000Z",
    }
}

#[test]
fn idn_01_14_17_provision_then_unlock_each_way() {
    let (owner, rt) = parties();
    let (op, rp) = (owner.public(), rt.public());
    let req = request(&owner, &rt, &op, &rp);
    let mut rng = seeded_rng(7);
    let ch = provision(&req, &mut rng).unwrap();
    let purposes: Vec<_> = ch.upsert_rows.iter().map(|r| r.purpose.as_str()).collect();
    assert_eq!(
        purposes,
        [
            "crypto:envelope:identity",
            "crypto:envelope:credentials",
            "crypto:signing:private_key",
            "crypto:signing:public_key"
        ]
    );
    assert_eq!(ch.upsert_rows[2].encryption_algo, "env:identity");
    assert_eq!(ch.upsert_rows[3].value.len(), 44);
    assert_eq!(ch.meta[0], ("adf_did", ch.did.clone()));
    let roles: Vec<_> = ch.attestations.iter().map(|a| a.role.as_str()).collect();
    assert_eq!(roles, ["owner", "operator"]);
    let now = parse_iso8601("2026-12-01T00:00:00Z").unwrap();
    for a in &ch.attestations {
        a.verify(Some(&ch.did), now).unwrap();
    }
    let mut rows = ch.upsert_rows.clone();
    rows.push(seal_secret("provider:x:apiKey", b"sk-1", &ch.deks, true, &mut rng).unwrap());
    assert_eq!(rows[4].encryption_algo, "env:credentials");
    // Owner-only provisioning needs only public keys (IDN-14): no owner signer, still an owner slot.
    let req2 = ProvisionRequest {
        owner_signer: None,
        ..req
    };
    let ch2 = provision(&req2, &mut rng).unwrap();
    let desc = EnvelopeDescriptor::from_json_bytes(&ch2.upsert_rows[0].value).unwrap();
    assert_eq!(desc.key_slots(SlotKind::Owner).count(), 1);
    assert_eq!(ch2.attestations.len(), 1);

    for keys in [
        UnlockKeys {
            runtime: Some(rt.keys().encryption_secret()),
            owner: None,
        },
        UnlockKeys {
            runtime: None,
            owner: Some(owner.keys().encryption_secret()),
        },
    ] {
        let u = unlock_file(&rows, &keys, Some(&rp), &mut rng).unwrap();
        assert_eq!(&*open_row(&rows[4], &u.deks, None).unwrap(), b"sk-1");
        assert_eq!(
            did_from_public(
                &agent_signing_key(&rows, &u.deks, None)
                    .unwrap()
                    .verifying_key()
            ),
            ch.did
        );
    }
    // A stranger's keys: foreign.
    let other = RuntimeIdentity::generate_with(&mut seeded_rng(99));
    let u = unlock_file(
        &rows,
        &UnlockKeys {
            runtime: Some(other.keys().encryption_secret()),
            owner: None,
        },
        None,
        &mut rng,
    )
    .unwrap();
    assert_eq!(u.status.identity, EnvelopeState::Foreign);
    assert!(open_row(&rows[4], &u.deks, None).is_err());
    assert!(
        is_protected_purpose("crypto:signing:private_key")
            && is_protected_purpose("crypto:kdf:salt")
    );
    assert!(!is_protected_purpose("provider:x:apiKey"));
}

#[test]
fn idn_04_05_26_34_rotate_claim_reset() {
    let (owner, rt) = parties();
    let (op, rp) = (owner.public(), rt.public());
    let req = request(&owner, &rt, &op, &rp);
    let mut rng = seeded_rng(8);
    let first = provision(&req, &mut rng).unwrap();
    let rot = rotate(&req, &first.did, None, &mut rng).unwrap();
    assert_ne!(rot.did, first.did);
    assert_eq!(rot.replace_roles, ["owner", "operator"]);
    let hist = rot
        .meta
        .iter()
        .find(|(k, _)| *k == "adf_did_history")
        .unwrap()
        .1
        .clone();
    let rot2 = rotate(&req, &rot.did, Some(&hist), &mut rng).unwrap();
    let hist2 = &rot2
        .meta
        .iter()
        .find(|(k, _)| *k == "adf_did_history")
        .unwrap()
        .1;
    let list: Vec<String> = serde_json::from_str(hist2).unwrap();
    assert_eq!(list, [first.did.clone(), rot.did.clone()]);
    assert_eq!(
        adf_crypto::rows::append_did_history(Some(hist2), &rot.did),
        *hist2,
        "no duplicates"
    );

    // Claim of a foreign file: clone attestation scoped to the old DID; dead credentials replaced.
    let stranger = RuntimeIdentity::generate_with(&mut seeded_rng(77));
    let foreign_owner = RuntimeIdentity::generate_with(&mut seeded_rng(78));
    let (fo, fr) = (foreign_owner.public(), stranger.public());
    let foreign = provision(
        &ProvisionRequest {
            owner: &fo,
            runtime: &fr,
            owner_signer: None,
            runtime_signer: None,
            issued_at: "x",
        },
        &mut rng,
    )
    .unwrap();
    let c = claim(&req, &foreign.upsert_rows, &foreign.did, None, &mut rng).unwrap();
    assert_eq!(c.attestations[0].role, "clone");
    assert_eq!(c.attestations[0].scope, Some(Some(foreign.did.clone())));
    assert_eq!(c.attestations[0].issuer, owner.did());
    assert!(c.delete_sealed_credentials && c.deks.credentials.is_some());
    assert!(
        claim(
            &ProvisionRequest {
                owner_signer: None,
                ..req
            },
            &foreign.upsert_rows,
            &foreign.did,
            None,
            &mut rng
        )
        .is_err()
    );

    let r = reset(&c.did, None);
    assert_eq!(r.did, "");
    assert!(r.meta.contains(&("adf_did", String::new())));
    assert!(
        r.delete_purposes
            .contains(&"crypto:signing:private_key".to_string())
    );
}

#[test]
fn idn_20_recipient_adoption_after_share_password() {
    let (owner, rt) = parties();
    let mut rng = seeded_rng(11);
    let dek = Dek::generate_with(&mut rng);
    let sender = RuntimeIdentity::generate_with(&mut seeded_rng(12));
    let shared = EnvelopeDescriptor::for_recipients(
        EnvelopeName::Credentials,
        &dek,
        Some(&sender.public()),
        Some(&sender.public()),
        &mut rng,
    )
    .unwrap()
    .with_password_slot(EnvelopeName::Credentials, &dek, "share", CHEAP, &mut rng)
    .unwrap();
    let rows = vec![adf_crypto::IdentityRow::plain(
        "crypto:envelope:credentials",
        shared.to_json_bytes(),
    )];
    assert_eq!(
        identity_status(&rows, &Default::default())
            .unwrap()
            .credentials,
        EnvelopeState::Locked
    );
    let got = adf_crypto::provision::unlock_credentials_with_password(&rows, "share").unwrap();
    let row =
        adf_crypto::provision::adopt_credentials(&got, &owner.public(), &rt.public(), &mut rng)
            .unwrap();
    let d = EnvelopeDescriptor::from_json_bytes(&row.value).unwrap();
    assert_eq!(d.slots.len(), 2);
    assert!(!d.has_password_slot());
}

#[test]
fn idn_29_30_36_attestation_rules() {
    let (owner, rt) = parties();
    let agent = RuntimeIdentity::generate_with(&mut seeded_rng(13));
    let now = parse_iso8601("2026-11-30T00:00:00Z").unwrap();
    let a = Attestation::issue(
        owner.keys().signing_key(),
        &agent.did(),
        "member",
        &to_iso8601(now),
        None,
        Some("group:x"),
    );
    a.check_addable(&agent.did(), now).unwrap();
    assert!(
        a.check_addable(&rt.did(), now).is_err(),
        "subject must be this agent"
    );
    let owner_role = Attestation::issue(
        owner.keys().signing_key(),
        &agent.did(),
        "owner",
        "2026-01-01T00:00:00.000Z",
        None,
        None,
    );
    assert!(
        owner_role
            .check_addable(&agent.did(), now)
            .unwrap_err()
            .to_string()
            .contains("reserved")
    );
    let expired = Attestation::issue(
        owner.keys().signing_key(),
        &agent.did(),
        "member",
        "2020-01-01T00:00:00.000Z",
        Some("2021-01-01T00:00:00.000Z"),
        None,
    );
    assert!(expired.verify_signature().is_ok());
    assert!(
        expired
            .check_addable(&agent.did(), now)
            .unwrap_err()
            .to_string()
            .contains("expired")
    );
    let mut tampered = a.clone();
    tampered.scope = Some(Some("group:y".into()));
    assert!(tampered.check_addable(&agent.did(), now).is_err());
    // Explicit null is signed and differs from absent.
    let mut nulled = a.clone();
    nulled.expires_at = Some(None);
    assert!(nulled.verify_signature().is_err());
    assert_eq!(
        a.dedup_key(),
        Attestation::from_record(&a.to_record()).dedup_key()
    );
    assert!(Attestation::check_issuable(&agent.did(), &agent.did(), "member", None).is_err());
    assert!(Attestation::check_issuable(&agent.did(), &rt.did(), "clone", None).is_err());
    assert!(Attestation::check_issuable(&agent.did(), "did:web:x", "member", None).is_err());
    assert!(Attestation::check_issuable(&agent.did(), &rt.did(), "member", Some("soon")).is_err());
    Attestation::check_issuable(
        &agent.did(),
        &rt.did(),
        "member",
        Some("2030-01-01T00:00:00Z"),
    )
    .unwrap();
}

#[test]
fn srv_09_card_roundtrip_and_tamper() {
    let agent = RuntimeIdentity::generate_with(&mut seeded_rng(14));
    let inputs = CardInputs {
        handle: "h".into(),
        resolution: json!({"method": "self", "endpoint": "http://a/card"}),
        endpoints: json!({"inbox": "http://a/inbox"}),
        policies: adf_crypto::card::card_policies(2, false),
        ..Default::default()
    };
    let card = build_card(
        &inputs,
        Some(agent.keys().signing_key()),
        "2026-11-30T00:00:00.000Z",
    )
    .unwrap();
    verify_card(&card).unwrap();
    let mut moved = card.clone();
    moved["endpoints"]["inbox"] = json!("http://b/inbox");
    moved["resolution"]["endpoint"] = json!("http://b/card");
    verify_card(&moved).unwrap();
    let mut bad = card.clone();
    bad["handle"] = json!("evil");
    assert!(verify_card(&bad).is_err());
    let unsigned = build_card(&inputs, None, "x").unwrap();
    assert!(verify_card(&unsigned).is_err());
}

#[test]
fn msg_05_06_alf_roundtrip_level2_and_tamper() {
    let a = RuntimeIdentity::generate_with(&mut seeded_rng(15));
    let bk = RuntimeIdentity::generate_with(&mut seeded_rng(16));
    let msg = json!({
        "version": "1.0", "network": "devnet", "id": "aaaaaaaaaaaaaaaaaaaa", "timestamp": "2026-11-30T00:00:00.000Z",
        "from": a.did(), "to": bk.did(), "reply_to": a.did(),
        "meta": {"message_verified": true, "x": 1},
        "payload": {"meta": {"identity_verified": true, "k": "v"}, "content": "secret", "sent_at": "2026-11-30T00:00:00.000Z"}
    });
    let wire = alf::egress(
        msg,
        Some(a.keys().signing_key()),
        2,
        true,
        &mut seeded_rng(17),
    )
    .unwrap();
    assert_eq!(
        wire["payload"]["content_type"],
        "application/x-adf-encrypted"
    );
    assert!(
        wire["meta"].get("message_verified").is_none(),
        "trust keys stripped on send"
    );
    let policy = IngressPolicy {
        require_signature: true,
        require_payload_signature: true,
    };
    let recv = Receiver {
        did: &bk.did(),
        aliases: &[],
        signing_key: Some(bk.keys().signing_key()),
    };
    let out = alf::ingress(wire.clone(), &recv, &policy).unwrap();
    assert!(out.payload_encrypted && out.payload_verified && out.message_verified);
    assert_eq!(out.payload().unwrap()["content"], "secret");
    assert!(
        out.payload().unwrap()["meta"]
            .get("identity_verified")
            .is_none()
    );

    // Flip one byte of the ciphertext: the outer signature fails first (MSG-06).
    let mut t = wire.clone();
    let ct = adf_crypto::keys::b64_decode(t["payload"]["content"].as_str().unwrap(), "c").unwrap();
    t["payload"]["content"] = json!(adf_crypto::keys::b64(&flip(ct.clone(), 30)));
    let e = alf::ingress(t.clone(), &recv, &policy).unwrap_err();
    assert!(e.to_string().contains("Invalid message signature"), "{e}");
    // Re-sign the outer envelope as the sender: decryption then fails with 403.
    sign_outer(&mut t, a.keys().signing_key());
    let e = alf::ingress(t, &recv, &policy).unwrap_err();
    assert!(matches!(e, Error::Alf { status: 403, .. }), "{e}");
    // No key to decrypt: 500.
    let e = alf::ingress(
        wire.clone(),
        &Receiver {
            signing_key: None,
            ..recv
        },
        &policy,
    )
    .unwrap_err();
    assert!(matches!(e, Error::Alf { status: 500, .. }), "{e}");
    // Wire-supplied stamps on an unsigned message are dropped when unsigned is allowed.
    let lax = IngressPolicy {
        require_signature: false,
        require_payload_signature: false,
    };
    let unsigned = json!({"from": "telegram:1", "to": bk.did(), "meta": {"message_verified": true}, "payload": {"content": "hi", "meta": {"payload_verified": true}}});
    let out = alf::ingress(unsigned, &recv, &lax).unwrap();
    assert!(!out.message_verified && !out.payload_verified);
    assert!(out.message["meta"].get("message_verified").is_none());
    assert!(
        out.payload().unwrap()["meta"]
            .get("payload_verified")
            .is_none()
    );
    // Unsupported algorithm → 400.
    let mut alg = wire;
    alg["signature"] = json!("rsa:AAAA");
    assert!(matches!(
        alf::ingress(alg, &recv, &policy),
        Err(Error::Alf { status: 400, .. })
    ));
}

fn sign_outer(msg: &mut serde_json::Value, key: &adf_crypto::SigningKey) {
    alf::sign_message(msg.as_object_mut().unwrap(), key);
}

#[test]
fn idn_28_secrets_never_in_debug_display_or_errors() {
    let (owner, rt) = parties();
    let mut rng = seeded_rng(18);
    let dek = Dek::generate_with(&mut rng);
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let secrets: Vec<Vec<u8>> = vec![
        owner.keys().signing_key().to_bytes().to_vec(),
        owner.keys().encryption_secret().to_bytes().to_vec(),
        rt.keys().signing_key().to_bytes().to_vec(),
        rt.keys().encryption_secret().to_bytes().to_vec(),
        dek.expose_secret().to_vec(),
    ];
    let keystore = rt.to_keystore_json();
    let restored = RuntimeIdentity::from_keystore_json(&keystore).unwrap();
    assert_eq!(restored.did(), rt.did());
    assert!(
        OwnerIdentity::from_keystore_json(&keystore).is_err(),
        "kind is checked"
    );
    let owner_ks = owner.to_keystore_json();
    assert_eq!(
        OwnerIdentity::from_keystore_json(&owner_ks).unwrap().did(),
        owner.did()
    );
    let _ = KeystoreKind::Owner;
    let (op, rp) = (owner.public(), rt.public());
    let ch = provision(&request(&owner, &rt, &op, &rp), &mut rng).unwrap();
    let plain_row = adf_crypto::IdentityRow::plain("openai_key", b"sk-plaintext-secret".to_vec());
    let texts = vec![
        format!("{owner:?}"),
        format!("{rt:?}"),
        format!("{dek:?}"),
        format!("{ch:?}"),
        format!("{plain_row:?}"),
        format!("{:?}", UnlockKeys { runtime: Some(rt.keys().encryption_secret()), owner: None }),
        OwnerIdentity::from_mnemonic("abandon abandon zoo").unwrap_err().to_string(),
        OwnerIdentity::from_mnemonic("abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon xyzzy").unwrap_err().to_string(),
        open_sealed(&dek, &[0u8; 40]).unwrap_err().to_string(),
        format!("{:?}", open_sealed(&dek, &[0u8; 40]).unwrap_err()),
    ];
    for t in &texts {
        for sec in &secrets {
            assert!(!t.contains(&hex(sec)), "hex secret leaked in {t}");
            assert!(
                !t.contains(&adf_crypto::keys::b64(sec)),
                "b64 secret leaked in {t}"
            );
        }
        assert!(!t.contains("sk-plaintext-secret"));
        assert!(
            !t.contains("xyzzy") && !t.contains("zoo"),
            "mnemonic words leaked: {t}"
        );
    }
}
