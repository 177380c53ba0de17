//! ALF message signatures and level-2 payload encryption (§8.5, §11.1, Appendix A.7).
//!
//! Egress: sign payload → (level ≥ 2, remote DID recipient) encrypt payload → sign message, so
//! the outer signature covers the ciphertext. Ingress runs the reverse: verify the message
//! signature → check that `to` names us → decrypt → re-canonicalise and verify the payload
//! signature → strip any wire-supplied verification stamps. Unlike the reference, a message whose
//! `to` is not the receiving agent is refused even when every signature is valid (otherwise a
//! signed message for B could be replayed to C).

use ed25519_dalek::SigningKey;
use rand::CryptoRng;
use serde_json::{Map, Value, json};
use x25519_dalek::{PublicKey as XPublic, StaticSecret};
use zeroize::Zeroizing;

use crate::canonical::{canonical_bytes, js_stringify};
use crate::did::verifying_key_from_did;
use crate::error::{Error, Result};
use crate::keys::{
    aes_gcm_decrypt, aes_gcm_encrypt, b64, b64_array, b64_decode, ed25519_public_to_x25519,
    ed25519_secret_to_x25519, parse_signature, random_bytes, sign, x25519_hkdf,
};

/// Keys a sender must not be able to set: stripped from wire `meta` and `payload.meta`.
pub const TRUST_KEYS: [&str; 5] = [
    "message_verified",
    "payload_verified",
    "identity_verified",
    "payload_encrypted",
    "ws_remote_did",
];
/// `content_type` of an encrypted payload.
pub const ENCRYPTED_CONTENT_TYPE: &str = "application/x-adf-encrypted";
/// `meta.enc.alg` of an encrypted payload.
pub const ENCRYPTION_ALG: &str = "x25519-hkdf-aes256gcm";
/// HKDF info of level-2 payload keys.
pub const MESSAGE_HKDF_INFO: &[u8] = b"adf-msg-v1";
/// ALF baseline size limit, inline attachments included.
pub const MAX_MESSAGE_BYTES: usize = 25 * 1024 * 1024;

fn without(map: &Map<String, Value>, keys: &[&str]) -> Value {
    let mut m = map.clone();
    for k in keys {
        m.shift_remove(*k);
    }
    Value::Object(m)
}

/// Signed bytes of a payload: canonical JSON minus `signature`.
pub fn payload_signed_bytes(payload: &Map<String, Value>) -> Vec<u8> {
    canonical_bytes(&without(payload, &["signature"]))
}

/// Signed bytes of a message: canonical JSON minus `signature` and `transit`.
pub fn message_signed_bytes(message: &Map<String, Value>) -> Vec<u8> {
    canonical_bytes(&without(message, &["signature", "transit"]))
}

/// Set `payload.signature`.
pub fn sign_payload(payload: &mut Map<String, Value>, key: &SigningKey) {
    payload.shift_remove("signature");
    let sig = sign(key, &payload_signed_bytes(payload));
    payload.insert("signature".into(), sig.into());
}

/// Set the message `signature`.
pub fn sign_message(message: &mut Map<String, Value>, key: &SigningKey) {
    message.shift_remove("signature");
    let sig = sign(key, &message_signed_bytes(message));
    message.insert("signature".into(), sig.into());
}

fn verify_sig(bytes: &[u8], sig: &Value, from: &str, what: &str) -> Result<()> {
    let sig = sig
        .as_str()
        .ok_or_else(|| Error::alf(400, format!("{what} signature is not a string")))?;
    let sig =
        parse_signature(sig).map_err(|e| Error::alf(400, format!("{what} signature: {e}")))?;
    let key =
        verifying_key_from_did(from).map_err(|e| Error::alf(400, format!("sender DID: {e}")))?;
    ed25519_dalek::Verifier::verify(&key, bytes, &sig)
        .map_err(|_| Error::alf(403, format!("Invalid {what} signature")))
}

/// True when a payload has the level-2 encrypted shape.
pub fn is_encrypted_payload(payload: &Map<String, Value>) -> bool {
    payload.get("content_type").and_then(Value::as_str) == Some(ENCRYPTED_CONTENT_TYPE)
}

/// Encrypt a (signed) payload to the Ed25519 DID of its recipient, with fresh randomness.
pub fn encrypt_payload<R: CryptoRng + ?Sized>(
    payload: &Map<String, Value>,
    recipient_did: &str,
    rng: &mut R,
) -> Result<Map<String, Value>> {
    let eph = Zeroizing::new(random_bytes::<32, R>(rng));
    encrypt_payload_with(payload, recipient_did, &eph, random_bytes::<12, R>(rng))
}

