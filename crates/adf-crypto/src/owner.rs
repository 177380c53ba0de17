//! Owner identity (from a BIP-39 mnemonic) and runtime identity (random per installation).
//!
//! Both are an Ed25519 signing key (whose did:key names the party) plus an X25519 encryption key
//! (the recipient of envelope key slots). The owner's keys derive from the mnemonic exactly as the
//! reference's `mnemonic-identity.ts` does: BIP-39 seed of the trimmed, lower-cased phrase with an
//! empty passphrase, then SLIP-0010 Ed25519 at `m/44'/0'/0'` (signing seed) and `m/44'/0'/1'`
//! (used *directly*, unclamped, as the X25519 scalar).

use ed25519_dalek::{SigningKey, VerifyingKey};
use hmac::{Hmac, KeyInit as _, Mac as _};
use rand::CryptoRng;
use serde::{Deserialize, Serialize};
use sha2::Sha512;
use x25519_dalek::{PublicKey as XPublic, StaticSecret};
use zeroize::Zeroizing;

use crate::did::did_from_public;
use crate::error::{Error, Result};
use crate::keys::{
    b64, b64_array, b64_decode, ed25519_from_pkcs8, ed25519_to_pkcs8, random_bytes,
    x25519_from_pkcs8, x25519_to_pkcs8,
};

/// SLIP-0010 path of the owner's signing key.
pub const OWNER_SIGNING_PATH: [u32; 3] = [44, 0, 0];
/// SLIP-0010 path of the owner's encryption key.
pub const OWNER_ENCRYPTION_PATH: [u32; 3] = [44, 0, 1];

/// The public half of a party that can be a key-slot recipient and an attestation issuer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicIdentity {
    /// did:key of the signing key.
    pub did: String,
    /// Raw X25519 public key (32 bytes), base64 in JSON like the reference's `ownerEncPublicKey`.
    #[serde(with = "b64_32")]
    pub encryption_public_key: [u8; 32],
}

impl PublicIdentity {
    /// The X25519 public key as a dalek type.
    pub fn x25519(&self) -> XPublic {
        XPublic::from(self.encryption_public_key)
    }
}

/// The owner's public identity (what an installation without the mnemonic still knows).
pub type OwnerPublic = PublicIdentity;
/// The runtime's public identity.
pub type RuntimePublic = PublicIdentity;

/// Secret keys of a party. Zeroized on drop (dalek types do it themselves); Debug shows the DID only.
pub struct IdentityKeys {
    signing: SigningKey,
    encryption: StaticSecret,
}

impl std::fmt::Debug for IdentityKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityKeys")
            .field("did", &self.did())
            .field("secrets", &"<redacted>")
            .finish()
    }
}

impl IdentityKeys {
    /// Assemble from existing keys.
    pub fn from_keys(signing: SigningKey, encryption: StaticSecret) -> Self {
        IdentityKeys {
            signing,
            encryption,
        }
    }
    /// did:key of the signing key.
    pub fn did(&self) -> String {
        did_from_public(&self.signing.verifying_key())
    }
    /// Ed25519 signing key (attestations, cards, messages).
    pub fn signing_key(&self) -> &SigningKey {
        &self.signing
    }
    /// Ed25519 public key.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.signing.verifying_key()
    }
    /// X25519 secret that opens key slots addressed to this party.
    pub fn encryption_secret(&self) -> &StaticSecret {
        &self.encryption
    }
    /// X25519 public key.
    pub fn encryption_public(&self) -> XPublic {
        XPublic::from(&self.encryption)
    }
    /// The public half.
    pub fn public(&self) -> PublicIdentity {
        PublicIdentity {
            did: self.did(),
            encryption_public_key: self.encryption_public().to_bytes(),
        }
    }

    /// Keystore JSON (secret!) for a runtime's own settings file; the caller does the IO.
    ///
    /// `{"kind":…,"v":1,"did":…,"signing_private_key_pkcs8":b64,"encryption_private_key_pkcs8":b64,
    /// "encryption_public_key":b64}` — keys in the same DER forms as `adf_identity`.
    pub fn to_keystore_json(&self, kind: KeystoreKind) -> Zeroizing<String> {
        let sk = ed25519_to_pkcs8(&self.signing);
        let ek = x25519_to_pkcs8(&self.encryption);
        let doc = serde_json::json!({
            "kind": kind.as_str(),
            "v": 1,
            "did": self.did(),
            "signing_private_key_pkcs8": b64(&sk),
            "encryption_private_key_pkcs8": b64(&ek),
            "encryption_public_key": b64(self.encryption_public().as_bytes()),
        });
        Zeroizing::new(doc.to_string())
    }

    /// Parse [`Self::to_keystore_json`] output, checking kind and that the stored DID and public
    /// key agree with the secrets.
    pub fn from_keystore_json(json: &str, kind: KeystoreKind) -> Result<Self> {
        let v: serde_json::Value =
            serde_json::from_str(json).map_err(|_| Error::Keystore("not JSON".into()))?;
        let field = |name: &str| {
            v.get(name)
                .and_then(|x| x.as_str())
                .ok_or_else(|| Error::Keystore(format!("missing `{name}`")))
        };
        if field("kind")? != kind.as_str() {
            return Err(Error::Keystore(format!(
                "expected kind `{}`",
                kind.as_str()
            )));
        }
        let sk = Zeroizing::new(b64_decode(
            field("signing_private_key_pkcs8")?,
            "signing_private_key_pkcs8",
        )?);
        let ek = Zeroizing::new(b64_decode(
            field("encryption_private_key_pkcs8")?,
            "encryption_private_key_pkcs8",
        )?);
        let keys = IdentityKeys {
            signing: ed25519_from_pkcs8(&sk)?,
            encryption: x25519_from_pkcs8(&ek)?,
        };
        if let Ok(did) = field("did")
            && did != keys.did()
        {
            return Err(Error::Keystore(
                "`did` does not match the signing key".into(),
            ));
        }
        if let Ok(p) = field("encryption_public_key")
            && b64_array::<32>(p, "encryption_public_key")? != keys.encryption_public().to_bytes()
        {
            return Err(Error::Keystore(
                "`encryption_public_key` does not match the encryption key".into(),
            ));
        }
        Ok(keys)
    }
}

