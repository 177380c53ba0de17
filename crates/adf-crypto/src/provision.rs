//! Identity lifecycle as pure data (§8.1, Appendix A.10): provisioning, unlocking a file from its
//! rows, sealing/opening secrets, rotation (re-key), claim of a foreign file and reset.
//!
//! Every flow returns an [`IdentityChange`] — rows to upsert/delete, attestations to insert (and
//! which reserved roles they replace), meta values to set — which the storage crate applies in
//! one transaction. Nothing here touches a file.

use ed25519_dalek::SigningKey;
use rand::CryptoRng;
use zeroize::Zeroizing;

use crate::attestation::Attestation;
use crate::did::did_from_public;
use crate::envelope::{
    Dek, EnvelopeDescriptor, EnvelopeName, EnvelopeState, UnlockKeys, UnlockedVia, envelope_state,
    open_sealed, seal,
};
use crate::error::{Error, Result};
use crate::keys::{
    ed25519_from_pkcs8, ed25519_from_spki, ed25519_to_pkcs8, ed25519_to_spki, random_bytes,
};
use crate::legacy::{LEGACY_ALGO, LegacyKey, is_password_protected, open_legacy_row};
use crate::owner::PublicIdentity;
use crate::rows::{IdentityRow, append_did_history, meta_keys};

/// Purpose of the agent's sealed private key.
pub const PRIVATE_KEY_PURPOSE: &str = "crypto:signing:private_key";
/// Purpose of the agent's plain public key.
pub const PUBLIC_KEY_PURPOSE: &str = "crypto:signing:public_key";

/// Purposes never returned to agent code, whatever `code_access` says (IDN-08).
pub fn is_protected_purpose(purpose: &str) -> bool {
    ["crypto:signing:", "crypto:envelope:", "crypto:kdf:"]
        .iter()
        .any(|p| purpose.starts_with(p))
}

/// The DEKs held for an open file.
#[derive(Debug, Default, Clone)]
pub struct Deks {
    /// Identity envelope DEK.
    pub identity: Option<Dek>,
    /// Credentials envelope DEK.
    pub credentials: Option<Dek>,
}

impl Deks {
    /// The DEK of one envelope.
    pub fn get(&self, e: EnvelopeName) -> Option<&Dek> {
        match e {
            EnvelopeName::Identity => self.identity.as_ref(),
            EnvelopeName::Credentials => self.credentials.as_ref(),
        }
    }
    fn set(&mut self, e: EnvelopeName, d: Dek) {
        match e {
            EnvelopeName::Identity => self.identity = Some(d),
            EnvelopeName::Credentials => self.credentials = Some(d),
        }
    }
}

/// `identity_status` (IDN-24, IDN-28): states and legacy password flag, never key material.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdentityStatus {
    /// Identity envelope state.
    pub identity: EnvelopeState,
    /// Credentials envelope state.
    pub credentials: EnvelopeState,
    /// Legacy whole-file password rows exist (prompt on open).
    pub password_protected: bool,
}

/// Parse the descriptor row of an envelope, if present.
pub fn descriptor_from_rows(
    rows: &[IdentityRow],
    e: EnvelopeName,
) -> Result<Option<EnvelopeDescriptor>> {
    rows.iter()
        .find(|r| r.purpose == e.descriptor_purpose())
        .map(|r| EnvelopeDescriptor::from_json_bytes(&r.value))
        .transpose()
}

/// Envelope states as a pure function of the rows and the DEKs currently held.
pub fn identity_status(rows: &[IdentityRow], deks: &Deks) -> Result<IdentityStatus> {
    let state = |e| -> Result<EnvelopeState> {
        Ok(envelope_state(
            descriptor_from_rows(rows, e)?.as_ref(),
            deks.get(e).is_some(),
        ))
    };
    Ok(IdentityStatus {
        identity: state(EnvelopeName::Identity)?,
        credentials: state(EnvelopeName::Credentials)?,
        password_protected: is_password_protected(rows),
    })
}