/// Deterministic form of [`encrypt_payload`].
pub fn encrypt_payload_with(
    payload: &Map<String, Value>,
    recipient_did: &str,
    ephemeral_secret: &[u8; 32],
    iv: [u8; 12],
) -> Result<Map<String, Value>> {
    let vk = verifying_key_from_did(recipient_did)?;
    let recipient = ed25519_public_to_x25519(&vk)?;
    let eph = StaticSecret::from(*ephemeral_secret);
    let eph_pub = XPublic::from(&eph).to_bytes();
    let key = x25519_hkdf(&eph, &recipient, &eph_pub, MESSAGE_HKDF_INFO);
    // The reference encrypts plain JSON.stringify output; the receiver re-canonicalises.
    let plaintext = Zeroizing::new(js_stringify(&Value::Object(payload.clone())));
    let ct = aes_gcm_encrypt(&key, &iv, plaintext.as_bytes())?;
    let mut blob = Vec::with_capacity(12 + ct.len());
    blob.extend_from_slice(&iv);
    blob.extend_from_slice(&ct);
    let mut out = Map::new();
    out.insert("content".into(), b64(&blob).into());
    out.insert("content_type".into(), ENCRYPTED_CONTENT_TYPE.into());
    out.insert(
        "meta".into(),
        json!({"enc": {"v": 1, "alg": ENCRYPTION_ALG, "epk": b64(&eph_pub)}}),
    );
    if let Some(s) = payload.get("sent_at") {
        out.insert("sent_at".into(), s.clone());
    }
    Ok(out)
}

/// The level-2 key a recipient derives (exposed for interop checks).
pub fn derive_message_key(recipient: &SigningKey, epk: &[u8; 32]) -> Zeroizing<[u8; 32]> {
    let secret = ed25519_secret_to_x25519(recipient);
    x25519_hkdf(&secret, &XPublic::from(*epk), epk, MESSAGE_HKDF_INFO)
}

/// Decrypt a level-2 payload with the recipient agent's Ed25519 key.
pub fn decrypt_payload(
    payload: &Map<String, Value>,
    recipient: &SigningKey,
) -> Result<Map<String, Value>> {
    let fail = |why: &str| Error::alf(403, format!("Failed to decrypt payload: {why}"));
    let enc = payload
        .get("meta")
        .and_then(|m| m.get("enc"))
        .and_then(Value::as_object)
        .ok_or_else(|| fail("missing meta.enc"))?;
    if enc.get("alg").and_then(Value::as_str) != Some(ENCRYPTION_ALG) {
        return Err(Error::alf(400, "unsupported payload encryption algorithm"));
    }
    let epk = enc
        .get("epk")
        .and_then(Value::as_str)
        .ok_or_else(|| fail("missing meta.enc.epk"))
        .and_then(|s| b64_array::<32>(s, "meta.enc.epk").map_err(|_| fail("bad epk")))?;
    let blob = payload
        .get("content")
        .and_then(Value::as_str)
        .ok_or_else(|| fail("content is not a string"))
        .and_then(|s| b64_decode(s, "content").map_err(|_| fail("content is not base64")))?;
    if blob.len() < 12 + 16 {
        return Err(fail("ciphertext too short"));
    }
    let mut iv = [0u8; 12];
    iv.copy_from_slice(&blob[..12]);
    let key = derive_message_key(recipient, &epk);
    let pt = aes_gcm_decrypt(&key, &iv, &blob[12..], "payload").map_err(|_| {
        Error::alf(
            403,
            "Failed to decrypt payload — the message was not encrypted to this agent",
        )
    })?;
    match serde_json::from_slice::<Value>(&pt) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(Error::alf(400, "decrypted payload is not a JSON object")),
    }
}

/// Remove the trust keys from a `meta` object.
pub fn strip_trust_keys(meta: &mut Map<String, Value>) {
    for k in TRUST_KEYS {
        meta.shift_remove(k);
    }
}

fn strip_meta_of(obj: &mut Map<String, Value>) {
    if let Some(Value::Object(m)) = obj.get_mut("meta") {
        strip_trust_keys(m);
    }
}

/// Outbound processing of a built message (`payload` present, `signature` absent).
///
/// `encrypt_allowed` is false for same-runtime and channel-adapter recipients (MSG-09).
pub fn egress<R: CryptoRng + ?Sized>(
    message: Value,
    signer: Option<&SigningKey>,
    level: u8,
    encrypt_allowed: bool,
    rng: &mut R,
) -> Result<Value> {
    let Value::Object(mut msg) = message else {
        return Err(Error::alf(400, "message is not a JSON object"));
    };
    strip_meta_of(&mut msg);
    let Some(Value::Object(mut payload)) = msg.get("payload").cloned() else {
        return Err(Error::alf(400, "message has no payload object"));
    };
    strip_meta_of(&mut payload);
    let key = match (level, signer) {
        (0, _) => None,
        (_, Some(k)) => Some(k),
        (_, None) => {
            return Err(Error::alf(
                500,
                "security level ≥ 1 needs the agent's signing key",
            ));
        }
    };
    if let Some(k) = key {
        sign_payload(&mut payload, k);
    }
    let to = msg
        .get("to")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if level >= 2 && encrypt_allowed && to.starts_with("did:") {
        payload = encrypt_payload(&payload, &to, rng)?;
    }
    // Replace in place so the member order of the message is kept.
    msg.insert("payload".into(), Value::Object(payload));
    if let Some(k) = key {
        sign_message(&mut msg, k);
    }
    Ok(Value::Object(msg))
}