/// Which party a keystore document belongs to (guards against loading one as the other).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeystoreKind {
    /// Owner keys (derived from the mnemonic).
    Owner,
    /// Runtime (installation) keys.
    Runtime,
}

impl KeystoreKind {
    fn as_str(self) -> &'static str {
        match self {
            KeystoreKind::Owner => "adf-owner-identity",
            KeystoreKind::Runtime => "adf-runtime-identity",
        }
    }
}

/// The owner: keys derived from a BIP-39 mnemonic.
#[derive(Debug)]
pub struct OwnerIdentity {
    keys: IdentityKeys,
}

impl OwnerIdentity {
    /// Derive from a mnemonic (trimmed and lower-cased first, English list, empty passphrase).
    pub fn from_mnemonic(mnemonic: &str) -> Result<Self> {
        let seed = mnemonic_to_seed(mnemonic)?;
        Self::from_bip39_seed(&seed)
    }

    /// Derive from a 64-byte BIP-39 seed.
    pub fn from_bip39_seed(seed: &[u8; 64]) -> Result<Self> {
        let (sign_seed, _) = slip10_derive_ed25519(seed, &OWNER_SIGNING_PATH)?;
        let (enc_scalar, _) = slip10_derive_ed25519(seed, &OWNER_ENCRYPTION_PATH)?;
        Ok(OwnerIdentity {
            keys: IdentityKeys {
                signing: SigningKey::from_bytes(&sign_seed),
                encryption: StaticSecret::from(*enc_scalar),
            },
        })
    }

    /// A fresh 12-word English mnemonic. Show it to the user once; never store it in the file.
    pub fn generate_mnemonic<R: CryptoRng + ?Sized>(rng: &mut R) -> Result<Zeroizing<String>> {
        let entropy = Zeroizing::new(random_bytes::<16, R>(rng));
        let m = bip39::Mnemonic::from_entropy(entropy.as_slice())
            .map_err(|_| Error::InvalidMnemonic("entropy rejected".into()))?;
        Ok(Zeroizing::new(m.to_string()))
    }
}

/// What the owner and the runtime identity share: their keys and how they are kept.
macro_rules! identity_keys_access {
    ($identity:ident, $kind:expr, $public:ty, $who:literal) => {
        impl $identity {
            /// Rebuild from a keystore document written by [`Self::to_keystore_json`].
            pub fn from_keystore_json(json: &str) -> Result<Self> {
                Ok($identity {
                    keys: IdentityKeys::from_keystore_json(json, $kind)?,
                })
            }

            /// Keystore JSON (secret).
            pub fn to_keystore_json(&self) -> Zeroizing<String> {
                self.keys.to_keystore_json($kind)
            }

            /// The key material.
            pub fn keys(&self) -> &IdentityKeys {
                &self.keys
            }

            #[doc = concat!($who, " DID.")]
            pub fn did(&self) -> String {
                self.keys.did()
            }

            /// Public half (DID + encryption public key).
            pub fn public(&self) -> $public {
                self.keys.public()
            }
        }
    };
}

