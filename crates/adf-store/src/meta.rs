//! `adf_meta`: the key registry (spec §3.3) and meta protection (§4.4).

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use crate::access::{Caller, WriteOutcome, log_bypass};
use crate::error::{ProtectedKind, Result, StoreError};
use crate::file::AdfFile;
use crate::protection::{self, Change, Decision, Protection};

pub use crate::protection::MetaProtection;

/// Every `adf_*` key a runtime may create, with its protection (§3.3 registry, §17.2 #12).
pub const REGISTRY: [(&str, MetaProtection); 18] = [
    ("adf_version", MetaProtection::Readonly),
    ("adf_schema_version", MetaProtection::Readonly),
    ("adf_name", MetaProtection::Readonly),
    ("adf_handle", MetaProtection::Readonly),
    ("adf_created_at", MetaProtection::Readonly),
    ("adf_updated_at", MetaProtection::Readonly),
    ("adf_parent_did", MetaProtection::Readonly),
    ("adf_did", MetaProtection::Readonly),
    ("adf_did_history", MetaProtection::Readonly),
    ("adf_owner_did", MetaProtection::Readonly),
    ("adf_runtime_did", MetaProtection::Readonly),
    ("adf_clean_close", MetaProtection::Readonly),
    ("adf_effective_runtime", MetaProtection::Readonly),
    ("adf_loop_tools_backfilled", MetaProtection::None),
    ("adf_runtime_turn_checkpoint", MetaProtection::Readonly),
    ("adf_template_shipped", MetaProtection::Readonly),
    ("adf_template_description", MetaProtection::Readonly),
    ("adf_template_warning", MetaProtection::Readonly),
];

/// Keys only the runtime writes; not even the owner sets them by hand.
const RUNTIME_MANAGED: [&str; 3] = ["adf_version", "adf_schema_version", "adf_clean_close"];

/// The registry protection of an `adf_*` key, or `None` when the key is not in the registry.
/// Per-loop checkpoint keys (`adf_runtime_turn_checkpoint:<loop>`) share their base key's entry.
pub fn registry_protection(key: &str) -> Option<MetaProtection> {
    let base = key.split_once(':').map_or(key, |(base, _)| base);
    REGISTRY
        .iter()
        .find(|(name, _)| *name == base && (base == key || base == "adf_runtime_turn_checkpoint"))
        .map(|(_, protection)| *protection)
}

/// One `adf_meta` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MetaEntry {
    /// The meta key.
    pub key: String,
    /// The stored text value.
    pub value: String,
    /// `none`, `readonly` or `increment` (§4.4).
    pub protection: MetaProtection,
}

fn check_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > 256 || key.chars().any(char::is_control) {
        return Err(StoreError::invalid(
            "a meta key is 1-256 characters with no control characters",
        ));
    }
    Ok(())
}

/// Formats a number the way counters are stored: integral values without a fraction (MET-19).
pub fn format_number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 9.007_199_254_740_992e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

impl AdfFile {
    /// One meta entry.
    pub fn meta_get(&self, key: &str) -> Result<Option<MetaEntry>> {
        Ok(self
            .conn
            .query_row(
                "SELECT key, value, protection FROM adf_meta WHERE key = ?1",
                [key],
                |row| {
                    Ok(MetaEntry {
                        key: row.get(0)?,
                        value: row.get(1)?,
                        protection: row.get(2)?,
                    })
                },
            )
            .optional()?)
    }