/// Result of [`unlock_file`].
#[derive(Debug)]
pub struct FileUnlock {
    /// DEKs that opened.
    pub deks: Deks,
    /// How each envelope opened (identity, credentials).
    pub via: [Option<UnlockedVia>; 2],
    /// States after the attempt.
    pub status: IdentityStatus,
    /// Descriptor rows to write back: after an owner-slot unlock a runtime slot for this
    /// installation is added (IDN-18).
    pub rewritten_descriptors: Vec<IdentityRow>,
}

/// Run the unlock cascade (runtime slot → owner slot) on both envelopes of a file.
/// `runtime` is this installation's public identity, used to add the runtime slot after an
/// owner-path unlock; pass `None` to skip the rewrite.
pub fn unlock_file<R: CryptoRng + ?Sized>(
    rows: &[IdentityRow],
    keys: &UnlockKeys<'_>,
    runtime: Option<&PublicIdentity>,
    rng: &mut R,
) -> Result<FileUnlock> {
    let mut deks = Deks::default();
    let mut via = [None, None];
    let mut rewritten = Vec::new();
    for (i, e) in EnvelopeName::ALL.into_iter().enumerate() {
        let Some(desc) = descriptor_from_rows(rows, e)? else {
            continue;
        };
        let Ok((dek, how)) = desc.unlock(e, keys) else {
            continue;
        };
        if how == UnlockedVia::Owner
            && let Some(rt) = runtime
        {
            let new = desc.with_runtime_slot(e, &dek, rt, rng)?;
            rewritten.push(IdentityRow::plain(
                e.descriptor_purpose(),
                new.to_json_bytes(),
            ));
        }
        deks.set(e, dek);
        via[i] = Some(how);
    }
    let status = identity_status(rows, &deks)?;
    Ok(FileUnlock {
        deks,
        via,
        status,
        rewritten_descriptors: rewritten,
    })
}

/// Unlock the credentials envelope with a share password (credentials only: identity never has
/// a password slot).
pub fn unlock_credentials_with_password(rows: &[IdentityRow], password: &str) -> Result<Dek> {
    let e = EnvelopeName::Credentials;
    descriptor_from_rows(rows, e)?
        .ok_or_else(|| Error::NoSlotOpens(e.as_str().into()))?
        .unlock_with_password(e, password)
}

/// Seal `plaintext` into a row under the envelope its purpose belongs to. Other `crypto:*`
/// purposes are stored plain, as the reference does.
pub fn seal_secret<R: CryptoRng + ?Sized>(
    purpose: &str,
    plaintext: &[u8],
    deks: &Deks,
    code_access: bool,
    rng: &mut R,
) -> Result<IdentityRow> {
    let Some(e) = EnvelopeName::for_purpose(purpose) else {
        let mut r = IdentityRow::plain(purpose, plaintext.to_vec());
        r.code_access = code_access;
        return Ok(r);
    };
    let dek = deks.get(e).ok_or_else(|| Error::IdentityRow {
        purpose: purpose.into(),
        reason: format!("the {} envelope is not unlocked", e.as_str()),
    })?;
    Ok(IdentityRow {
        purpose: purpose.into(),
        value: seal(dek, plaintext, rng)?,
        encryption_algo: e.encryption_algo().into(),
        salt: None,
        kdf_params: None,
        code_access,
    })
}

/// Plaintext of any row: plain, `env:*` (DEK needed) or legacy `aes-256-gcm` (legacy key needed).
pub fn open_row(
    row: &IdentityRow,
    deks: &Deks,
    legacy: Option<&LegacyKey>,
) -> Result<Zeroizing<Vec<u8>>> {
    let err = |reason: String| Error::IdentityRow {
        purpose: row.purpose.clone(),
        reason,
    };
    if row.is_plain() {
        return Ok(Zeroizing::new(row.value.clone()));
    }
    if let Some(e) = EnvelopeName::from_encryption_algo(&row.encryption_algo) {
        let dek = deks
            .get(e)
            .ok_or_else(|| err(format!("the {} envelope is not unlocked", e.as_str())))?;
        return open_sealed(dek, &row.value).map_err(|x| err(x.to_string()));
    }
    if row.encryption_algo == LEGACY_ALGO {
        let key = legacy.ok_or_else(|| err("locked by the legacy file password".into()))?;
        return open_legacy_row(key, row);
    }
    Err(err(format!(
        "unknown encryption_algo `{}`",
        row.encryption_algo
    )))
}