identity_keys_access!(OwnerIdentity, KeystoreKind::Owner, OwnerPublic, "Owner");

/// The runtime (one installation): random Ed25519 + independent random X25519 key.
#[derive(Debug)]
pub struct RuntimeIdentity {
    keys: IdentityKeys,
}

impl RuntimeIdentity {
    /// Generate with `rand::rng()`.
    pub fn generate() -> Self {
        Self::generate_with(&mut rand::rng())
    }
    /// Generate from a caller-supplied CSPRNG (tests pass a seeded one).
    pub fn generate_with<R: CryptoRng + ?Sized>(rng: &mut R) -> Self {
        let seed = Zeroizing::new(random_bytes::<32, R>(rng));
        let enc = Zeroizing::new(random_bytes::<32, R>(rng));
        RuntimeIdentity {
            keys: IdentityKeys {
                signing: SigningKey::from_bytes(&seed),
                encryption: StaticSecret::from(*enc),
            },
        }
    }
    /// Assemble from existing keys (e.g. PKCS#8 read from settings).
    pub fn from_keys(signing: SigningKey, encryption: StaticSecret) -> Self {
        RuntimeIdentity {
            keys: IdentityKeys::from_keys(signing, encryption),
        }
    }
}

identity_keys_access!(
    RuntimeIdentity,
    KeystoreKind::Runtime,
    RuntimePublic,
    "Runtime"
);

/// Validate a mnemonic as the reference does (normalized, English word list, checksum).
pub fn validate_mnemonic(mnemonic: &str) -> Result<()> {
    parse_mnemonic(mnemonic).map(|_| ())
}

fn parse_mnemonic(mnemonic: &str) -> Result<bip39::Mnemonic> {
    let norm = Zeroizing::new(mnemonic.trim().to_lowercase());
    bip39::Mnemonic::parse_in(bip39::Language::English, norm.as_str()).map_err(|e| {
        // bip39's errors can quote a word; report only the category.
        let why = match e {
            bip39::Error::BadWordCount(n) => format!("{n} words is not a valid length"),
            bip39::Error::UnknownWord(i) => format!("word #{} is not in the list", i + 1),
            bip39::Error::InvalidChecksum => "checksum mismatch".into(),
            _ => "not a BIP-39 phrase".into(),
        };
        Error::InvalidMnemonic(why)
    })
}

/// BIP-39 seed (PBKDF2-HMAC-SHA512, 2048 rounds, empty passphrase) of the normalized phrase.
pub fn mnemonic_to_seed(mnemonic: &str) -> Result<Zeroizing<[u8; 64]>> {
    let m = parse_mnemonic(mnemonic)?;
    Ok(Zeroizing::new(m.to_seed("")))
}

/// SLIP-0010 Ed25519 derivation (hardened indices only); returns (key, chain code).
#[allow(clippy::type_complexity)]
pub fn slip10_derive_ed25519(
    seed: &[u8],
    path: &[u32],
) -> Result<(Zeroizing<[u8; 32]>, Zeroizing<[u8; 32]>)> {
    let split = |i: &[u8]| {
        let mut k = Zeroizing::new([0u8; 32]);
        let mut c = Zeroizing::new([0u8; 32]);
        k.copy_from_slice(&i[..32]);
        c.copy_from_slice(&i[32..64]);
        (k, c)
    };
    let hmac = |key: &[u8], parts: &[&[u8]]| {
        // HMAC takes keys of any length; the error arm exists only for the trait's sake.
        let mut mac = Hmac::<Sha512>::new_from_slice(key)
            .map_err(|_| Error::InvalidKey("HMAC key".into()))?;
        for p in parts {
            mac.update(p);
        }
        Ok::<_, Error>(Zeroizing::new(mac.finalize().into_bytes().to_vec()))
    };
    let (mut key, mut chain) = split(&hmac(b"ed25519 seed", &[seed])?);
    for &index in path {
        let i = (index | 0x8000_0000).to_be_bytes();
        let out = hmac(chain.as_slice(), &[&[0u8], key.as_slice(), &i])?;
        (key, chain) = split(&out);
    }
    Ok((key, chain))
}

mod b64_32 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(v: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::keys::b64(v))
    }
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let s = String::deserialize(d)?;
        crate::keys::b64_array::<32>(&s, "encryption_public_key").map_err(serde::de::Error::custom)
    }
}
