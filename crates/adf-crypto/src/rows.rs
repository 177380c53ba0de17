//! Plain row structs mirroring the `adf_identity` and `adf_attestations` columns (§3.3), so a
//! storage crate can persist what this crate computes without either crate knowing the other.

/// One `adf_identity` row.
#[derive(Clone, PartialEq, Eq)]
pub struct IdentityRow {
    /// `purpose` (TEXT PK).
    pub purpose: String,
    /// `value` (BLOB): sealed bytes, or plain bytes when `encryption_algo = 'plain'`.
    pub value: Vec<u8>,
    /// `plain`, `env:identity`, `env:credentials` or legacy `aes-256-gcm`.
    pub encryption_algo: String,
    /// Legacy rows only: the 12-byte IV.
    pub salt: Option<Vec<u8>>,
    /// Legacy rows only: KDF params JSON.
    pub kdf_params: Option<String>,
    /// May agent code read it.
    pub code_access: bool,
}

impl IdentityRow {
    /// A plain (unencrypted) row.
    pub fn plain(purpose: impl Into<String>, value: Vec<u8>) -> Self {
        IdentityRow {
            purpose: purpose.into(),
            value,
            encryption_algo: "plain".into(),
            salt: None,
            kdf_params: None,
            code_access: false,
        }
    }

    /// True for `plain` rows.
    pub fn is_plain(&self) -> bool {
        self.encryption_algo == "plain"
    }
}

impl std::fmt::Debug for IdentityRow {
    // Values may be plaintext secrets (a `plain` provider key) — show only their length.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityRow")
            .field("purpose", &self.purpose)
            .field("value", &format_args!("<{} bytes>", self.value.len()))
            .field("encryption_algo", &self.encryption_algo)
            .field("salt", &self.salt.as_ref().map(Vec::len))
            .field("kdf_params", &self.kdf_params)
            .field("code_access", &self.code_access)
            .finish()
    }
}

/// One `adf_attestations` row (without the autoincrement `id`, which storage assigns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttestationRecord {
    /// Signer DID.
    pub issuer: String,
    /// DID the statement is about.
    pub subject: String,
    /// Role.
    pub role: String,
    /// ISO-8601.
    pub issued_at: String,
    /// Optional ISO-8601.
    pub expires_at: Option<String>,
    /// Optional scope (`clone`: prior DID).
    pub scope: Option<String>,
    /// `ed25519:<base64>`.
    pub signature: String,
    /// `JSON.stringify(attestation)` incl. signature, insertion order — what the reference reads back.
    pub raw_json: String,
}

/// Names of the `adf_meta` keys provisioning and lifecycle flows set.
pub mod meta_keys {
    /// Agent DID.
    pub const DID: &str = "adf_did";
    /// JSON array of prior DIDs.
    pub const DID_HISTORY: &str = "adf_did_history";
    /// Owner DID.
    pub const OWNER_DID: &str = "adf_owner_did";
    /// Runtime DID.
    pub const RUNTIME_DID: &str = "adf_runtime_did";
}

/// Append `old_did` to a `adf_did_history` JSON array (oldest first), skipping empty and
/// duplicate DIDs as the reference does. A missing or unreadable history starts fresh.
pub fn append_did_history(history_json: Option<&str>, old_did: &str) -> String {
    let mut list: Vec<String> = history_json
        .and_then(|h| serde_json::from_str(h).ok())
        .unwrap_or_default();
    if !old_did.is_empty() && !list.iter().any(|d| d == old_did) {
        list.push(old_did.to_string());
    }
    serde_json::Value::from(list).to_string()
}