    /// Every meta entry, ordered by key.
    pub fn meta_list(&self) -> Result<Vec<MetaEntry>> {
        let mut stmt = self
            .conn
            .prepare("SELECT key, value, protection FROM adf_meta ORDER BY key")?;
        let rows = stmt.query_map([], |row| {
            Ok(MetaEntry {
                key: row.get(0)?,
                value: row.get(1)?,
                protection: row.get(2)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Sets a meta value for `caller` (§4.4). `protection` applies only when the key is created;
    /// an existing key keeps its protection (MET-14).
    pub fn meta_set(
        &mut self,
        caller: Caller,
        key: &str,
        value: &str,
        protection: Option<MetaProtection>,
    ) -> Result<WriteOutcome> {
        self.check_writable()?;
        check_key(key)?;
        let tx = crate::file::write_tx(&mut self.conn)?;
        let existing: Option<(String, MetaProtection)> = tx
            .query_row(
                "SELECT value, protection FROM adf_meta WHERE key = ?1",
                [key],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()?;
        let registry = if key.starts_with("adf_") {
            let Some(level) = registry_protection(key) else {
                return Err(StoreError::invalid(format!(
                    "'{key}' is not in the adf_ key registry; adf_ keys are reserved for the runtime"
                )));
            };
            if caller != Caller::Owner && level == MetaProtection::Readonly {
                return Err(protected_meta(key, MetaProtection::Readonly));
            }
            if RUNTIME_MANAGED.contains(&key) {
                return Err(StoreError::invalid(format!(
                    "'{key}' is managed by the runtime"
                )));
            }
            Some(level)
        } else {
            None
        };
        let mut outcome = WriteOutcome::default();
        match existing {
            Some((current, level)) => {
                match protection::decide(caller, Protection::Meta(level), Change::Write) {
                    Decision::Refuse => return Err(protected_meta(key, level)),
                    Decision::OnlyIncrease => check_increment(key, &current, value)?,
                    Decision::Bypass => {
                        log_bypass(&tx, ProtectedKind::Meta, key, level.as_str())?;
                        outcome.bypassed = Some(level.as_str().to_owned());
                    }
                    Decision::Allow => {}
                }
                tx.execute(
                    "UPDATE adf_meta SET value = ?2 WHERE key = ?1",
                    params![key, value],
                )?;
            }
            None => {
                let level = registry.or(protection).unwrap_or(MetaProtection::None);
                tx.execute(
                    "INSERT INTO adf_meta (key, value, protection) VALUES (?1, ?2, ?3)",
                    params![key, value, level.as_str()],
                )?;
                outcome.created = true;
            }
        }
        crate::file::consume_marker(&tx, &self.marker_pending)?;
        tx.commit()?;
        Ok(outcome)
    }

    /// Adds `delta` to a numeric meta value atomically, creating the key at `delta` when missing
    /// (tools guide `sys_set_meta` `inc`). Returns the new value as stored.
    pub fn meta_increment(&mut self, caller: Caller, key: &str, delta: f64) -> Result<String> {
        self.check_writable()?;
        check_key(key)?;
        if !delta.is_finite() {
            return Err(StoreError::invalid("the increment must be a finite number"));
        }
        if key.starts_with("adf_") {
            return Err(StoreError::invalid(format!(
                "'{key}' is reserved for the runtime"
            )));
        }
        let tx = crate::file::write_tx(&mut self.conn)?;
        let existing: Option<(String, MetaProtection)> = tx
            .query_row(
                "SELECT value, protection FROM adf_meta WHERE key = ?1",
                [key],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()?;
        let new_value = match existing {
            None => {
                let text = format_number(delta);
                tx.execute(
                    "INSERT INTO adf_meta (key, value, protection) VALUES (?1, ?2, 'none')",
                    params![key, text],
                )?;
                text
            }
            Some((current, level)) => {
                let number: f64 = current.trim().parse().map_err(|_| {
                    StoreError::invalid(format!(
                        "meta '{key}' holds '{current}', which is not a number"
                    ))
                })?;
                // Raising an `increment` key is what the level allows everyone: no refusal,
                // and no bypass to record.
                let raises = delta > 0.0;
                match protection::decide(caller, Protection::Meta(level), Change::Write) {
                    Decision::Refuse => return Err(protected_meta(key, level)),
                    Decision::OnlyIncrease if !raises => {
                        return Err(not_an_increase(key, "only strictly greater values"));
                    }
                    Decision::Bypass if !(level == MetaProtection::Increment && raises) => {
                        log_bypass(&tx, ProtectedKind::Meta, key, level.as_str())?;
                    }
                    _ => {}
                }
                let text = format_number(number + delta);
                tx.execute(
                    "UPDATE adf_meta SET value = ?2 WHERE key = ?1",
                    params![key, text],
                )?;
                text
            }
        };
        crate::file::consume_marker(&tx, &self.marker_pending)?;
        tx.commit()?;
        Ok(new_value)
    }

    /// Deletes a meta key for `caller`; readonly and increment keys are the agent's to keep.
    pub fn meta_delete(&mut self, caller: Caller, key: &str) -> Result<WriteOutcome> {
        self.check_writable()?;
        let tx = crate::file::write_tx(&mut self.conn)?;
        let level: MetaProtection = tx
            .query_row(
                "SELECT protection FROM adf_meta WHERE key = ?1",
                [key],
                |row| row.get(0),
            )
            .optional()?
            .ok_or_else(|| StoreError::not_found("meta key", key))?;
        if RUNTIME_MANAGED.contains(&key) || (key.starts_with("adf_") && caller != Caller::Owner) {
            return Err(protected_meta(key, MetaProtection::Readonly));
        }
        let mut outcome = WriteOutcome::default();
        let delete = Change::Delete {
            owner_confirmed: false,
        };
        match protection::decide(caller, Protection::Meta(level), delete) {
            Decision::Refuse | Decision::OnlyIncrease => return Err(protected_meta(key, level)),
            Decision::Bypass => {
                log_bypass(&tx, ProtectedKind::Meta, key, level.as_str())?;
                outcome.bypassed = Some(level.as_str().to_owned());
            }
            Decision::Allow => {}
        }
        tx.execute("DELETE FROM adf_meta WHERE key = ?1", [key])?;
        crate::file::consume_marker(&tx, &self.marker_pending)?;
        tx.commit()?;
        Ok(outcome)
    }

    /// Changes a key's protection: owner and authorized code only (`set_meta_protection`).
    pub fn meta_set_protection(
        &mut self,
        caller: Caller,
        key: &str,
        protection: MetaProtection,
    ) -> Result<()> {
        caller.grant_trust("change meta protection")?;
        if registry_protection(key).is_some() && key.starts_with("adf_") {
            return Err(StoreError::invalid(format!(
                "'{key}' keeps its registry protection"
            )));
        }
        let changed = self.update_existing(
            "UPDATE adf_meta SET protection = ?2 WHERE key = ?1",
            params![key, protection.as_str()],
        )?;
        if changed == 0 {
            return Err(StoreError::not_found("meta key", key));
        }
        Ok(())
    }

    /// Writes a registry key as the runtime (identity provisioning, config sync); creates it
    /// with its registry protection and keeps that protection on update.
    pub fn meta_set_runtime(&mut self, key: &str, value: &str) -> Result<()> {
        if key.starts_with("adf_") && registry_protection(key).is_none() {
            return Err(StoreError::invalid(format!(
                "'{key}' is not in the adf_ key registry"
            )));
        }
        self.ensure_writable()?;
        set_runtime_key(&self.conn, key, value)
    }
}

/// Puts every present registry key back at its registry protection (§4.4, §17.2 #12): files
/// written by older runtimes left `adf_name` and `adf_updated_at` at `none`. Writes nothing
/// when every key is already right.
pub(crate) fn enforce_registry_protections(conn: &rusqlite::Connection) -> Result<Vec<String>> {
    let mut stmt =
        conn.prepare("SELECT key, protection FROM adf_meta WHERE key LIKE 'adf\\_%' ESCAPE '\\'")?;
    let keys: Vec<(String, String)> = stmt
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut notes = Vec::new();
    for (key, current) in keys {
        if let Some(level) = registry_protection(&key)
            && level.as_str() != current
        {
            conn.execute(
                "UPDATE adf_meta SET protection = ?2 WHERE key = ?1",
                params![key, level.as_str()],
            )?;
            notes.push(format!(
                "meta {key}: protection {current} -> {}",
                level.as_str()
            ));
        }
    }
    Ok(notes)
}

/// Writes a registry key with its registry protection, inside any transaction.
pub(crate) fn set_runtime_key(conn: &rusqlite::Connection, key: &str, value: &str) -> Result<()> {
    let level = if key.starts_with("adf_") {
        registry_protection(key).ok_or_else(|| {
            StoreError::invalid(format!("'{key}' is not in the adf_ key registry"))
        })?
    } else {
        MetaProtection::None
    };
    conn.prepare_cached(
        "INSERT INTO adf_meta (key, value, protection) VALUES (?1, ?2, ?3)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
    )?
    .execute(params![key, value, level.as_str()])?;
    Ok(())
}

fn protected_meta(key: &str, level: MetaProtection) -> StoreError {
    StoreError::Protected {
        kind: ProtectedKind::Meta,
        target: key.to_owned(),
        level: Protection::Meta(level),
        why: None,
    }
}

/// The refusal of an `increment` key's change that does not raise it.
fn not_an_increase(key: &str, why: &'static str) -> StoreError {
    StoreError::Protected {
        kind: ProtectedKind::Meta,
        target: key.to_owned(),
        level: Protection::Meta(MetaProtection::Increment),
        why: Some(why),
    }
}

fn check_increment(key: &str, current: &str, new: &str) -> Result<()> {
    let parse = |text: &str| text.trim().parse::<f64>().ok().filter(|n| n.is_finite());
    match (parse(current), parse(new)) {
        (Some(old), Some(new)) if new > old => Ok(()),
        _ => Err(not_an_increase(key, "only strictly greater numbers")),
    }
}
