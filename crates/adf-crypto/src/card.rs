//! Agent cards (§11.5, Appendix A.6): the reference signs an explicit whitelist of members, with
//! `resolution.endpoint` removed, and verifies against the key in the card's own `did`.
//! Endpoints and directory decorations are deliberately unsigned so observers can rewrite them.

use chrono::{DateTime, Utc};
use ed25519_dalek::SigningKey;
use serde_json::{Map, Value, json};

use crate::attestation::Attestation;
use crate::canonical::canonical_bytes;
use crate::did::{did_from_public, multibase_of_did, verifying_key_from_did};
use crate::error::{Error, Result};
use crate::keys::{sign, verify};

/// Members covered by the card signature (when present).
pub const CARD_SIGNED_FIELDS: [&str; 12] = [
    "did",
    "public_key",
    "signed_at",
    "handle",
    "description",
    "icon",
    "resolution",
    "api_routes",
    "public",
    "shared",
    "attestations",
    "policies",
];

/// The signable projection of a card.
pub fn card_signable(card: &Value) -> Result<Value> {
    let obj = card
        .as_object()
        .ok_or_else(|| Error::Card("card is not a JSON object".into()))?;
    let mut out = Map::new();
    for name in CARD_SIGNED_FIELDS {
        let Some(v) = obj.get(name) else { continue };
        if name == "resolution"
            && let Value::Object(r) = v
        {
            let mut r = r.clone();
            r.shift_remove("endpoint");
            out.insert(name.into(), Value::Object(r));
            continue;
        }
        out.insert(name.into(), v.clone());
    }
    Ok(Value::Object(out))
}

/// The exact signed bytes of a card.
pub fn card_signed_bytes(card: &Value) -> Result<Vec<u8>> {
    Ok(canonical_bytes(&card_signable(card)?))
}

/// Stamp `did`, `public_key` and `signed_at` (appended in the reference's order), then sign.
pub fn sign_card(
    card: &mut Map<String, Value>,
    signer: &SigningKey,
    signed_at: &str,
) -> Result<()> {
    let did = did_from_public(&signer.verifying_key());
    // shift_remove keeps the other members in place; the reference appends these four last.
    for k in ["did", "public_key", "signed_at", "signature"] {
        card.shift_remove(k);
    }
    let public_key = multibase_of_did(&did).unwrap_or_default().to_string();
    card.insert("did".into(), did.into());
    card.insert("public_key".into(), public_key.into());
    card.insert("signed_at".into(), signed_at.into());
    let bytes = card_signed_bytes(&Value::Object(card.clone()))?;
    card.insert("signature".into(), sign(signer, &bytes).into());
    Ok(())
}

/// Verify a card against the key in its own `did` (never its `public_key`).
pub fn verify_card(card: &Value) -> Result<()> {
    let did = card
        .get("did")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::Card("card has no `did`".into()))?;
    let sig = card
        .get("signature")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::Card("card has no `signature`".into()))?;
    let key = verifying_key_from_did(did).map_err(|e| Error::Card(e.to_string()))?;
    verify(&key, &card_signed_bytes(card)?, sig, "agent card")
        .map_err(|e| Error::Card(e.to_string()))
}

/// Card `policies` as the reference derives them.
pub fn card_policies(security_level: u8, publish_attestations: bool) -> Vec<Value> {
    let mut p = Vec::new();
    if security_level >= 1 {
        p.push(json!({"type": "signing", "standard": "ed25519", "send": "required", "receive": "required"}));
    }
    if publish_attestations {
        p.push(json!({"type": "owner_attestation", "receive": "optional"}));
    }
    p
}

/// Attestations a card publishes: unexpired and about the current DID, in stored order.
pub fn publishable_attestations(
    stored: &[Attestation],
    did: &str,
    now: DateTime<Utc>,
) -> Vec<Attestation> {
    stored
        .iter()
        .filter(|a| a.subject == did && !a.is_expired(now))
        .cloned()
        .collect()
}

/// Everything the runtime decided about a card before signing (config and routing already
/// resolved by the caller: it knows hosts, ports, shared-file globbing and overrides).
#[derive(Debug, Clone, Default)]
pub struct CardInputs {
    /// Agent handle.
    pub handle: String,
    /// `config.description` or `""`.
    pub description: String,
    /// `config.icon` or `""` (always signed).
    pub icon: String,
    /// `card.resolution` override, else `{method:"self", endpoint:<card URL>}`.
    pub resolution: Value,
    /// `{inbox, card, health, ws?}` (unsigned).
    pub endpoints: Value,
    /// `(method, path)` of routes with `on_card: true`.
    pub api_routes: Vec<(String, String)>,
    /// `serving.public.enabled`.
    pub public: bool,
    /// Shared file paths.
    pub shared: Vec<String>,
    /// Published attestations (see [`publishable_attestations`]); empty unless publishing.
    pub attestations: Vec<Attestation>,
    /// See [`card_policies`].
    pub policies: Vec<Value>,
}

/// Build the card in the reference's member order and sign it when a key is available
/// (without identity the reference serves it unsigned, without `did`).
pub fn build_card(
    inputs: &CardInputs,
    signer: Option<&SigningKey>,
    signed_at: &str,
) -> Result<Value> {
    let mut card = Map::new();
    card.insert("handle".into(), inputs.handle.clone().into());
    card.insert("description".into(), inputs.description.clone().into());
    card.insert("icon".into(), inputs.icon.clone().into());
    card.insert("resolution".into(), inputs.resolution.clone());
    card.insert("endpoints".into(), inputs.endpoints.clone());
    card.insert(
        "api_routes".into(),
        inputs
            .api_routes
            .iter()
            .map(|(m, p)| json!({"method": m, "path": p}))
            .collect::<Vec<_>>()
            .into(),
    );
    card.insert("public".into(), inputs.public.into());
    card.insert("shared".into(), inputs.shared.clone().into());
    let atts = inputs
        .attestations
        .iter()
        .map(|a| serde_json::to_value(a).map_err(|e| Error::Card(e.to_string())))
        .collect::<Result<Vec<_>>>()?;
    card.insert("attestations".into(), atts.into());
    card.insert("policies".into(), inputs.policies.clone().into());
    if let Some(k) = signer {
        sign_card(&mut card, k, signed_at)?;
    }
    Ok(Value::Object(card))
}