/// Receiver's acceptance rules (from `security` config).
#[derive(Debug, Clone, Copy)]
pub struct IngressPolicy {
    /// Refuse messages without a verified message signature (seed rule: regardless of
    /// `allow_unsigned`, Appendix C #12).
    pub require_signature: bool,
    /// Refuse payloads without a verified payload signature.
    pub require_payload_signature: bool,
}

/// Who is receiving.
#[derive(Debug, Clone, Copy)]
pub struct Receiver<'a> {
    /// The receiving agent's DID (`to` must equal it, or one of `aliases`).
    pub did: &'a str,
    /// Other names `to` may legitimately carry on local paths (e.g. the handle).
    pub aliases: &'a [&'a str],
    /// The agent's signing key, needed to decrypt level-2 payloads.
    pub signing_key: Option<&'a SigningKey>,
}

/// What ingress verified, and the message ready for storage.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The message with its payload decrypted and wire trust keys removed.
    pub message: Value,
    /// Message signature verified against `from`.
    pub message_verified: bool,
    /// Payload signature verified against `from`.
    pub payload_verified: bool,
    /// The payload arrived encrypted and was decrypted.
    pub payload_encrypted: bool,
}

impl Verified {
    /// The runtime's stamps for inbox `meta` (`payload_encrypted` only when true).
    pub fn stamps(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("message_verified".into(), self.message_verified.into());
        m.insert("payload_verified".into(), self.payload_verified.into());
        if self.payload_encrypted {
            m.insert("payload_encrypted".into(), true.into());
        }
        m
    }
    /// The processed payload.
    pub fn payload(&self) -> Option<&Map<String, Value>> {
        self.message.get("payload").and_then(Value::as_object)
    }
}

/// Parse and verify raw wire bytes. Never panics on any input.
pub fn ingress_bytes(
    wire: &[u8],
    receiver: &Receiver<'_>,
    policy: &IngressPolicy,
) -> Result<Verified> {
    if wire.len() > MAX_MESSAGE_BYTES {
        return Err(Error::alf(413, "message exceeds 25 MB"));
    }
    let v: Value =
        serde_json::from_slice(wire).map_err(|_| Error::alf(400, "message is not valid JSON"))?;
    ingress(v, receiver, policy)
}

/// Verify a parsed wire message (see module docs for the order of checks).
pub fn ingress(
    message: Value,
    receiver: &Receiver<'_>,
    policy: &IngressPolicy,
) -> Result<Verified> {
    let Value::Object(mut msg) = message else {
        return Err(Error::alf(400, "message is not a JSON object"));
    };
    if !msg.get("payload").is_some_and(Value::is_object) {
        return Err(Error::alf(400, "message has no payload object"));
    }
    let from = match msg.get("from") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(Error::alf(400, "message has no `from`")),
    };
    let to = match msg.get("to") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(Error::alf(400, "message has no `to`")),
    };
    let from_did = from.starts_with("did:");

    // (1) message signature over the message as received.
    let message_verified = match msg.get("signature") {
        Some(sig) if from_did => {
            verify_sig(&message_signed_bytes(&msg), sig, &from, "message")?;
            true
        }
        _ => false,
    };
    if !message_verified && policy.require_signature {
        return Err(Error::alf(403, "Message signature required but missing"));
    }

    // (1b) our addition: the message must be for us.
    if to != receiver.did && !receiver.aliases.contains(&to.as_str()) {
        return Err(Error::alf(403, "Message is addressed to a different agent"));
    }

    // (2) decrypt.
    let Some(Value::Object(mut payload)) = msg.get("payload").cloned() else {
        return Err(Error::alf(400, "message has no payload object"));
    };
    let mut payload_encrypted = false;
    if is_encrypted_payload(&payload) {
        let key = receiver
            .signing_key
            .ok_or_else(|| Error::alf(500, "no signing key to decrypt the payload"))?;
        payload = decrypt_payload(&payload, key)?;
        payload_encrypted = true;
    }

    // (3) payload signature, re-canonicalised from the (decrypted) payload.
    let payload_verified = match payload.get("signature") {
        Some(sig) if from_did => {
            verify_sig(&payload_signed_bytes(&payload), sig, &from, "payload")?;
            true
        }
        _ => false,
    };
    if !payload_verified && policy.require_payload_signature {
        return Err(Error::alf(403, "Payload signature required but missing"));
    }

    // (4) wire trust keys never reach storage.
    strip_meta_of(&mut msg);
    strip_meta_of(&mut payload);
    msg.insert("payload".into(), Value::Object(payload));
    Ok(Verified {
        message: Value::Object(msg),
        message_verified,
        payload_verified,
        payload_encrypted,
    })
}
