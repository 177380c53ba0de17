//! Config writes the runtime has already judged.
//!
//! `sys_update_config` decides the agent-facing rules of §5.17 (hard denials, locks, declaration
//! integrity, field rules) in the runtime, where the path, the action and the caller's approval
//! are known. The finished config still lands here, the store's one door for config writes, which
//! re-checks what no caller may ever do and records a lock bypass in the same transaction.

use serde_json::Value;

use crate::access::Caller;
use crate::config::new_violations;
use crate::error::{ProtectedKind, Result, StoreError};
use crate::file::AdfFile;
use crate::protection::{self, Change, Decision, Protection};
use crate::time;

impl AdfFile {
    /// Persists `config`, already checked against §5.17 for `caller`, keeping `adf_name`,
    /// `adf_handle`, `adf_updated_at` and `metadata.updated_at` in step.
    ///
    /// `bypassed_lock` names the locked config path the write went past: allowed for authorized
    /// code and owner-approved one-time overrides, and logged (`origin=protection`,
    /// `event=bypass`, warn). Refused whatever the runtime decided: a lock bypass by a caller
    /// bound by protections, a change of `id` or `adf_version`, and a new schema violation.
    pub fn config_write_checked(
        &mut self,
        caller: Caller,
        mut config: Value,
        bypassed_lock: Option<&str>,
    ) -> Result<()> {
        if let Some(target) = bypassed_lock
            && protection::decide(caller, Protection::ConfigLocked, Change::Write)
                == Decision::Refuse
        {
            return Err(StoreError::Protected {
                kind: ProtectedKind::Config,
                target: target.to_owned(),
                level: Protection::ConfigLocked,
                why: None,
            });
        }
        crate::config_depth::check_depth(&config)?;
        let before = self.config()?;
        for fixed in ["id", "adf_version"] {
            if before.get(fixed) != config.get(fixed) {
                return Err(StoreError::invalid(format!("config.{fixed} never changes")));
            }
        }
        let added = new_violations(&before, &config);
        if !added.is_empty() {
            return Err(StoreError::ConfigRejected {
                violations: added.iter().map(ToString::to_string).collect(),
            });
        }
        self.atomically(|file| {
            file.persist_config(&mut config)?;
            if let Some(target) = bypassed_lock {
                log_lock_bypass(&file.conn, caller, target)?;
            }
            Ok(())
        })
    }
}

/// The audit row of a write past a config lock. Authorized code bypasses on its own trust; an
/// owner-approved call went past once because the owner said so: both are warn rows under
/// `protection/bypass`, told apart by `data.caller`.
fn log_lock_bypass(conn: &rusqlite::Connection, caller: Caller, target: &str) -> Result<()> {
    let (who, message) = match caller {
        Caller::OwnerApproved => (
            "owner_approved",
            format!("owner approved a one-time override of the lock on config path '{target}'"),
        ),
        _ => (
            "authorized_code",
            format!("authorized code bypassed the lock on config path '{target}'"),
        ),
    };
    conn.execute(
        "INSERT INTO adf_logs (level, origin, event, target, message, data, created_at)
         VALUES ('warn', 'protection', 'bypass', ?1, ?2, ?3, ?4)",
        rusqlite::params![
            target,
            message,
            serde_json::json!({ "kind": ProtectedKind::Config, "level": "locked", "caller": who })
                .to_string(),
            time::now_ms()
        ],
    )?;
    Ok(())
}
