//! ADF identity cryptography, byte-compatible with the reference runtime (v0.4.2).
//!
//! Pure functions and types over bytes and JSON — no files, network or environment. Randomness
//! comes from a caller-supplied CSPRNG (`rand::rng()` in production, a seeded one in tests), and
//! the deterministic `*_with` variants take ephemeral keys and IVs directly.
//!
//! Principal pieces:
//! - [`did`]: Ed25519 `did:key` encode/decode ([`did_from_public`], [`verifying_key_from_did`]).
//! - [`keys`]: PKCS#8/SPKI DER forms, `ed25519:<b64>` signatures ([`sign`], [`verify`]),
//!   Ed25519→X25519 conversion.
//! - [`canonical`]: the reference's canonical JSON ([`canonicalize`]), not RFC 8785.
//! - [`envelope`]: [`Dek`], [`EnvelopeDescriptor`] with owner/runtime key slots and scrypt
//!   password slots, sealed values, [`EnvelopeState`].
//! - [`legacy`]: read support for the PBKDF2 whole-file password format.
//! - [`owner`]: [`OwnerIdentity`] from a BIP-39 mnemonic, [`RuntimeIdentity`], [`PublicIdentity`].
//! - [`attestation`]: [`Attestation`] issue/verify/`check_addable`.
//! - [`card`]: agent-card signing whitelist ([`sign_card`], [`verify_card`]).
//! - [`alf`]: ALF message egress/ingress with level-2 encryption ([`alf::egress`], [`alf::ingress`]).
//! - [`provision`]: lifecycle flows as data ([`provision::provision`], [`provision::unlock_file`],
//!   [`provision::claim`], [`provision::rotate`]) producing [`IdentityRow`]s and attestations
//!   for the storage crate to persist.
//! - [`error`]: the one [`Error`] enum.

pub mod alf;
pub mod attestation;
pub mod canonical;
pub mod card;
pub mod did;
pub mod envelope;
pub mod error;
pub mod keys;
pub mod legacy;
pub mod owner;
pub mod provision;
pub mod rows;

pub use attestation::Attestation;
pub use canonical::{canonical_bytes, canonicalize};
pub use card::{sign_card, verify_card};
pub use did::{did_from_public, public_bytes_from_did, verifying_key_from_did};
pub use envelope::{Dek, EnvelopeDescriptor, EnvelopeName, EnvelopeState};
pub use error::{Error, Result};
pub use keys::{sign, verify};
pub use owner::{OwnerIdentity, PublicIdentity, RuntimeIdentity};
pub use rows::{AttestationRecord, IdentityRow};

// Key types callers need to hold.
pub use ed25519_dalek::{SigningKey, VerifyingKey};
pub use x25519_dalek::{PublicKey as X25519PublicKey, StaticSecret as X25519Secret};
