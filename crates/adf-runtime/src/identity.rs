//! An agent's identity on an open file (§8.1–§8.4, Appendix A.10): provisioning new and older
//! files, the unlock cascade with runtime-slot adoption, envelope status, sealed credentials,
//! sharing and adopting credentials by password, claim, re-key and reset, and a read-only
//! verification pass for `adf check`.
//!
//! `adf-crypto` computes every change as data ([`adf_crypto::provision::IdentityChange`]); this
//! module translates it into an [`IdentityWrite`] and the store applies it in one transaction, so
//! a failed flow leaves the file as it was. DEKs are held in [`OpenIdentity`] for as long as the
//! caller keeps it and are never written anywhere unwrapped.

use adf_crypto::IdentityRow as CryptoRow;
use adf_crypto::attestation::to_iso8601;
use adf_crypto::did::verifying_key_from_did;
use adf_crypto::envelope::{
    EnvelopeDescriptor, EnvelopeName, EnvelopeState, ScryptParams, Slot, SlotKind, UnlockKeys,
    UnlockedVia,
};
use adf_crypto::keys::{ed25519_from_pkcs8, ed25519_from_spki};
use adf_crypto::provision::{
    self, Deks, IdentityChange, IdentityStatus, PRIVATE_KEY_PURPOSE, PUBLIC_KEY_PURPOSE,
    ProvisionRequest, descriptor_from_rows, is_protected_purpose,
};
use adf_crypto::rows::{append_did_history, meta_keys};
use adf_crypto::{Attestation, OwnerIdentity, RuntimeIdentity};
use adf_store::check::{Finding, Severity};
use adf_store::{AdfFile, AttestationRow, IdentityWrite, StoreError};
use serde::Serialize;
use zeroize::Zeroizing;

use crate::home::{HomeError, RuntimeHome};

/// What can go wrong in an identity flow. Messages say what to do and carry no secrets.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// The runtime home (owner/runtime keystores).
    #[error(transparent)]
    Home(#[from] HomeError),
    /// The file.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A cryptographic operation.
    #[error(transparent)]
    Crypto(#[from] adf_crypto::Error),
    /// The flow needs the owner's keys and this installation has none.
    #[error(
        "this needs the owner identity and there is none on this installation: run `adf owner init` or `adf owner import`"
    )]
    NoOwner,
    /// The flow needs the runtime identity and it was not loaded (read-only callers).
    #[error("the runtime identity of this installation is not available")]
    NoRuntime,
    /// An envelope must be unlocked for this and is not.
    #[error("the {envelope} envelope of this file is {state}: {hint}")]
    Envelope {
        /// `identity` or `credentials`.
        envelope: &'static str,
        /// Its state.
        state: &'static str,
        /// What the user can do.
        hint: &'static str,
    },
    /// `claim` on a file whose identity already opens here.
    #[error("nothing to claim: this installation already holds the identity of this file ({0})")]
    NotForeign(String),
    /// A purpose that agent code and owners may not set directly.
    #[error(
        "purpose `{0}` is reserved for the runtime's own keys (crypto:*); choose another name, e.g. `provider:<id>:apiKey`"
    )]
    ReservedPurpose(String),
    /// Bad input from the user.
    #[error("{0}")]
    Invalid(String),
}

type Result<T, E = IdentityError> = std::result::Result<T, E>;

/// The keys this installation holds: the owner's (optional) and the runtime's.
#[derive(Debug)]
pub struct LocalKeys {
    owner: Option<OwnerIdentity>,
    runtime: Option<RuntimeIdentity>,
}

impl LocalKeys {
    /// Assemble from keys already in memory.
    pub fn new(owner: Option<OwnerIdentity>, runtime: Option<RuntimeIdentity>) -> Self {
        LocalKeys { owner, runtime }
    }

    /// Keys from the home: the owner if one exists, the runtime identity (generated on first
    /// use).
    pub fn from_home(home: &RuntimeHome) -> Result<Self> {
        Ok(LocalKeys {
            owner: home.load_owner()?.map(|o| o.identity),
            runtime: Some(home.runtime()?),
        })
    }

    /// Keys from the home without creating anything (read-only callers such as `adf check`).
    pub fn existing(home: &RuntimeHome) -> Result<Self> {
        Ok(LocalKeys {
            owner: home.load_owner()?.map(|o| o.identity),
            runtime: home.load_runtime()?,
        })
    }

    /// The owner's keys, if held.
    pub fn owner(&self) -> Option<&OwnerIdentity> {
        self.owner.as_ref()
    }

    /// The runtime's keys, if held.
    pub fn runtime(&self) -> Option<&RuntimeIdentity> {
        self.runtime.as_ref()
    }

    fn need_owner(&self) -> Result<&OwnerIdentity> {
        self.owner.as_ref().ok_or(IdentityError::NoOwner)
    }

    fn need_runtime(&self) -> Result<&RuntimeIdentity> {
        self.runtime.as_ref().ok_or(IdentityError::NoRuntime)
    }

    fn unlock_keys(&self) -> UnlockKeys<'_> {
        UnlockKeys {
            runtime: self.runtime.as_ref().map(|r| r.keys().encryption_secret()),
            owner: self.owner.as_ref().map(|o| o.keys().encryption_secret()),
        }
    }
}

