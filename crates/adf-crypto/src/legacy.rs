//! Read support for the legacy whole-file password format (Appendix A.9).
//!
//! `key = PBKDF2-HMAC-SHA512(password, hex-decoded crypto:kdf:salt, 100000, 32)`; every protected
//! row has `encryption_algo = 'aes-256-gcm'`, `value = ct ‖ tag` and its 12-byte IV in the `salt`
//! column. Envelope descriptors and `env:*` rows are never part of it.

use serde::Deserialize;
use sha2::Sha512;
use zeroize::Zeroizing;

use crate::error::{Error, Result};
use crate::keys::aes_gcm_decrypt;
use crate::rows::IdentityRow;

/// `encryption_algo` of legacy password rows.
pub const LEGACY_ALGO: &str = "aes-256-gcm";
/// Purpose of the hex salt row.
pub const KDF_SALT_PURPOSE: &str = "crypto:kdf:salt";
/// Purpose of the params row.
pub const KDF_PARAMS_PURPOSE: &str = "crypto:kdf:params";

/// `{"iterations":100000,"digest":"sha512","keyLength":32}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LegacyKdfParams {
    /// PBKDF2 rounds.
    pub iterations: u32,
    /// Only `sha512` is defined.
    pub digest: String,
    /// Only 32 is defined.
    pub key_length: usize,
}

impl Default for LegacyKdfParams {
    fn default() -> Self {
        LegacyKdfParams {
            iterations: 100_000,
            digest: "sha512".into(),
            key_length: 32,
        }
    }
}

/// The derived legacy key. Zeroized on drop; Debug redacted.
pub struct LegacyKey(Zeroizing<[u8; 32]>);

impl std::fmt::Debug for LegacyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LegacyKey(<redacted>)")
    }
}

impl LegacyKey {
    /// Raw key bytes (never persist).
    pub fn expose_secret(&self) -> &[u8; 32] {
        &self.0
    }
}

/// "Password protected" (prompt on open) ⇔ some row's algo is neither `plain` nor `env:*`.
pub fn is_password_protected(rows: &[IdentityRow]) -> bool {
    rows.iter()
        .any(|r| r.encryption_algo != "plain" && !r.encryption_algo.starts_with("env:"))
}

/// Derive the legacy key from the password and the hex salt text.
pub fn derive_legacy_key(
    password: &str,
    salt_hex: &str,
    params: &LegacyKdfParams,
) -> Result<LegacyKey> {
    if params.digest != "sha512" || params.key_length != 32 {
        return Err(Error::Kdf(format!(
            "legacy KDF digest `{}` / length {} unsupported",
            params.digest, params.key_length
        )));
    }
    // Bound the work an attacker-supplied file can make us do.
    if params.iterations == 0 || params.iterations > 10_000_000 {
        return Err(Error::Kdf(
            "legacy PBKDF2 iteration count out of range".into(),
        ));
    }
    let salt = hex_decode(salt_hex.trim())
        .ok_or_else(|| Error::Kdf("crypto:kdf:salt is not hex".into()))?;
    let mut key = Zeroizing::new([0u8; 32]);
    pbkdf2::pbkdf2_hmac::<Sha512>(
        password.as_bytes(),
        &salt,
        params.iterations,
        key.as_mut_slice(),
    );
    Ok(LegacyKey(key))
}

/// Decrypt one legacy row.
pub fn open_legacy_row(key: &LegacyKey, row: &IdentityRow) -> Result<Zeroizing<Vec<u8>>> {
    let bad = |reason: &str| Error::IdentityRow {
        purpose: row.purpose.clone(),
        reason: reason.into(),
    };
    if row.encryption_algo != LEGACY_ALGO {
        return Err(bad("not a legacy aes-256-gcm row"));
    }
    let iv: [u8; 12] = row
        .salt
        .as_deref()
        .and_then(|s| <[u8; 12]>::try_from(s).ok())
        .ok_or_else(|| bad("salt column does not hold a 12-byte IV"))?;
    aes_gcm_decrypt(
        &key.0,
        &iv,
        &row.value,
        &format!("legacy row `{}`", row.purpose),
    )
}

/// Derive the key from the file's salt/params rows and check it by test-decrypting a protected
/// row. Wrong password ⇒ [`Error::WrongPassword`].
pub fn unlock_legacy(rows: &[IdentityRow], password: &str) -> Result<LegacyKey> {
    let find = |p: &str| rows.iter().find(|r| r.purpose == p);
    let salt_row = find(KDF_SALT_PURPOSE).ok_or_else(|| Error::IdentityRow {
        purpose: KDF_SALT_PURPOSE.into(),
        reason: "missing".into(),
    })?;
    let salt = std::str::from_utf8(&salt_row.value).map_err(|_| Error::IdentityRow {
        purpose: KDF_SALT_PURPOSE.into(),
        reason: "not UTF-8 hex".into(),
    })?;
    let params = match find(KDF_PARAMS_PURPOSE) {
        Some(r) => serde_json::from_slice(&r.value).map_err(|_| Error::IdentityRow {
            purpose: KDF_PARAMS_PURPOSE.into(),
            reason: "not the expected JSON".into(),
        })?,
        None => LegacyKdfParams::default(),
    };
    let key = derive_legacy_key(password, salt, &params)?;
    let probe = rows
        .iter()
        .find(|r| r.encryption_algo == LEGACY_ALGO && r.salt.is_some())
        .ok_or_else(|| Error::IdentityRow {
            purpose: KDF_SALT_PURPOSE.into(),
            reason: "no legacy-encrypted row to check the password against".into(),
        })?;
    open_legacy_row(&key, probe).map_err(|_| Error::WrongPassword)?;
    Ok(key)
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}