/// The agent's signing key from its rows, checked against the public-key row when present.
pub fn agent_signing_key(
    rows: &[IdentityRow],
    deks: &Deks,
    legacy: Option<&LegacyKey>,
) -> Result<SigningKey> {
    let find = |p: &str| rows.iter().find(|r| r.purpose == p);
    let priv_row = find(PRIVATE_KEY_PURPOSE).ok_or_else(|| Error::IdentityRow {
        purpose: PRIVATE_KEY_PURPOSE.into(),
        reason: "missing".into(),
    })?;
    let key = ed25519_from_pkcs8(&open_row(priv_row, deks, legacy)?)?;
    if let Some(pub_row) = find(PUBLIC_KEY_PURPOSE) {
        let pub_bytes = open_row(pub_row, deks, legacy)?;
        if ed25519_from_spki(&pub_bytes)? != key.verifying_key() {
            return Err(Error::IdentityRow {
                purpose: PUBLIC_KEY_PURPOSE.into(),
                reason: "does not match the private key".into(),
            });
        }
    }
    Ok(key)
}

/// Parties and signers for provisioning/rotation/claim.
#[derive(Debug, Clone, Copy)]
pub struct ProvisionRequest<'a> {
    /// Owner public identity (the owner slot needs only the public encryption key — IDN-14).
    pub owner: &'a PublicIdentity,
    /// This runtime's public identity.
    pub runtime: &'a PublicIdentity,
    /// Owner signing key if available: issues the `owner` (and `clone`) attestation.
    pub owner_signer: Option<&'a SigningKey>,
    /// Runtime signing key if available: issues the `operator` attestation.
    pub runtime_signer: Option<&'a SigningKey>,
    /// ISO-8601 time for attestations.
    pub issued_at: &'a str,
}

/// Everything a lifecycle flow wants written; apply in one transaction.
pub struct IdentityChange {
    /// The agent DID after the change (`""` after a reset).
    pub did: String,
    /// The new agent key (kept in memory by the caller; it is also sealed in `upsert_rows`).
    pub agent_key: Option<SigningKey>,
    /// DEKs created or kept unlocked by the flow.
    pub deks: Deks,
    /// `adf_identity` rows to insert or replace (by purpose).
    pub upsert_rows: Vec<IdentityRow>,
    /// Purposes to delete.
    pub delete_purposes: Vec<String>,
    /// Delete every `env:credentials` row (dead foreign credentials envelope on claim).
    pub delete_sealed_credentials: bool,
    /// Attestations to insert.
    pub attestations: Vec<Attestation>,
    /// Roles whose existing rows are deleted before inserting (`owner`, `operator`).
    pub replace_roles: Vec<&'static str>,
    /// `adf_meta` values to set (all readonly keys).
    pub meta: Vec<(&'static str, String)>,
}

impl std::fmt::Debug for IdentityChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityChange")
            .field("did", &self.did)
            .field("agent_key", &self.agent_key.as_ref().map(|_| "<redacted>"))
            .field("deks", &self.deks)
            .field("upsert_rows", &self.upsert_rows)
            .field("delete_purposes", &self.delete_purposes)
            .field("delete_sealed_credentials", &self.delete_sealed_credentials)
            .field("attestations", &self.attestations)
            .field("replace_roles", &self.replace_roles)
            .field("meta", &self.meta)
            .finish()
    }
}