/// How a file came to be provisioned by this open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Provisioned {
    /// A new key and DID.
    NewKey,
    /// An older file's existing (plain) key was sealed and its DID kept (IDN-02).
    KeptExistingKey,
}

/// A file's identity as opened by this installation: the DEKs that opened and what opening did.
#[derive(Debug)]
pub struct OpenIdentity {
    deks: Deks,
    /// Envelope states after opening.
    pub status: IdentityStatus,
    /// How each envelope opened: `[identity, credentials]`.
    pub via: [Option<UnlockedVia>; 2],
    /// Envelopes that gained a runtime slot for this installation (IDN-18).
    pub runtime_slot_added: Vec<&'static str>,
    /// Set when this open provisioned the file.
    pub provisioned: Option<Provisioned>,
    /// Plain secrets that were sealed into the credentials envelope while provisioning.
    pub sealed_plain_rows: usize,
}

impl OpenIdentity {
    /// True when the DEK of `envelope` is held.
    pub fn is_unlocked(&self, envelope: EnvelopeName) -> bool {
        self.deks.get(envelope).is_some()
    }
}

fn now_iso() -> String {
    to_iso8601(chrono::Utc::now())
}

fn to_crypto_rows(rows: Vec<adf_store::IdentityRow>) -> Vec<adf_crypto::IdentityRow> {
    rows.into_iter()
        .map(|r| adf_crypto::IdentityRow {
            purpose: r.purpose,
            value: r.value,
            encryption_algo: r.encryption_algo,
            salt: r.salt,
            kdf_params: r.kdf_params,
            code_access: r.code_access,
        })
        .collect()
}

fn to_store_row(r: adf_crypto::IdentityRow) -> adf_store::IdentityRow {
    adf_store::IdentityRow {
        purpose: r.purpose,
        value: r.value,
        encryption_algo: r.encryption_algo,
        salt: r.salt,
        kdf_params: r.kdf_params,
        code_access: r.code_access,
    }
}

pub(crate) fn to_store_attestation(a: &Attestation) -> AttestationRow {
    let r = a.to_record();
    AttestationRow {
        id: 0,
        issuer: r.issuer,
        subject: r.subject,
        role: r.role,
        issued_at: r.issued_at,
        expires_at: r.expires_at,
        scope: r.scope,
        signature: r.signature,
        raw_json: r.raw_json,
    }
}

pub(crate) fn from_store_attestation(r: &AttestationRow) -> Attestation {
    Attestation::from_record(&adf_crypto::AttestationRecord {
        issuer: r.issuer.clone(),
        subject: r.subject.clone(),
        role: r.role.clone(),
        issued_at: r.issued_at.clone(),
        expires_at: r.expires_at.clone(),
        scope: r.scope.clone(),
        signature: r.signature.clone(),
        raw_json: r.raw_json.clone(),
    })
}

/// Translate a crypto change into a store write; the DEKs and agent key stay with the caller.
fn to_write(change: IdentityChange) -> (IdentityWrite, Deks) {
    let write = IdentityWrite {
        delete_purposes: change.delete_purposes,
        delete_sealed_credentials: change.delete_sealed_credentials,
        upsert_rows: change.upsert_rows.into_iter().map(to_store_row).collect(),
        replace_roles: change
            .replace_roles
            .iter()
            .map(|r| (*r).to_owned())
            .collect(),
        attestations: change
            .attestations
            .iter()
            .map(to_store_attestation)
            .collect(),
        meta: change
            .meta
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    };
    (write, change.deks)
}

fn meta(file: &AdfFile, key: &str) -> Result<Option<String>> {
    Ok(file.meta_get(key)?.map(|e| e.value))
}

fn request<'a>(
    keys: &'a LocalKeys,
    owner_public: &'a adf_crypto::PublicIdentity,
    runtime_public: &'a adf_crypto::PublicIdentity,
    issued_at: &'a str,
) -> ProvisionRequest<'a> {
    ProvisionRequest {
        owner: owner_public,
        runtime: runtime_public,
        owner_signer: keys.owner.as_ref().map(|o| o.keys().signing_key()),
        runtime_signer: keys.runtime.as_ref().map(|r| r.keys().signing_key()),
        issued_at,
    }
}

/// Provision a freshly created file (IDN-01): new agent key sealed in the identity envelope,
/// both envelopes with owner + runtime slots, DIDs in meta, owner and operator attestations.
pub fn provision_new(file: &mut AdfFile, keys: &LocalKeys) -> Result<OpenIdentity> {
    let owner = keys.need_owner()?.public();
    let runtime = keys.need_runtime()?.public();
    let issued_at = now_iso();
    let change = provision::provision(
        &request(keys, &owner, &runtime, &issued_at),
        &mut rand::rng(),
    )?;
    let (write, deks) = to_write(change);
    file.identity_apply(&write)?;
    let rows = to_crypto_rows(file.identity_rows()?);
    Ok(OpenIdentity {
        status: provision::identity_status(&rows, &deks)?,
        deks,
        via: [None, None],
        runtime_slot_added: Vec::new(),
        provisioned: Some(Provisioned::NewKey),
        sealed_plain_rows: 0,
    })
}

