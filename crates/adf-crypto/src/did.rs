//! Ed25519 `did:key` (multibase base58btc `z`, multicodec `0xed01`), Appendix A.3.

use ed25519_dalek::VerifyingKey;

use crate::error::{Error, Result};

/// Every ADF DID starts with this (the `z` is the multibase base58btc tag).
pub const DID_KEY_PREFIX: &str = "did:key:z";
const MULTICODEC_ED25519_PUB: [u8; 2] = [0xed, 0x01];

/// `did:key:z` + base58btc(`0xed 0x01` ‖ raw public key). Pure byte encoding: any 32 bytes encode.
pub fn did_from_public_bytes(raw: &[u8; 32]) -> String {
    let mut buf = Vec::with_capacity(34);
    buf.extend_from_slice(&MULTICODEC_ED25519_PUB);
    buf.extend_from_slice(raw);
    format!("{DID_KEY_PREFIX}{}", bs58::encode(buf).into_string())
}

/// The DID of an Ed25519 verifying key.
pub fn did_from_public(key: &VerifyingKey) -> String {
    did_from_public_bytes(key.as_bytes())
}

/// Decode a DID to its 32 raw public-key bytes, without checking that they form a curve point
/// (the reference's `didToPublicKey` behaves the same way).
pub fn public_bytes_from_did(did: &str) -> Result<[u8; 32]> {
    let body = did
        .strip_prefix(DID_KEY_PREFIX)
        .ok_or_else(|| Error::InvalidDid("must start with `did:key:z`".into()))?;
    let bytes = bs58::decode(body)
        .into_vec()
        .map_err(|_| Error::InvalidDid("not base58btc".into()))?;
    if bytes.len() != 34 {
        return Err(Error::InvalidDid(format!(
            "decodes to {} bytes, expected 34",
            bytes.len()
        )));
    }
    if bytes[..2] != MULTICODEC_ED25519_PUB {
        return Err(Error::InvalidDid(format!(
            "multicodec 0x{:02x}{:02x} is not ed25519-pub (0xed01)",
            bytes[0], bytes[1]
        )));
    }
    let mut raw = [0u8; 32];
    raw.copy_from_slice(&bytes[2..]);
    Ok(raw)
}

/// Decode a DID to a usable verifying key (rejects bytes that are not a curve point).
pub fn verifying_key_from_did(did: &str) -> Result<VerifyingKey> {
    let raw = public_bytes_from_did(did)?;
    VerifyingKey::from_bytes(&raw)
        .map_err(|_| Error::InvalidDid("public key is not an Ed25519 curve point".into()))
}

/// True when `did` decodes as an Ed25519 did:key.
pub fn is_valid_did_key(did: &str) -> bool {
    public_bytes_from_did(did).is_ok()
}

/// Card `public_key`: the DID without `did:key:` (i.e. the `z6Mk…` multibase string).
pub fn multibase_of_did(did: &str) -> Option<&str> {
    did.strip_prefix("did:key:")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn idn_03_prefix_is_z6mk() {
        let did = did_from_public_bytes(&[7u8; 32]);
        assert!(did.starts_with("did:key:z6Mk"));
        assert_eq!(public_bytes_from_did(&did).unwrap(), [7u8; 32]);
    }

    #[test]
    fn idn_03_rejects_garbage() {
        for bad in [
            "",
            "did:key:",
            "did:key:z",
            "did:key:z0",
            "did:web:x",
            "did:key:zzzz",
        ] {
            assert!(public_bytes_from_did(bad).is_err(), "{bad}");
        }
    }
}
