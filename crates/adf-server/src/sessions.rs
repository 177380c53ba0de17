//! Browser logins: one-time login codes and the sessions they open.
//!
//! The token never travels in a link. A login link carries a **code**: 32 random bytes, valid
//! for [`LOGIN_CODE_TTL`] (5 minutes), spent by its first use. The daemon makes one at start
//! for the link it prints; `adf studio` asks for a fresh one (`POST /auth/login-codes`, bearer
//! token only). `GET /login?code=…` spends the code and opens a **session**: the browser gets
//! its secret in the `adf_session` cookie (`Max-Age` = [`SESSION_TTL`]), the daemon keeps only
//! the secret's SHA-256 digest with a fixed expiry 12 hours after login (not sliding: a stolen
//! cookie dies on schedule whatever its use). Sessions are listed (`GET /auth/sessions`) and
//! revoked one by one or all at once (`DELETE /auth/sessions[/{id}]`), without touching the
//! token. They live in the daemon's memory: a restart ends them all.
//!
//! Lookups go by the digest of what the client presents, so comparing never reveals a prefix
//! of a stored secret; both tables are bounded ([`MAX_LOGIN_CODES`], [`MAX_SESSIONS`]).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Name of the login cookie.
pub const SESSION_COOKIE: &str = "adf_session";
use sha2::{Digest as _, Sha256};

/// How long a login code stays valid.
pub const LOGIN_CODE_TTL: Duration = Duration::from_secs(5 * 60);

/// How long a session lasts after its login (fixed, not sliding).
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);

/// Unspent codes kept at once; a new one past this drops the oldest.
pub const MAX_LOGIN_CODES: usize = 64;

/// Sessions kept at once; a login past this ends the oldest session.
pub const MAX_SESSIONS: usize = 256;

/// A fresh login code.
#[derive(Clone, PartialEq, Eq)]
pub struct LoginCode {
    /// The code, 64 hex digits (URL-safe as it is).
    pub code: String,
    /// When it stops being accepted (Unix ms).
    pub expires_at_ms: i64,
}

impl std::fmt::Debug for LoginCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginCode")
            .field("expires_at_ms", &self.expires_at_ms)
            .finish_non_exhaustive()
    }
}

/// What the daemon shows of a session (never its secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// Public id, 16 hex digits, for listing and revoking.
    pub id: String,
    /// Login time (Unix ms).
    pub created_at_ms: i64,
    /// When it ends (Unix ms).
    pub expires_at_ms: i64,
    /// The last request it authorized (Unix ms).
    pub last_seen_ms: i64,
}

/// A session just opened: the cookie's value and the session.
pub struct Opened {
    /// The secret the cookie carries (64 hex digits).
    pub secret: String,
    /// The session it opens.
    pub info: SessionInfo,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Tables {
    /// Digest of a code → its expiry.
    codes: HashMap<String, i64>,
    /// Digest of a session secret → the session.
    sessions: HashMap<String, SessionInfo>,
}

/// The daemon's login codes and sessions (see the module docs).
#[derive(Default)]
pub struct Sessions {
    tables: Mutex<Tables>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tables = self.lock();
        f.debug_struct("Sessions")
            .field("codes", &tables.codes.len())
            .field("sessions", &tables.sessions.len())
            .finish()
    }
}