/// First-open provisioning of a file without envelopes (IDN-02). A plain key (files written
/// before envelopes) is sealed and keeps its DID; a keyless file gets a new key. Plain secrets
/// are sealed into the new credentials envelope. Files under the legacy whole-file password
/// are left alone: they need the password first.
fn provision_older(
    file: &mut AdfFile,
    keys: &LocalKeys,
    rows: &[adf_crypto::IdentityRow],
) -> Result<Option<(Provisioned, Deks, usize)>> {
    if descriptor_from_rows(rows, EnvelopeName::Identity)?.is_some()
        || adf_crypto::legacy::is_password_protected(rows)
    {
        return Ok(None);
    }
    // Without an owner there is nobody to provision for; status reports the file as it is.
    if keys.owner.is_none() {
        return Ok(None);
    }
    let private = rows.iter().find(|r| r.purpose == PRIVATE_KEY_PURPOSE);
    let existing_key = match private {
        Some(r) if r.is_plain() => Some(ed25519_from_pkcs8(&r.value)?),
        // Sealed without a descriptor: nothing can open it; `adf check` reports it.
        Some(_) => return Ok(None),
        None => None,
    };
    let owner = keys.need_owner()?.public();
    let runtime = keys.need_runtime()?.public();
    let issued_at = now_iso();
    let req = request(keys, &owner, &runtime, &issued_at);
    let mut rng = rand::rng();
    let (mut change, kind) = match existing_key {
        Some(key) => (
            provision::provision_with_key(&req, key, &mut rng)?,
            Provisioned::KeptExistingKey,
        ),
        None => (provision::provision(&req, &mut rng)?, Provisioned::NewKey),
    };
    // A DID the file named but whose key is gone (or differs) is history, never dropped.
    let old_did = meta(file, meta_keys::DID)?.unwrap_or_default();
    if !old_did.is_empty() && old_did != change.did {
        let history = meta(file, meta_keys::DID_HISTORY)?;
        change.meta.push((
            meta_keys::DID_HISTORY,
            append_did_history(history.as_deref(), &old_did),
        ));
    }
    let mut sealed = 0;
    for row in rows {
        if row.is_plain()
            && EnvelopeName::for_purpose(&row.purpose) == Some(EnvelopeName::Credentials)
        {
            change.upsert_rows.push(provision::seal_secret(
                &row.purpose,
                &row.value,
                &change.deks,
                row.code_access,
                &mut rng,
            )?);
            sealed += 1;
        }
    }
    let (write, deks) = to_write(change);
    file.identity_apply(&write)?;
    Ok(Some((kind, deks, sealed)))
}

/// Opens a file's identity the way the runtime does on open: provisions a file that has none
/// yet (needs the owner), then runs the unlock cascade (runtime slot → owner slot) and, after an
/// owner-slot unlock, adds a runtime slot for this installation (IDN-17, IDN-18).
pub fn open_identity(file: &mut AdfFile, keys: &LocalKeys) -> Result<OpenIdentity> {
    let rows = to_crypto_rows(file.identity_rows()?);
    if let Some((kind, deks, sealed)) = provision_older(file, keys, &rows)? {
        let rows = to_crypto_rows(file.identity_rows()?);
        return Ok(OpenIdentity {
            status: provision::identity_status(&rows, &deks)?,
            deks,
            via: [None, None],
            runtime_slot_added: Vec::new(),
            provisioned: Some(kind),
            sealed_plain_rows: sealed,
        });
    }
    let runtime_public = keys.runtime.as_ref().map(RuntimeIdentity::public);
    let unlock = provision::unlock_file(
        &rows,
        &keys.unlock_keys(),
        runtime_public.as_ref(),
        &mut rand::rng(),
    )?;
    let mut added = Vec::new();
    if !unlock.rewritten_descriptors.is_empty() {
        for row in &unlock.rewritten_descriptors {
            added.extend(
                EnvelopeName::ALL
                    .into_iter()
                    .filter(|e| e.descriptor_purpose() == row.purpose)
                    .map(EnvelopeName::as_str),
            );
        }
        file.identity_apply(&IdentityWrite {
            upsert_rows: unlock
                .rewritten_descriptors
                .into_iter()
                .map(to_store_row)
                .collect(),
            ..IdentityWrite::default()
        })?;
    }
    Ok(OpenIdentity {
        deks: unlock.deks,
        status: unlock.status,
        via: unlock.via,
        runtime_slot_added: added,
        provisioned: None,
        sealed_plain_rows: 0,
    })
}

/// One key slot as `identity status` shows it (public data only).
#[derive(Debug, Clone, Serialize)]
pub struct SlotSummary {
    /// `owner`, `runtime`, `password` or the unknown type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Recipient DID of a key slot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recipient_did: Option<String>,
    /// True when the recipient is this installation's owner or runtime.
    pub local: bool,
}

/// One envelope in the status report.
#[derive(Debug, Clone, Serialize)]
pub struct EnvelopeSummary {
    /// `unlocked`, `locked`, `foreign` or `absent`.
    pub state: &'static str,
    /// `runtime`, `owner` or `password` when it opened.
    pub unlocked_via: Option<&'static str>,
    /// Its slots.
    pub slots: Vec<SlotSummary>,
    /// Sealed rows under it.
    pub sealed_rows: usize,
}

