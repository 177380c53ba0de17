//! The WebSocket authentication handshake (missing-tables "WebSocket authentication
//! handshake", MSG-51): the client's signed `did + nonce + timestamp` frame, the 30 s window,
//! and the server's answer signed over `server_did + nonce + timestamp`.

use serde_json::{Value, json};

/// How far a client's timestamp may be from now, either way.
pub const WINDOW_MS: i64 = 30_000;

/// Close code of a failed handshake.
pub const CLOSE_AUTH_FAILED: u16 = 4001;
/// Close code of a frame that is not what the connection carries.
pub const CLOSE_INVALID_FRAME: u16 = 4003;

/// A client's auth frame, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAuth {
    /// The client's DID, proven by its signature (or only claimed, when `verified` is false).
    pub did: String,
    /// The client's nonce, echoed in the answer.
    pub nonce: String,
    /// The client's timestamp (epoch ms), part of the server's signed bytes.
    pub timestamp: i64,
    /// Whether the signature was checked and held.
    pub verified: bool,
}

/// Whether `frame` is an auth frame at all (`{"type": "auth", …}`).
pub fn is_auth_frame(frame: &Value) -> bool {
    frame.get("type").and_then(Value::as_str) == Some("auth")
}

/// Checks a client's auth frame at `now_ms`: shape, the 30 s window, the DID and the
/// signature over `did + nonce + String(timestamp)`.
pub fn verify_client(frame: &Value, now_ms: i64) -> Result<ClientAuth, String> {
    let text = |key: &str| {
        frame
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("the auth frame has no {key}"))
    };
    if !is_auth_frame(frame) {
        return Err("the first frame must be {\"type\": \"auth\", …}".into());
    }
    let did = text("did")?;
    let nonce = text("nonce")?;
    let signature = text("signature")?;
    let timestamp = frame
        .get("timestamp")
        .and_then(Value::as_i64)
        .ok_or("the auth frame's timestamp must be epoch milliseconds")?;
    if (now_ms - timestamp).abs() > WINDOW_MS {
        return Err("the auth timestamp is outside the 30 s window".into());
    }
    let key = adf_crypto::verifying_key_from_did(did)
        .map_err(|e| format!("the DID cannot be read: {e}"))?;
    let signed = format!("{did}{nonce}{timestamp}");
    adf_crypto::verify(&key, signed.as_bytes(), signature, "auth frame")
        .map_err(|_| "the auth signature does not verify".to_owned())?;
    Ok(ClientAuth {
        did: did.to_owned(),
        nonce: nonce.to_owned(),
        timestamp,
        verified: true,
    })
}

/// Reads an auth frame without checking it (`allow_unsigned`: stamped unverified).
pub fn unverified_client(frame: &Value) -> Option<ClientAuth> {
    Some(ClientAuth {
        did: frame.get("did")?.as_str()?.to_owned(),
        nonce: frame
            .get("nonce")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        timestamp: frame.get("timestamp").and_then(Value::as_i64).unwrap_or(0),
        verified: false,
    })
}

/// The bytes a server signs for `auth`: `server_did + nonce + String(timestamp)`.
pub fn server_signed_bytes(server_did: &str, auth: &ClientAuth) -> Vec<u8> {
    format!("{server_did}{}{}", auth.nonce, auth.timestamp).into_bytes()
}

/// The success answer; with the server's identity when it has one (`(did, signature)`).
pub fn success(auth: &ClientAuth, server: Option<(String, String)>) -> Value {
    match server {
        Some((did, signature)) => json!({
            "type": "auth_result",
            "success": true,
            "server_did": did,
            "nonce": auth.nonce,
            "signature": signature,
        }),
        None => json!({ "type": "auth_result", "success": true }),
    }
}

/// The failure answer sent before closing with [`CLOSE_AUTH_FAILED`].
pub fn failure(error: &str) -> Value {
    json!({ "type": "auth_result", "success": false, "error": error })
}

/// A client's auth frame signed with `key` at `timestamp` (what an outbound connection sends).
pub fn client_frame(key: &adf_crypto::SigningKey, nonce: &str, timestamp: i64) -> Value {
    let did = adf_crypto::did_from_public(&key.verifying_key());
    let signature = adf_crypto::sign(key, format!("{did}{nonce}{timestamp}").as_bytes());
    json!({ "type": "auth", "did": did, "nonce": nonce, "signature": signature, "timestamp": timestamp })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn key(seed: u8) -> adf_crypto::SigningKey {
        adf_crypto::SigningKey::from_bytes(&[seed; 32])
    }

    #[test]
    fn msg_51_a_signed_frame_in_the_window_verifies() {
        let now = 1_800_000_000_000;
        let frame = client_frame(&key(1), "ab12", now - 29_000);
        let auth = verify_client(&frame, now).unwrap();
        assert!(auth.verified);
        assert_eq!(
            auth.did,
            adf_crypto::did_from_public(&key(1).verifying_key())
        );
        assert_eq!(auth.timestamp, now - 29_000);
    }

    #[test]
    fn msg_51_replayed_timestamps_and_wrong_dids_fail() {
        let now = 1_800_000_000_000;
        let old = client_frame(&key(1), "ab12", now - 31_000);
        assert!(verify_client(&old, now).unwrap_err().contains("window"));
        let future = client_frame(&key(1), "ab12", now + 31_000);
        assert!(verify_client(&future, now).is_err());
        let mut forged = client_frame(&key(1), "ab12", now);
        forged["did"] = json!(adf_crypto::did_from_public(&key(2).verifying_key()));
        assert!(
            verify_client(&forged, now)
                .unwrap_err()
                .contains("signature")
        );
        let mut other_nonce = client_frame(&key(1), "ab12", now);
        other_nonce["nonce"] = json!("ffff");
        assert!(verify_client(&other_nonce, now).is_err());
        assert!(verify_client(&json!({"type": "hello"}), now).is_err());
    }

    #[test]
    fn msg_51_the_server_answer_signs_its_did_the_nonce_and_the_timestamp() {
        let server = key(3);
        let server_did = adf_crypto::did_from_public(&server.verifying_key());
        let auth = ClientAuth {
            did: "did:key:x".into(),
            nonce: "n1".into(),
            timestamp: 42,
            verified: true,
        };
        let signature = adf_crypto::sign(&server, &server_signed_bytes(&server_did, &auth));
        let answer = success(&auth, Some((server_did.clone(), signature)));
        let expected = format!("{server_did}n142");
        adf_crypto::verify(
            &server.verifying_key(),
            expected.as_bytes(),
            answer["signature"].as_str().unwrap(),
            "answer",
        )
        .unwrap();
        assert_eq!(answer["nonce"], "n1");
    }
}