fn now_ms() -> i64 {
    adf_store::time::now_ms()
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// `bytes` random bytes as hex digits.
fn random_hex<const N: usize>() -> String {
    let bytes: [u8; N] = rand::random();
    hex(&bytes)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn digest(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

impl Sessions {
    /// No codes, no sessions.
    pub fn new() -> Self {
        Self::default()
    }

    // A poisoned lock only means a panic elsewhere mid-update of plain maps; they stay usable.
    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new login code, valid for [`LOGIN_CODE_TTL`].
    pub fn issue_code(&self) -> LoginCode {
        self.issue_code_at(now_ms())
    }

    fn issue_code_at(&self, now: i64) -> LoginCode {
        let code = random_hex::<32>();
        let expires_at_ms = now.saturating_add(millis(LOGIN_CODE_TTL));
        let mut tables = self.lock();
        tables.codes.retain(|_, expiry| *expiry > now);
        while tables.codes.len() >= MAX_LOGIN_CODES {
            let oldest = tables
                .codes
                .iter()
                .min_by_key(|(_, expiry)| **expiry)
                .map(|(key, _)| key.clone());
            match oldest {
                Some(key) => tables.codes.remove(&key),
                None => break,
            };
        }
        tables.codes.insert(digest(&code), expires_at_ms);
        LoginCode {
            code,
            expires_at_ms,
        }
    }

    /// Spends `code` and opens a session; `None` when the code is unknown, spent or expired.
    pub fn redeem(&self, code: &str) -> Option<Opened> {
        self.redeem_at(code, now_ms())
    }

    fn redeem_at(&self, code: &str, now: i64) -> Option<Opened> {
        let mut tables = self.lock();
        let expiry = tables.codes.remove(&digest(code))?;
        if expiry <= now {
            return None;
        }
        tables
            .sessions
            .retain(|_, session| session.expires_at_ms > now);
        while tables.sessions.len() >= MAX_SESSIONS {
            let oldest = tables
                .sessions
                .iter()
                .min_by_key(|(_, session)| session.created_at_ms)
                .map(|(key, _)| key.clone());
            match oldest {
                Some(key) => tables.sessions.remove(&key),
                None => break,
            };
        }
        let secret = random_hex::<32>();
        let info = SessionInfo {
            id: random_hex::<8>(),
            created_at_ms: now,
            expires_at_ms: now.saturating_add(millis(SESSION_TTL)),
            last_seen_ms: now,
        };
        tables.sessions.insert(digest(&secret), info.clone());
        Some(Opened { secret, info })
    }

    /// The live session whose secret is `secret` (its last use noted), if any.
    pub fn authorize(&self, secret: &str) -> Option<String> {
        self.authorize_at(secret, now_ms())
    }

    fn authorize_at(&self, secret: &str, now: i64) -> Option<String> {
        let key = digest(secret);
        let mut tables = self.lock();
        let session = tables.sessions.get_mut(&key)?;
        if session.expires_at_ms <= now {
            tables.sessions.remove(&key);
            return None;
        }
        session.last_seen_ms = now;
        Some(session.id.clone())
    }

    /// The live sessions, oldest login first.
    pub fn list(&self) -> Vec<SessionInfo> {
        let now = now_ms();
        let mut tables = self.lock();
        tables
            .sessions
            .retain(|_, session| session.expires_at_ms > now);
        let mut list: Vec<SessionInfo> = tables.sessions.values().cloned().collect();
        list.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        list
    }

    /// Ends the session `id`; whether there was one.
    pub fn revoke(&self, id: &str) -> bool {
        let mut tables = self.lock();
        let before = tables.sessions.len();
        tables.sessions.retain(|_, session| session.id != id);
        tables.sessions.len() < before
    }

    /// Ends every session (and spends every code); how many sessions there were.
    pub fn revoke_all(&self) -> usize {
        let mut tables = self.lock();
        tables.codes.clear();
        std::mem::take(&mut tables.sessions).len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_code_opens_one_session_once_and_only_before_it_expires() {
        let sessions = Sessions::new();
        let code = sessions.issue_code_at(1_000);
        assert_eq!(code.code.len(), 64);
        assert_eq!(code.expires_at_ms, 1_000 + millis(LOGIN_CODE_TTL));
        let opened = sessions.redeem_at(&code.code, 2_000).unwrap();
        assert!(
            sessions.redeem_at(&code.code, 2_000).is_none(),
            "single use"
        );
        assert_eq!(opened.info.expires_at_ms, 2_000 + millis(SESSION_TTL));
        assert_eq!(
            sessions.authorize_at(&opened.secret, 3_000).as_deref(),
            Some(opened.info.id.as_str())
        );

        let late = sessions.issue_code_at(10_000);
        let at_expiry = late.expires_at_ms;
        assert!(sessions.redeem_at(&late.code, at_expiry).is_none());
        assert!(sessions.redeem_at("not-a-code", 10_000).is_none());
    }

    #[test]
    fn a_session_ends_at_its_fixed_expiry_however_often_it_is_used() {
        let sessions = Sessions::new();
        let code = sessions.issue_code_at(0);
        let opened = sessions.redeem_at(&code.code, 0).unwrap();
        let end = opened.info.expires_at_ms;
        assert!(sessions.authorize_at(&opened.secret, end - 1).is_some());
        assert!(sessions.authorize_at(&opened.secret, end).is_none());
        assert!(
            sessions.authorize_at(&opened.secret, 0).is_none(),
            "an expired session is gone"
        );
    }

    #[test]
    fn revoking_ends_one_session_or_all() {
        let sessions = Sessions::new();
        let now = now_ms();
        let a = sessions
            .redeem_at(&sessions.issue_code_at(now).code, now)
            .unwrap();
        let b = sessions
            .redeem_at(&sessions.issue_code_at(now).code, now)
            .unwrap();
        assert_eq!(sessions.list().len(), 2);
        assert!(sessions.revoke(&a.info.id));
        assert!(!sessions.revoke(&a.info.id));
        assert!(sessions.authorize_at(&a.secret, now).is_none());
        assert!(sessions.authorize_at(&b.secret, now).is_some());
        let pending = sessions.issue_code_at(now);
        assert_eq!(sessions.revoke_all(), 1);
        assert!(sessions.authorize_at(&b.secret, now).is_none());
        assert!(
            sessions.redeem_at(&pending.code, now).is_none(),
            "unspent codes go too"
        );
    }

    #[test]
    fn both_tables_are_bounded() {
        let sessions = Sessions::new();
        let first = sessions.issue_code_at(0);
        for _ in 0..MAX_LOGIN_CODES {
            sessions.issue_code_at(1);
        }
        assert!(
            sessions.redeem_at(&first.code, 2).is_none(),
            "the oldest code made room"
        );
        let mut opened = Vec::new();
        for i in 0..=MAX_SESSIONS {
            let now = i64::try_from(i).unwrap() + 10;
            opened.push(
                sessions
                    .redeem_at(&sessions.issue_code_at(now).code, now)
                    .unwrap(),
            );
        }
        assert_eq!(sessions.lock().sessions.len(), MAX_SESSIONS);
        assert!(sessions.authorize_at(&opened[0].secret, 400).is_none());
        assert!(
            sessions
                .authorize_at(&opened[MAX_SESSIONS].secret, 400)
                .is_some()
        );
    }
}