/// `identity_status` for people and `--json` (IDN-28): states, DIDs, slots; never key material.
#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    /// Agent DID (`adf_did`).
    pub did: String,
    /// Prior DIDs, oldest first.
    pub did_history: Vec<String>,
    /// `adf_owner_did` recorded in the file.
    pub owner_did: Option<String>,
    /// `adf_runtime_did` recorded in the file.
    pub runtime_did: Option<String>,
    /// Identity envelope.
    pub identity: EnvelopeSummary,
    /// Credentials envelope.
    pub credentials: EnvelopeSummary,
    /// Legacy whole-file password rows exist.
    pub password_protected: bool,
    /// This installation's owner DID, if it has an owner.
    pub local_owner_did: Option<String>,
    /// This installation's runtime DID.
    pub local_runtime_did: Option<String>,
    /// Set when this open provisioned the file.
    pub provisioned: Option<Provisioned>,
    /// Plain secrets sealed while provisioning.
    pub sealed_plain_rows: usize,
    /// Envelopes that gained a runtime slot for this installation during this open.
    pub runtime_slot_added: Vec<&'static str>,
    /// Attestation roles present, in insertion order.
    pub attestations: Vec<String>,
}

fn via_str(v: Option<UnlockedVia>) -> Option<&'static str> {
    v.map(|v| match v {
        UnlockedVia::Runtime => "runtime",
        UnlockedVia::Owner => "owner",
        UnlockedVia::Password => "password",
    })
}

fn did_history(file: &AdfFile) -> Result<Vec<String>> {
    Ok(meta(file, meta_keys::DID_HISTORY)?
        .and_then(|h| serde_json::from_str(&h).ok())
        .unwrap_or_default())
}

