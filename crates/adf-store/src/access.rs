//! Who is asking, and what a write that passed the protection rules did.

use serde::Serialize;

/// The party on whose behalf a store operation runs (spec §4.2–§4.4, §8.6).
///
/// Every protection rule is a function of the caller, decided in this crate only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Caller {
    /// The model, or code from a file that is not authorized.
    Agent,
    /// Code from a file the owner authorized: bypasses protections, visibly.
    AuthorizedCode,
    /// The owner or the runtime acting for it: not subject to agent protections.
    Owner,
    /// An agent call the owner approved once despite a protection (§4.2 "owner-approved
    /// one-time override"): not stopped by the protection, but still an agent write, so it
    /// clears `authorized` and grants no trust.
    OwnerApproved,
}

impl Caller {
    /// Whether agent-facing protections (read_only files, readonly meta, locks) stop this caller.
    pub fn is_bound_by_protection(self) -> bool {
        self == Self::Agent
    }

    /// Whether this caller may grant trust (authorize files, change protection levels).
    pub fn may_grant_trust(self) -> bool {
        matches!(self, Self::AuthorizedCode | Self::Owner)
    }

    /// [`Self::may_grant_trust`] as a result: `action` names what was refused.
    pub(crate) fn grant_trust(self, action: &str) -> crate::error::Result<()> {
        if self.may_grant_trust() {
            Ok(())
        } else {
            Err(crate::error::StoreError::RequiresAuthorizedCode {
                action: action.into(),
            })
        }
    }

    /// Whether a write by this caller is the agent changing content, which withdraws the
    /// owner's trust in it as code (§4.3).
    pub fn clears_authorization(self) -> bool {
        self != Self::Owner
    }

    /// Whether a bypass by this caller must be recorded (`protection/bypass` log, ⚠ marker).
    pub(crate) fn records_bypass(self) -> bool {
        self == Self::AuthorizedCode
    }
}

/// The outcome of a write that was allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WriteOutcome {
    /// The protection an authorized caller overrode, such as `read_only`; callers show it as a
    /// `⚠ protection override` marker.
    pub bypassed: Option<String>,
    /// Whether the row was created rather than updated.
    pub created: bool,
}

/// Records an authorized-code bypass of a protection in `adf_logs` (origin `protection`,
/// event `bypass`, level warn), inside the caller's transaction.
pub(crate) fn log_bypass(
    conn: &rusqlite::Connection,
    kind: crate::ProtectedKind,
    target: &str,
    level: &str,
) -> crate::Result<()> {
    conn.execute(
        "INSERT INTO adf_logs (level, origin, event, target, message, data, created_at)
         VALUES ('warn', 'protection', 'bypass', ?1, ?2, ?3, ?4)",
        rusqlite::params![
            target,
            format!("authorized code bypassed {level} protection of {kind} '{target}'"),
            serde_json::json!({ "kind": kind, "level": level }).to_string(),
            crate::time::now_ms()
        ],
    )?;
    Ok(())
}
