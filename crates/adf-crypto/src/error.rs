//! The one error type of the crate.
//!
//! Messages name what failed and why, and carry only public data (DIDs, field names, purposes,
//! algorithm labels). Secret bytes, passwords and mnemonic words never reach an error message.

/// Everything that can go wrong in `adf-crypto`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A DID is not a well-formed Ed25519 `did:key`.
    #[error("invalid did:key: {0}")]
    InvalidDid(String),
    /// Key bytes have the wrong length, DER prefix or curve point.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// A signature string is not `ed25519:<base64 of 64 bytes>`.
    #[error("malformed signature: {0}")]
    MalformedSignature(String),
    /// A signature string names an algorithm other than `ed25519`.
    #[error("unsupported signature algorithm `{0}`")]
    UnsupportedAlgorithm(String),
    /// A well-formed signature does not verify over the expected bytes.
    #[error("signature does not verify ({0})")]
    BadSignature(String),
    /// Input that should be base64 is not.
    #[error("invalid base64 in {0}")]
    Base64(String),
    /// Input that should be JSON (or have a given JSON shape) is not.
    #[error("invalid JSON: {0}")]
    Json(String),
    /// AES-GCM authentication failed or the sealed value is too short.
    #[error("decryption failed: {0}")]
    Decrypt(String),
    /// No slot of an envelope opens with the keys or password offered.
    #[error("no slot of the `{0}` envelope opens with the keys offered")]
    NoSlotOpens(String),
    /// An envelope descriptor row does not have the `{"v":1,"slots":[…]}` shape.
    #[error("invalid envelope descriptor: {0}")]
    InvalidDescriptor(String),
    /// Copying a file must never transfer its identity, so `identity` never gets a password slot.
    #[error("the identity envelope never gets a password slot")]
    PasswordSlotOnIdentity,
    /// A password slot names a KDF other than scrypt, or its parameters are unusable.
    #[error("unsupported or invalid KDF: {0}")]
    Kdf(String),
    /// A password (share password or legacy keystore password) is wrong.
    #[error("wrong password")]
    WrongPassword,
    /// A BIP-39 mnemonic is not valid (the words themselves are never echoed).
    #[error("invalid mnemonic: {0}")]
    InvalidMnemonic(String),
    /// An attestation is malformed, expired, about someone else, or uses a reserved role.
    #[error("attestation rejected: {0}")]
    Attestation(String),
    /// An agent card is malformed or its signature does not verify.
    #[error("agent card rejected: {0}")]
    Card(String),
    /// An ALF message was refused; `status` is the HTTP status the mesh answers with.
    #[error("ALF message rejected ({status}): {reason}")]
    Alf {
        /// 400 malformed / unsupported, 403 not authentic / not for us, 500 missing local key.
        status: u16,
        /// Human-readable reason, safe to return to the sender.
        reason: String,
    },
    /// A keystore document (owner/runtime identity JSON) is malformed.
    #[error("invalid keystore document: {0}")]
    Keystore(String),
    /// An identity row cannot be interpreted (unknown algorithm, missing legacy IV, ...).
    #[error("identity row `{purpose}`: {reason}")]
    IdentityRow {
        /// The row's purpose (public).
        purpose: String,
        /// Why it cannot be used.
        reason: String,
    },
}

impl Error {
    pub(crate) fn alf(status: u16, reason: impl Into<String>) -> Self {
        Error::Alf {
            status,
            reason: reason.into(),
        }
    }
}

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
