//! Attestations (Appendix A.5): Ed25519 over canonical JSON of
//! `{issuer, subject, role, issued_at, [expires_at], [scope]}` — the optional members are signed
//! whenever present, even as `null`, so the struct keeps "absent" and "null" apart.

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use ed25519_dalek::SigningKey;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::canonical::canonical_bytes;
use crate::did::{did_from_public, is_valid_did_key, verifying_key_from_did};
use crate::error::{Error, Result};
use crate::keys::{SIGNATURE_PREFIX, sign, verify};
use crate::rows::AttestationRecord;

/// Roles only the runtime itself issues; `attestation_add`/`attestation_issue` refuse them.
pub const RESERVED_ROLES: [&str; 5] = ["owner", "operator", "runtime", "clone", "rotation"];

/// A signed attestation, in the reference's member order (which is also the `raw_json` order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attestation {
    /// Signer DID.
    pub issuer: String,
    /// DID the statement is about.
    pub subject: String,
    /// Role granted.
    pub role: String,
    /// ISO-8601 issue time.
    pub issued_at: String,
    /// `None` = absent (unsigned); `Some(None)` = explicit `null` (signed as null).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub expires_at: Option<Option<String>>,
    /// Same tri-state as `expires_at`; for `clone` it is the prior DID.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub scope: Option<Option<String>>,
    /// `ed25519:<base64>`.
    pub signature: String,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// Parse an ISO-8601 timestamp the way the reference's `new Date(s)` would for the forms it
/// writes. Zone-less date-times are taken as UTC (JS would use local time; we refuse to depend on
/// the host's zone).
pub fn parse_iso8601(s: &str) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&Utc));
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return d.and_hms_opt(0, 0, 0).map(|t| t.and_utc());
    }
    NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
        .ok()
        .map(|t| t.and_utc())
}