fn identity_rows<R: CryptoRng + ?Sized>(
    req: &ProvisionRequest<'_>,
    key: &SigningKey,
    rng: &mut R,
) -> Result<(Dek, Vec<IdentityRow>)> {
    let e = EnvelopeName::Identity;
    let dek = Dek::generate_with(rng);
    let desc =
        EnvelopeDescriptor::for_recipients(e, &dek, Some(req.owner), Some(req.runtime), rng)?;
    let sealed = seal(&dek, &ed25519_to_pkcs8(key), rng)?;
    let rows = vec![
        IdentityRow::plain(e.descriptor_purpose(), desc.to_json_bytes()),
        IdentityRow {
            purpose: PRIVATE_KEY_PURPOSE.into(),
            value: sealed,
            encryption_algo: e.encryption_algo().into(),
            salt: None,
            kdf_params: None,
            code_access: false,
        },
        IdentityRow::plain(PUBLIC_KEY_PURPOSE, ed25519_to_spki(&key.verifying_key())),
    ];
    Ok((dek, rows))
}

fn credentials_row<R: CryptoRng + ?Sized>(
    req: &ProvisionRequest<'_>,
    rng: &mut R,
) -> Result<(Dek, IdentityRow)> {
    let e = EnvelopeName::Credentials;
    let dek = Dek::generate_with(rng);
    let desc =
        EnvelopeDescriptor::for_recipients(e, &dek, Some(req.owner), Some(req.runtime), rng)?;
    Ok((
        dek,
        IdentityRow::plain(e.descriptor_purpose(), desc.to_json_bytes()),
    ))
}

fn role_attestations(req: &ProvisionRequest<'_>, did: &str) -> Vec<Attestation> {
    let mut out = Vec::new();
    if let Some(o) = req.owner_signer {
        out.push(Attestation::issue(
            o,
            did,
            "owner",
            req.issued_at,
            None,
            None,
        ));
    }
    if let Some(r) = req.runtime_signer {
        out.push(Attestation::issue(
            r,
            did,
            "operator",
            req.issued_at,
            None,
            None,
        ));
    }
    out
}

fn party_meta(req: &ProvisionRequest<'_>, did: &str) -> Vec<(&'static str, String)> {
    vec![
        (meta_keys::DID, did.to_string()),
        (meta_keys::OWNER_DID, req.owner.did.clone()),
        (meta_keys::RUNTIME_DID, req.runtime.did.clone()),
    ]
}

/// Provision a new file (IDN-01): fresh agent key, both envelopes with owner + runtime slots,
/// sealed private key, plain public key, owner/operator attestations, meta DIDs.
pub fn provision<R: CryptoRng + ?Sized>(
    req: &ProvisionRequest<'_>,
    rng: &mut R,
) -> Result<IdentityChange> {
    let seed = Zeroizing::new(random_bytes::<32, R>(rng));
    provision_with_key(req, SigningKey::from_bytes(&seed), rng)
}

/// Provision around an existing key (older files keep their DID — IDN-02).
pub fn provision_with_key<R: CryptoRng + ?Sized>(
    req: &ProvisionRequest<'_>,
    agent_key: SigningKey,
    rng: &mut R,
) -> Result<IdentityChange> {
    let did = did_from_public(&agent_key.verifying_key());
    let (idek, mut rows) = identity_rows(req, &agent_key, rng)?;
    let (cdek, crow) = credentials_row(req, rng)?;
    rows.insert(1, crow);
    Ok(IdentityChange {
        attestations: role_attestations(req, &did),
        replace_roles: vec!["owner", "operator"],
        meta: party_meta(req, &did),
        did,
        agent_key: Some(agent_key),
        deks: Deks {
            identity: Some(idek),
            credentials: Some(cdek),
        },
        upsert_rows: rows,
        delete_purposes: Vec::new(),
        delete_sealed_credentials: false,
    })
}