/// The status of an opened identity.
pub fn status(file: &AdfFile, keys: &LocalKeys, open: &OpenIdentity) -> Result<StatusReport> {
    let rows = to_crypto_rows(file.identity_rows()?);
    let local: Vec<String> = keys
        .owner
        .iter()
        .map(OwnerIdentity::did)
        .chain(keys.runtime.iter().map(RuntimeIdentity::did))
        .collect();
    let summary = |e: EnvelopeName, state: EnvelopeState, via| -> Result<EnvelopeSummary> {
        let slots = descriptor_from_rows(&rows, e)?
            .map(|d| {
                d.slots
                    .iter()
                    .map(|s| match s {
                        Slot::Key(k) => SlotSummary {
                            kind: match k.kind {
                                SlotKind::Owner => "owner".into(),
                                SlotKind::Runtime => "runtime".into(),
                            },
                            local: local.contains(&k.recipient_did),
                            recipient_did: Some(k.recipient_did.clone()),
                        },
                        Slot::Password(_) => SlotSummary {
                            kind: "password".into(),
                            recipient_did: None,
                            local: false,
                        },
                        Slot::Unknown(v) => SlotSummary {
                            kind: v
                                .get("type")
                                .and_then(|t| t.as_str())
                                .unwrap_or("unknown")
                                .to_owned(),
                            recipient_did: None,
                            local: false,
                        },
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(EnvelopeSummary {
            state: state.as_str(),
            unlocked_via: via,
            slots,
            sealed_rows: rows
                .iter()
                .filter(|r| r.encryption_algo == e.encryption_algo())
                .count(),
        })
    };
    Ok(StatusReport {
        did: meta(file, meta_keys::DID)?.unwrap_or_default(),
        did_history: did_history(file)?,
        owner_did: meta(file, meta_keys::OWNER_DID)?,
        runtime_did: meta(file, meta_keys::RUNTIME_DID)?,
        identity: summary(
            EnvelopeName::Identity,
            open.status.identity,
            via_str(open.via[0]),
        )?,
        credentials: summary(
            EnvelopeName::Credentials,
            open.status.credentials,
            via_str(open.via[1]),
        )?,
        password_protected: open.status.password_protected,
        local_owner_did: keys.owner.as_ref().map(OwnerIdentity::did),
        local_runtime_did: keys.runtime.as_ref().map(RuntimeIdentity::did),
        provisioned: open.provisioned,
        sealed_plain_rows: open.sealed_plain_rows,
        runtime_slot_added: open.runtime_slot_added.clone(),
        attestations: file.attestations()?.into_iter().map(|a| a.role).collect(),
    })
}

fn credentials_unusable(state: EnvelopeState) -> IdentityError {
    let hint = match state {
        EnvelopeState::Locked => {
            "it was shared with a password; run `adf claim FILE --password-stdin` with that password to adopt it"
        }
        EnvelopeState::Foreign => {
            "it belongs to another owner or installation; import that owner with `adf owner import`, or ask them to `adf identity share` it"
        }
        EnvelopeState::Absent => "the file has no credentials envelope; run `adf claim FILE`",
        EnvelopeState::Unlocked => "",
    };
    IdentityError::Envelope {
        envelope: "credentials",
        state: state.as_str(),
        hint,
    }
}

/// Seals `value` under `purpose` into the credentials envelope (IDN-11). A new row gets
/// `code_access`; an existing row keeps its flag (§3.3).
pub fn set_credential(
    file: &mut AdfFile,
    open: &OpenIdentity,
    purpose: &str,
    value: &[u8],
    code_access: bool,
) -> Result<()> {
    if purpose.is_empty() || purpose.trim() != purpose {
        return Err(IdentityError::Invalid(
            "a purpose is a non-empty name without surrounding spaces, e.g. `provider:openai:apiKey`"
                .into(),
        ));
    }
    if purpose.starts_with("crypto:") || is_protected_purpose(purpose) {
        return Err(IdentityError::ReservedPurpose(purpose.to_owned()));
    }
    if !open.is_unlocked(EnvelopeName::Credentials) {
        return Err(credentials_unusable(open.status.credentials));
    }
    let row = provision::seal_secret(purpose, value, &open.deks, code_access, &mut rand::rng())?;
    file.identity_apply(&IdentityWrite {
        upsert_rows: vec![to_store_row(row)],
        ..IdentityWrite::default()
    })?;
    Ok(())
}

/// Reads a sealed credential (the runtime's own use: providers, adapters, MCP).
pub fn read_credential(
    file: &AdfFile,
    open: &OpenIdentity,
    purpose: &str,
) -> Result<Option<Zeroizing<Vec<u8>>>> {
    let rows = to_crypto_rows(file.identity_rows()?);
    let Some(row) = rows.iter().find(|r| r.purpose == purpose) else {
        return Ok(None);
    };
    Ok(Some(provision::open_row(row, &open.deks, None)?))
}

/// The agent's own signing key, opened from the identity envelope (a plain legacy key is read
/// as is). For signing on the agent's behalf (`attestation_issue`); never handed to code.
pub fn agent_signing_key(file: &AdfFile, open: &OpenIdentity) -> Result<adf_crypto::SigningKey> {
    let rows = to_crypto_rows(file.identity_rows()?);
    let row = rows
        .iter()
        .find(|r| r.purpose == PRIVATE_KEY_PURPOSE)
        .ok_or_else(|| IdentityError::Invalid("this file has no signing key yet".into()))?;
    if !row.is_plain() && !open.is_unlocked(EnvelopeName::Identity) {
        return Err(IdentityError::Envelope {
            envelope: "identity",
            state: open.status.identity.as_str(),
            hint: "open the file where its owner or runtime keys are, or run `adf claim FILE`",
        });
    }
    let der = provision::open_row(row, &open.deks, None)?;
    Ok(ed25519_from_pkcs8(&der)?)
}

/// One row as `identity list` shows it: never the value.
#[derive(Debug, Clone, Serialize)]
pub struct PurposeInfo {
    /// The purpose.
    pub purpose: String,
    /// `plain`, `env:identity`, `env:credentials`, `aes-256-gcm`.
    pub encryption_algo: String,
    /// True for sealed or legacy-encrypted rows.
    pub encrypted: bool,
    /// Agent code may read it.
    pub code_access: bool,
    /// One of the runtime's own rows (`crypto:*`), never readable by agent code.
    pub runtime_key: bool,
}

/// Every identity purpose with how it is stored (IDN-28: no values).
pub fn list_purposes(file: &AdfFile) -> Result<Vec<PurposeInfo>> {
    Ok(file
        .identity_rows()?
        .into_iter()
        .map(|r| PurposeInfo {
            encrypted: r.encryption_algo != "plain",
            runtime_key: r.purpose.starts_with("crypto:"),
            purpose: r.purpose,
            encryption_algo: r.encryption_algo,
            code_access: r.code_access,
        })
        .collect())
}

/// Adds (or replaces) the password slot of the credentials envelope so the file can be handed
/// to someone else with its credentials (IDN-15). The identity envelope never gets one (IDN-16).
pub fn share_credentials(file: &mut AdfFile, open: &OpenIdentity, password: &str) -> Result<()> {
    if password.is_empty() {
        return Err(IdentityError::Invalid("the share password is empty".into()));
    }
    let e = EnvelopeName::Credentials;
    let Some(dek) = open.deks.get(e) else {
        return Err(credentials_unusable(open.status.credentials));
    };
    let rows = to_crypto_rows(file.identity_rows()?);
    let desc = descriptor_from_rows(&rows, e)?.unwrap_or(EnvelopeDescriptor {
        v: 1,
        slots: Vec::new(),
    });
    let new =
        desc.with_password_slot(e, dek, password, ScryptParams::default(), &mut rand::rng())?;
    file.identity_apply(&IdentityWrite {
        upsert_rows: vec![to_store_row(adf_crypto::IdentityRow::plain(
            e.descriptor_purpose(),
            new.to_json_bytes(),
        ))],
        ..IdentityWrite::default()
    })?;
    Ok(())
}

/// Removes the password slot of the credentials envelope (the owner's `DELETE
/// /identity/password`): the file stops being openable by whoever knows the share password.
/// The envelope must be unlocked here and keep a key slot, so removing the slot never leaves
/// credentials nobody can open. Returns whether a slot was removed (none: nothing written).
pub fn remove_password_slot(file: &mut AdfFile, open: &OpenIdentity) -> Result<bool> {
    let e = EnvelopeName::Credentials;
    let rows = to_crypto_rows(file.identity_rows()?);
    let Some(desc) = descriptor_from_rows(&rows, e)? else {
        return Ok(false);
    };
    if !desc.has_password_slot() {
        return Ok(false);
    }
    if open.deks.get(e).is_none() {
        return Err(credentials_unusable(open.status.credentials));
    }
    let kept = desc.without_password_slots();
    if kept.slots.is_empty() {
        return Err(IdentityError::Invalid(
            "the password slot is the only way to open the credentials: unlock them with the password first (it adds this installation's slot), then remove it".into(),
        ));
    }
    file.identity_apply(&IdentityWrite {
        upsert_rows: vec![to_store_row(adf_crypto::IdentityRow::plain(
            e.descriptor_purpose(),
            kept.to_json_bytes(),
        ))],
        ..IdentityWrite::default()
    })?;
    Ok(true)
}

/// Recipient adoption (IDN-20): opens shared credentials with the share password and re-wraps
/// them to this owner and runtime, removing the password slot. Returns the updated open state.
pub fn adopt_shared_credentials(
    file: &mut AdfFile,
    keys: &LocalKeys,
    open: &mut OpenIdentity,
    password: &str,
) -> Result<()> {
    let owner = keys.need_owner()?.public();
    let runtime = keys.need_runtime()?.public();
    let rows = to_crypto_rows(file.identity_rows()?);
    let dek = provision::unlock_credentials_with_password(&rows, password)?;
    let row = provision::adopt_credentials(&dek, &owner, &runtime, &mut rand::rng())?;
    file.identity_apply(&IdentityWrite {
        upsert_rows: vec![to_store_row(row)],
        ..IdentityWrite::default()
    })?;
    open.deks.credentials = Some(dek);
    open.via[1] = Some(UnlockedVia::Password);
    open.status = provision::identity_status(&to_crypto_rows(file.identity_rows()?), &open.deks)?;
    Ok(())
}

/// What `claim` did.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimOutcome {
    /// The agent DID now.
    pub did: String,
    /// The DID it replaced (`None` when the file had no identity and was provisioned).
    pub previous_did: Option<String>,
    /// Set when the file had no identity and was provisioned instead.
    pub provisioned: Option<Provisioned>,
    /// True when the foreign credentials envelope was unusable and replaced by an empty one.
    pub credentials_replaced: bool,
}

/// Claims a file whose identity is foreign (IDN-26, owner-confirmed: only ever on request):
/// new key and DID, the old DID to history, a `clone` attestation (scope = old DID) by the owner,
/// owner/operator attestations, local owner/runtime DIDs. A file with no identity yet is
/// provisioned instead (keeping a plain key's DID).
pub fn claim(file: &mut AdfFile, keys: &LocalKeys) -> Result<(ClaimOutcome, OpenIdentity)> {
    keys.need_owner()?;
    let open = open_identity(file, keys)?;
    let did = meta(file, meta_keys::DID)?.unwrap_or_default();
    if let Some(kind) = open.provisioned {
        return Ok((
            ClaimOutcome {
                did,
                previous_did: None,
                provisioned: Some(kind),
                credentials_replaced: false,
            },
            open,
        ));
    }
    match open.status.identity {
        EnvelopeState::Unlocked => return Err(IdentityError::NotForeign(did)),
        EnvelopeState::Foreign | EnvelopeState::Locked | EnvelopeState::Absent => {}
    }
    let rows = to_crypto_rows(file.identity_rows()?);
    let owner = keys.need_owner()?.public();
    let runtime = keys.need_runtime()?.public();
    let issued_at = now_iso();
    let history = meta(file, meta_keys::DID_HISTORY)?;
    let change = provision::claim(
        &request(keys, &owner, &runtime, &issued_at),
        &rows,
        &did,
        history.as_deref(),
        &mut rand::rng(),
    )?;
    let new_did = change.did.clone();
    let replaced = change.deks.credentials.is_some();
    let (write, mut deks) = to_write(change);
    file.identity_apply(&write)?;
    if deks.credentials.is_none() {
        deks.credentials = open.deks.credentials.clone();
    }
    let rows = to_crypto_rows(file.identity_rows()?);
    let open = OpenIdentity {
        status: provision::identity_status(&rows, &deks)?,
        deks,
        via: [None, open.via[1]],
        runtime_slot_added: open.runtime_slot_added,
        provisioned: None,
        sealed_plain_rows: 0,
    };
    Ok((
        ClaimOutcome {
            did: new_did,
            previous_did: Some(did).filter(|d| !d.is_empty()),
            provisioned: None,
            credentials_replaced: replaced,
        },
        open,
    ))
}

/// Re-keys this installation's agent (IDN-05, IDN-34): the old DID to history, a new key and
/// identity DEK, owner/operator attestations re-issued (other roles kept). `config.id` is not
/// touched (IDN-06). Returns the new DID.
pub fn rotate(file: &mut AdfFile, keys: &LocalKeys, open: &mut OpenIdentity) -> Result<String> {
    if !open.is_unlocked(EnvelopeName::Identity) {
        return Err(IdentityError::Envelope {
            envelope: "identity",
            state: open.status.identity.as_str(),
            hint: "only the file's own installation or owner can re-key it; a foreign file is claimed with `adf claim FILE`",
        });
    }
    let owner = keys.need_owner()?.public();
    let runtime = keys.need_runtime()?.public();
    let issued_at = now_iso();
    let old = meta(file, meta_keys::DID)?.unwrap_or_default();
    let history = meta(file, meta_keys::DID_HISTORY)?;
    let change = provision::rotate(
        &request(keys, &owner, &runtime, &issued_at),
        &old,
        history.as_deref(),
        &mut rand::rng(),
    )?;
    let did = change.did.clone();
    let (write, deks) = to_write(change);
    file.identity_apply(&write)?;
    open.deks.identity = deks.identity;
    open.status = provision::identity_status(&to_crypto_rows(file.identity_rows()?), &open.deks)?;
    Ok(did)
}

/// Identity reset (IDN-04): the DID to history, key rows and identity envelope deleted,
/// `adf_did = ''`.
pub fn reset(file: &mut AdfFile) -> Result<()> {
    let old = meta(file, meta_keys::DID)?.unwrap_or_default();
    let history = meta(file, meta_keys::DID_HISTORY)?;
    let (write, _) = to_write(provision::reset(&old, history.as_deref()));
    file.identity_apply(&write)?;
    Ok(())
}

fn finding(severity: Severity, rule: &'static str, message: String) -> Finding {
    Finding {
        severity,
        rule,
        message,
    }
}

/// The identity verification pass of `adf check`, read-only. Public facts are always verified
/// (did:key ↔ public key row, attestation signatures, envelope descriptors, sealed row layout);
/// with `keys` the envelopes are opened in memory and the private key and sealed rows checked
/// too. Findings name purposes and DIDs only, never values.
pub fn verify(file: &AdfFile, keys: Option<&LocalKeys>) -> Result<Vec<Finding>> {
    let mut out = Vec::new();
    let rows = to_crypto_rows(file.identity_rows()?);
    let did = meta(file, meta_keys::DID)?.unwrap_or_default();
    let public = verify_public_key(&rows, &did, &mut out);
    verify_envelopes(&rows, &mut out);
    verify_private_key_row(&rows, public, &mut out);
    warn_plain_secrets(&rows, &mut out);
    // With this installation's keys: open the envelopes in memory only.
    if let Some(keys) = keys {
        verify_sealed_rows(&rows, &did, keys, &mut out)?;
    }
    verify_attestations(file, &did, &mut out)?;
    Ok(out)
}

/// did:key ↔ public key row (IDN-03); returns the public key's bytes when the row holds one.
fn verify_public_key(rows: &[CryptoRow], did: &str, out: &mut Vec<Finding>) -> Option<[u8; 32]> {
    use Severity::Error;
    let public = match rows.iter().find(|r| r.purpose == PUBLIC_KEY_PURPOSE) {
        Some(r) if r.is_plain() => match ed25519_from_spki(&r.value) {
            Ok(k) => Some(k.to_bytes()),
            Err(e) => {
                out.push(finding(Error, "§8.2", format!("{PUBLIC_KEY_PURPOSE}: {e}")));
                None
            }
        },
        Some(r) => {
            out.push(finding(
                Error,
                "§8.2",
                format!(
                    "{PUBLIC_KEY_PURPOSE} is stored as {}; it must be plain",
                    r.encryption_algo
                ),
            ));
            None
        }
        None => None,
    };
    if !did.is_empty() {
        match verifying_key_from_did(did) {
            Err(e) => out.push(finding(Error, "§8.1", format!("adf_did: {e}"))),
            Ok(k) => {
                if let Some(p) = public
                    && p != k.to_bytes()
                {
                    out.push(finding(
                        Error,
                        "§8.1",
                        format!("adf_did {did} does not match {PUBLIC_KEY_PURPOSE}"),
                    ));
                }
            }
        }
    }
    public
}

/// Envelope descriptors and the layout of the rows sealed under them.
fn verify_envelopes(rows: &[CryptoRow], out: &mut Vec<Finding>) {
    use Severity::Error;
    let mut descriptors = [None, None];
    for (i, e) in EnvelopeName::ALL.into_iter().enumerate() {
        match descriptor_from_rows(rows, e) {
            Ok(d) => descriptors[i] = d,
            Err(err) => out.push(finding(
                Error,
                "§8.3",
                format!("{}: {err}", e.descriptor_purpose()),
            )),
        }
        let sealed: Vec<_> = rows
            .iter()
            .filter(|r| r.encryption_algo == e.encryption_algo())
            .collect();
        if descriptors[i].is_none() && !sealed.is_empty() {
            out.push(finding(
                Error,
                "§8.3",
                format!(
                    "{} row(s) are sealed in env:{} but the file has no {} descriptor: they cannot be opened",
                    sealed.len(),
                    e.as_str(),
                    e.descriptor_purpose()
                ),
            ));
        }
        for r in sealed {
            if r.value.len() < 12 + 16 || r.salt.is_some() || r.kdf_params.is_some() {
                out.push(finding(
                    Error,
                    "§8.3",
                    format!(
                        "identity row {} is not laid out as iv(12) ‖ ciphertext ‖ tag(16) with NULL salt and kdf_params",
                        r.purpose
                    ),
                ));
            }
        }
    }
    if let Some(d) = &descriptors[0]
        && d.has_password_slot()
    {
        out.push(finding(
            Error,
            "§8.3",
            "the identity envelope has a password slot; copying the file must never transfer its identity".into(),
        ));
    }
}

/// The private key row: sealed in env:identity, or (warned) plain and matching the public key.
fn verify_private_key_row(rows: &[CryptoRow], public: Option<[u8; 32]>, out: &mut Vec<Finding>) {
    use Severity::{Error, Warning};
    if let Some(r) = rows.iter().find(|r| r.purpose == PRIVATE_KEY_PURPOSE) {
        if r.is_plain() {
            out.push(finding(
                Warning,
                "§8.3",
                format!(
                    "{PRIVATE_KEY_PURPOSE} is stored unencrypted: run `adf identity status FILE` to seal it in the identity envelope"
                ),
            ));
            match ed25519_from_pkcs8(&r.value) {
                Ok(k) if public.is_some_and(|p| p != k.verifying_key().to_bytes()) => {
                    out.push(finding(
                        Error,
                        "§8.2",
                        format!("{PRIVATE_KEY_PURPOSE} does not match {PUBLIC_KEY_PURPOSE}"),
                    ))
                }
                Ok(_) => {}
                Err(e) => out.push(finding(
                    Error,
                    "§8.2",
                    format!("{PRIVATE_KEY_PURPOSE}: {e}"),
                )),
            }
        } else if r.encryption_algo != EnvelopeName::Identity.encryption_algo()
            && r.encryption_algo != adf_crypto::legacy::LEGACY_ALGO
        {
            out.push(finding(
                Error,
                "§8.2",
                format!(
                    "{PRIVATE_KEY_PURPOSE} is stored as {}; expected env:identity",
                    r.encryption_algo
                ),
            ));
        }
    }
}

/// Credentials stored unencrypted are a warning: copying the file would copy them.
fn warn_plain_secrets(rows: &[CryptoRow], out: &mut Vec<Finding>) {
    for r in rows {
        if r.is_plain() && EnvelopeName::for_purpose(&r.purpose) == Some(EnvelopeName::Credentials)
        {
            out.push(finding(
                Severity::Warning,
                "§8.3",
                format!(
                    "secret `{}` is stored unencrypted; seal it with `adf identity set FILE {}` (value on stdin) before sharing the file",
                    r.purpose, r.purpose
                ),
            ));
        }
    }
}

/// Opens the envelopes with this installation's keys, in memory only: the sealed private key
/// belongs to the DID and every sealed credential decrypts.
fn verify_sealed_rows(
    rows: &[CryptoRow],
    did: &str,
    keys: &LocalKeys,
    out: &mut Vec<Finding>,
) -> Result<()> {
    use Severity::Error;
    let unlock = provision::unlock_file(rows, &keys.unlock_keys(), None, &mut rand::rng())?;
    if unlock.deks.identity.is_some() {
        match provision::agent_signing_key(rows, &unlock.deks, None) {
            Err(e) => out.push(finding(Error, "§8.2", format!("the agent key: {e}"))),
            Ok(k) if !did.is_empty() && adf_crypto::did_from_public(&k.verifying_key()) != did => {
                out.push(finding(
                    Error,
                    "§8.1",
                    format!("the sealed private key does not belong to adf_did {did}"),
                ));
            }
            Ok(_) => {}
        }
    }
    if unlock.deks.credentials.is_some() {
        for r in rows
            .iter()
            .filter(|r| r.encryption_algo == EnvelopeName::Credentials.encryption_algo())
        {
            if provision::open_row(r, &unlock.deks, None).is_err() {
                out.push(finding(
                    Error,
                    "§8.3",
                    format!(
                        "sealed credential `{}` does not decrypt with the credentials envelope's key",
                        r.purpose
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Attestations (IDN-35): signatures always; subject and issuer for the reserved roles.
fn verify_attestations(file: &AdfFile, did: &str, out: &mut Vec<Finding>) -> Result<()> {
    use Severity::{Error, Warning};
    let owner_did = meta(file, meta_keys::OWNER_DID)?.unwrap_or_default();
    let runtime_did = meta(file, meta_keys::RUNTIME_DID)?.unwrap_or_default();
    let now = chrono::Utc::now();
    for row in file.attestations()? {
        let a = from_store_attestation(&row);
        let label = format!("attestation #{} ({})", row.id, row.role);
        if let Err(e) = a.verify_signature() {
            out.push(finding(Error, "§3.3", format!("{label}: {e}")));
            continue;
        }
        if a.is_expired(now) {
            out.push(finding(Warning, "§3.3", format!("{label} has expired")));
        }
        let about_agent = matches!(a.role.as_str(), "owner" | "operator" | "clone");
        if about_agent && !did.is_empty() && a.subject != did {
            out.push(finding(
                Warning,
                "§3.3",
                format!("{label} is about {}, not this agent ({did})", a.subject),
            ));
        }
        let expected_issuer = match a.role.as_str() {
            "owner" => Some(&owner_did),
            "operator" => Some(&runtime_did),
            _ => None,
        };
        if let Some(issuer) = expected_issuer
            && !issuer.is_empty()
            && a.issuer != *issuer
        {
            out.push(finding(
                Warning,
                "§3.3",
                format!("{label} is issued by {}, not {issuer}", a.issuer),
            ));
        }
    }
    Ok(())
}