/// `toISOString()` form: `YYYY-MM-DDTHH:mm:ss.sssZ`.
pub fn to_iso8601(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

impl Attestation {
    /// Sign a new attestation; `issuer` is the signer's DID.
    pub fn issue(
        signer: &SigningKey,
        subject: &str,
        role: &str,
        issued_at: &str,
        expires_at: Option<&str>,
        scope: Option<&str>,
    ) -> Self {
        let mut a = Attestation {
            issuer: did_from_public(&signer.verifying_key()),
            subject: subject.to_string(),
            role: role.to_string(),
            issued_at: issued_at.to_string(),
            expires_at: expires_at.map(|s| Some(s.to_string())),
            scope: scope.map(|s| Some(s.to_string())),
            signature: String::new(),
        };
        a.signature = sign(signer, &a.signed_bytes());
        a
    }

    /// The signable object (everything but `signature`).
    pub fn signable(&self) -> Value {
        let mut m = Map::new();
        m.insert("issuer".into(), self.issuer.clone().into());
        m.insert("subject".into(), self.subject.clone().into());
        m.insert("role".into(), self.role.clone().into());
        m.insert("issued_at".into(), self.issued_at.clone().into());
        if let Some(e) = &self.expires_at {
            m.insert(
                "expires_at".into(),
                e.clone().map_or(Value::Null, Value::from),
            );
        }
        if let Some(s) = &self.scope {
            m.insert("scope".into(), s.clone().map_or(Value::Null, Value::from));
        }
        Value::Object(m)
    }

    /// UTF-8 canonical JSON of [`Self::signable`] — the signed bytes.
    pub fn signed_bytes(&self) -> Vec<u8> {
        canonical_bytes(&self.signable())
    }

    /// Cryptographic check only: issuer is a did:key and the signature verifies.
    pub fn verify_signature(&self) -> Result<()> {
        if !self.signature.starts_with(SIGNATURE_PREFIX) {
            return Err(Error::Attestation("signature is not `ed25519:`".into()));
        }
        let key = verifying_key_from_did(&self.issuer)
            .map_err(|e| Error::Attestation(format!("issuer: {e}")))?;
        verify(&key, &self.signed_bytes(), &self.signature, "attestation")
            .map_err(|e| Error::Attestation(e.to_string()))
    }

    /// True when `expires_at` is set, non-empty, and not after `now` (or unparseable).
    pub fn is_expired(&self, now: DateTime<Utc>) -> bool {
        match &self.expires_at {
            Some(Some(e)) if !e.is_empty() => parse_iso8601(e).is_none_or(|t| t <= now),
            _ => false,
        }
    }

    /// The reference's `verifyAttestation`: prefix, optional expected subject, expiry, issuer
    /// did:key, Ed25519.
    pub fn verify(&self, expected_subject: Option<&str>, now: DateTime<Utc>) -> Result<()> {
        if !self.signature.starts_with(SIGNATURE_PREFIX) {
            return Err(Error::Attestation("signature is not `ed25519:`".into()));
        }
        if let Some(s) = expected_subject
            && self.subject != s
        {
            return Err(Error::Attestation(format!(
                "subject {} is not {s}",
                self.subject
            )));
        }
        if self.is_expired(now) {
            return Err(Error::Attestation("expired".into()));
        }
        self.verify_signature()
    }

    /// `attestation_add` boundary check: verifies, is about `agent_did`, not expired, role not
    /// reserved. Duplicates are the store's concern (compare [`Self::dedup_key`]).
    pub fn check_addable(&self, agent_did: &str, now: DateTime<Utc>) -> Result<()> {
        if RESERVED_ROLES.contains(&self.role.as_str()) {
            return Err(Error::Attestation(format!(
                "role `{}` is reserved for the runtime",
                self.role
            )));
        }
        self.verify(Some(agent_did), now)
    }

    /// `attestation_issue` boundary check: subject is another did:key, role not reserved,
    /// `expires_at` parses.
    pub fn check_issuable(
        self_did: &str,
        subject: &str,
        role: &str,
        expires_at: Option<&str>,
    ) -> Result<()> {
        if !is_valid_did_key(subject) {
            return Err(Error::Attestation("subject must be a did:key".into()));
        }
        if subject == self_did {
            return Err(Error::Attestation("an agent cannot attest itself".into()));
        }
        if role.is_empty() || RESERVED_ROLES.contains(&role) {
            return Err(Error::Attestation(format!(
                "role `{role}` is reserved or empty"
            )));
        }
        if let Some(e) = expires_at
            && parse_iso8601(e).is_none()
        {
            return Err(Error::Attestation("expires_at is not ISO-8601".into()));
        }
        Ok(())
    }

    /// Identity of a certificate for "adding twice is a no-op".
    pub fn dedup_key(&self) -> (String, String, String, String) {
        (
            self.issuer.clone(),
            self.subject.clone(),
            self.role.clone(),
            self.signature.clone(),
        )
    }

    /// `JSON.stringify(att)` in the reference's member order (stored as `raw_json`).
    pub fn to_raw_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parse a received attestation object (unknown members ignored).
    pub fn from_json_value(v: &Value) -> Result<Self> {
        Attestation::deserialize(v).map_err(|e| Error::Attestation(format!("malformed: {e}")))
    }

    /// The `adf_attestations` row.
    pub fn to_record(&self) -> AttestationRecord {
        AttestationRecord {
            issuer: self.issuer.clone(),
            subject: self.subject.clone(),
            role: self.role.clone(),
            issued_at: self.issued_at.clone(),
            expires_at: self.expires_at.clone().flatten(),
            scope: self.scope.clone().flatten(),
            signature: self.signature.clone(),
            raw_json: self.to_raw_json(),
        }
    }

    /// Rebuild from a row: `raw_json` is authoritative (it keeps absent-vs-null); the columns
    /// are the fallback for rows whose `raw_json` is unreadable.
    pub fn from_record(r: &AttestationRecord) -> Self {
        if let Ok(a) = serde_json::from_str::<Attestation>(&r.raw_json) {
            return a;
        }
        Attestation {
            issuer: r.issuer.clone(),
            subject: r.subject.clone(),
            role: r.role.clone(),
            issued_at: r.issued_at.clone(),
            expires_at: r.expires_at.clone().map(Some),
            scope: r.scope.clone().map(Some),
            signature: r.signature.clone(),
        }
    }
}