/// Rotation (re-key): old DID to history, new keypair and identity DEK, re-attest owner/operator.
/// Credentials are untouched.
pub fn rotate<R: CryptoRng + ?Sized>(
    req: &ProvisionRequest<'_>,
    old_did: &str,
    did_history: Option<&str>,
    rng: &mut R,
) -> Result<IdentityChange> {
    let seed = Zeroizing::new(random_bytes::<32, R>(rng));
    let key = SigningKey::from_bytes(&seed);
    let did = did_from_public(&key.verifying_key());
    let (idek, rows) = identity_rows(req, &key, rng)?;
    let mut meta = party_meta(req, &did);
    meta.push((
        meta_keys::DID_HISTORY,
        append_did_history(did_history, old_did),
    ));
    Ok(IdentityChange {
        attestations: role_attestations(req, &did),
        replace_roles: vec!["owner", "operator"],
        meta,
        did,
        agent_key: Some(key),
        deks: Deks {
            identity: Some(idek),
            credentials: None,
        },
        upsert_rows: rows,
        delete_purposes: Vec::new(),
        delete_sealed_credentials: false,
    })
}

/// Claim a file whose identity is foreign (owner-confirmed, never automatic — IDN-26): new keys
/// and DID, old DID to history, a `clone` attestation (scope = old DID) by the owner, owner and
/// operator attestations, local owner/runtime DIDs. A foreign credentials envelope that has no
/// password slot or no sealed rows is dead and is replaced (claim hygiene, A.8).
pub fn claim<R: CryptoRng + ?Sized>(
    req: &ProvisionRequest<'_>,
    rows: &[IdentityRow],
    old_did: &str,
    did_history: Option<&str>,
    rng: &mut R,
) -> Result<IdentityChange> {
    let owner_signer = req.owner_signer.ok_or_else(|| {
        Error::Attestation(
            "claiming needs the owner's signing key for the clone attestation".into(),
        )
    })?;
    let mut change = rotate(req, old_did, did_history, rng)?;
    if !old_did.is_empty() {
        change.attestations.insert(
            0,
            Attestation::issue(
                owner_signer,
                &change.did,
                "clone",
                req.issued_at,
                None,
                Some(old_did),
            ),
        );
    }
    let creds = descriptor_from_rows(rows, EnvelopeName::Credentials)?;
    let has_sealed = rows
        .iter()
        .any(|r| r.encryption_algo == EnvelopeName::Credentials.encryption_algo());
    let dead = match &creds {
        None => true,
        Some(d) => !d.has_password_slot() || !has_sealed,
    };
    if dead {
        let (cdek, crow) = credentials_row(req, rng)?;
        change.upsert_rows.push(crow);
        change.deks.credentials = Some(cdek);
        change.delete_sealed_credentials = creds.is_some();
    }
    Ok(change)
}

/// Identity reset: old DID to history, identity rows deleted, `adf_did = ''`.
pub fn reset(old_did: &str, did_history: Option<&str>) -> IdentityChange {
    IdentityChange {
        did: String::new(),
        agent_key: None,
        deks: Deks::default(),
        upsert_rows: Vec::new(),
        delete_purposes: vec![
            PRIVATE_KEY_PURPOSE.into(),
            PUBLIC_KEY_PURPOSE.into(),
            EnvelopeName::Identity.descriptor_purpose().into(),
        ],
        delete_sealed_credentials: false,
        attestations: Vec::new(),
        replace_roles: Vec::new(),
        meta: vec![
            (
                meta_keys::DID_HISTORY,
                append_did_history(did_history, old_did),
            ),
            (meta_keys::DID, String::new()),
        ],
    }
}

/// Recipient adoption after a share-password unlock of foreign credentials (IDN-20): exactly
/// local owner + runtime slots, no password slot. Returns the descriptor row to write.
pub fn adopt_credentials<R: CryptoRng + ?Sized>(
    dek: &Dek,
    owner: &PublicIdentity,
    runtime: &PublicIdentity,
    rng: &mut R,
) -> Result<IdentityRow> {
    let e = EnvelopeName::Credentials;
    let d = EnvelopeDescriptor::adopt(e, dek, owner, runtime, rng)?;
    Ok(IdentityRow::plain(
        e.descriptor_purpose(),
        d.to_json_bytes(),
    ))
}
