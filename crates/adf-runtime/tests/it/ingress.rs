//! Mesh ingress on the recipient's file (`messaging::receive::accept`): what a signature that
//! does not verify, one in an algorithm ALF does not define, or a missing payload signature the
//! agent requires does to an inbound message.
use crate::common::{digest, new_agent};

use adf_crypto::alf;
use adf_runtime::home::RuntimeHome;
use adf_runtime::identity::{self, LocalKeys};
use adf_runtime::messaging::receive::{self, Accepted, Arrival, Refusal};
use adf_runtime::messaging::{Origin, agent_did};
use adf_store::AdfFile;
use serde_json::{Value, json};

/// A level-1 message from a key of another runtime to `to`, signed on both layers.
fn signed_message(sender: &adf_crypto::SigningKey, to: &str) -> Value {
    let from = adf_crypto::did_from_public(&sender.verifying_key());
    let message = json!({
        "version": "1.0", "network": "devnet",
        "id": adf_store::defaults::random_id(20),
        "timestamp": adf_store::time::now_iso(),
        "from": from, "to": to, "reply_to": from,
        "meta": {},
        "payload": { "meta": {}, "content_type": "text/plain", "content": "hello",
                     "sent_at": adf_store::time::now_iso() }
    });
    alf::egress(message, Some(sender), 1, false, &mut rand::rng()).unwrap()
}

fn deliver(file: &mut AdfFile, keys: &LocalKeys, wire: &Value) -> Result<Accepted, Refusal> {
    let bytes = serde_json::to_vec(wire).unwrap();
    receive::accept(
        file,
        &Arrival {
            wire: &bytes,
            origin: Origin::Loopback,
            transport: "http",
            return_path: None,
        },
        Some(keys),
    )
}

/// Flips one bit of the bytes behind an `ed25519:<base64>` signature.
fn flip_a_bit(signature: &Value) -> Value {
    let encoded = signature
        .as_str()
        .unwrap()
        .strip_prefix("ed25519:")
        .unwrap();
    let mut raw = adf_crypto::keys::b64_decode(encoded, "signature").unwrap();
    raw[7] ^= 0x01;
    json!(format!("ed25519:{}", adf_crypto::keys::b64(&raw)))
}

/// An agent with a provisioned identity under a fresh owner home: its dir guard, file, the
/// runtime's keys and the agent's DID.
fn agent_with_identity() -> (tempfile::TempDir, AdfFile, LocalKeys, String) {
    let (dir, _path, mut file) = new_agent();
    let home = RuntimeHome::at(dir.path().join("home"));
    home.init_owner(false).unwrap();
    let keys = LocalKeys::from_home(&home).unwrap();
    identity::provision_new(&mut file, &keys).unwrap();
    let me = agent_did(&file).unwrap().unwrap();
    (dir, file, keys, me)
}

#[test]
fn msg_13_a_signature_that_does_not_verify_is_refused_403_and_an_rsa_one_400() {
    let (_dir, mut file, keys, me) = agent_with_identity();
    let sender = adf_crypto::SigningKey::from_bytes(&[42u8; 32]);

    // The control: the same kind of message, untouched, is accepted.
    let genuine = signed_message(&sender, &me);
    let accepted = deliver(&mut file, &keys, &genuine).unwrap();
    assert!(!accepted.duplicate);
    let unchanged = digest(&file);

    let mut bad_outer = signed_message(&sender, &me);
    bad_outer["signature"] = flip_a_bit(&bad_outer["signature"]);
    // The message signature covers the payload's, so the sender re-signs the message: only the
    // payload signature is then wrong.
    let mut bad_payload = signed_message(&sender, &me);
    bad_payload["payload"]["signature"] = flip_a_bit(&bad_payload["payload"]["signature"]);
    alf::sign_message(bad_payload.as_object_mut().unwrap(), &sender);
    // A signature over other bytes: the content changed after signing.
    let mut edited = signed_message(&sender, &me);
    edited["payload"]["content"] = json!("hello, changed in transit");
    let mut rsa_outer = signed_message(&sender, &me);
    rsa_outer["signature"] = json!("rsa:AAAA");
    let mut rsa_payload = signed_message(&sender, &me);
    rsa_payload["payload"]["signature"] = json!("rsa:AAAA");
    alf::sign_message(rsa_payload.as_object_mut().unwrap(), &sender);

    for (case, wire, status, reason) in [
        (
            "outer bit flip",
            bad_outer,
            403,
            "Invalid message signature",
        ),
        (
            "payload bit flip",
            bad_payload,
            403,
            "Invalid payload signature",
        ),
        ("edited content", edited, 403, "Invalid message signature"),
        ("rsa message signature", rsa_outer, 400, "message signature"),
        (
            "rsa payload signature",
            rsa_payload,
            400,
            "payload signature",
        ),
    ] {
        let refusal = deliver(&mut file, &keys, &wire).unwrap_err();
        assert_eq!(refusal.status, status, "{case}: {refusal}");
        assert!(refusal.reason.contains(reason), "{case}: {refusal}");
        assert_eq!(digest(&file), unchanged, "{case}: the file changed");
    }
    assert_eq!(file.table_rows("adf_inbox", 100).unwrap().len(), 1);
}

#[test]
fn msg_12_require_payload_signature_refuses_a_message_signed_only_outside() {
    let (_dir, mut file, keys, me) = agent_with_identity();
    let sender = adf_crypto::SigningKey::from_bytes(&[7u8; 32]);
    // The message layer stays signed (so the outer check passes); only the payload is bare.
    let outer_only = || {
        let mut wire = signed_message(&sender, &me);
        wire["payload"].as_object_mut().unwrap().remove("signature");
        alf::sign_message(wire.as_object_mut().unwrap(), &sender);
        wire
    };

    // Without the setting such a message is taken.
    assert!(!deliver(&mut file, &keys, &outer_only()).unwrap().duplicate);

    file.config_set_path(
        adf_store::Caller::Owner,
        "security.require_payload_signature",
        adf_store::ConfigAction::Set,
        json!(true),
    )
    .unwrap();
    let unchanged = digest(&file);
    let refusal = deliver(&mut file, &keys, &outer_only()).unwrap_err();
    assert_eq!(refusal.status, 403, "{refusal}");
    assert!(
        refusal.reason.to_lowercase().contains("payload"),
        "{refusal}"
    );
    assert_eq!(
        digest(&file),
        unchanged,
        "a refused message changed the file"
    );

    // A message signed on both layers still arrives.
    assert!(
        !deliver(&mut file, &keys, &signed_message(&sender, &me))
            .unwrap()
            .duplicate
    );
    assert_eq!(file.table_rows("adf_inbox", 100).unwrap().len(), 2);
}
