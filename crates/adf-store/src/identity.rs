//! Applying an identity lifecycle change (provision, unlock, rotate, claim, reset, share) to
//! `adf_identity`, `adf_attestations` and the identity registry keys in one transaction.
//!
//! The change is described with this crate's own row types so the store stays independent of
//! `adf-crypto`: the runtime translates what the crypto crate computes into an [`IdentityWrite`].

use rusqlite::params;

use crate::error::{Result, StoreError};
use crate::file::AdfFile;
use crate::meta::set_runtime_key;
use crate::tables::{AttestationRow, IdentityRow};

/// Everything one identity flow writes. Applied in the order the fields are listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdentityWrite {
    /// Purposes whose rows are deleted first (reset deletes the key rows).
    pub delete_purposes: Vec<String>,
    /// Delete every `env:credentials` row (a dead foreign credentials envelope on claim).
    pub delete_sealed_credentials: bool,
    /// Rows inserted or replaced by purpose; an existing row keeps its `code_access` flag
    /// (§3.3: overwriting never changes it).
    pub upsert_rows: Vec<IdentityRow>,
    /// Roles whose attestations are deleted before the inserts (`owner`, `operator` on
    /// re-key); other roles are kept (IDN-34).
    pub replace_roles: Vec<String>,
    /// Attestations to insert (`id` is ignored); an identical one already present is skipped.
    pub attestations: Vec<AttestationRow>,
    /// Registry keys (`adf_did`, `adf_did_history`, `adf_owner_did`, `adf_runtime_did`) to set,
    /// written with their registry protection.
    pub meta: Vec<(String, String)>,
}

impl IdentityWrite {
    /// True when applying would write nothing.
    pub fn is_empty(&self) -> bool {
        self.delete_purposes.is_empty()
            && !self.delete_sealed_credentials
            && self.upsert_rows.is_empty()
            && self.replace_roles.is_empty()
            && self.attestations.is_empty()
            && self.meta.is_empty()
    }
}

impl AdfFile {
    /// Applies an identity change as the runtime: all of it lands or none of it does.
    pub fn identity_apply(&mut self, change: &IdentityWrite) -> Result<()> {
        if change.is_empty() {
            return Ok(());
        }
        for (key, _) in &change.meta {
            // Only identity registry keys: this path bypasses the meta protection rules.
            if !matches!(
                key.as_str(),
                "adf_did" | "adf_did_history" | "adf_owner_did" | "adf_runtime_did"
            ) {
                return Err(StoreError::InvalidInput(format!(
                    "'{key}' is not an identity registry key"
                )));
            }
        }
        self.ensure_writable()?;
        // Sealing replaces plaintext (an older file's plain key, plain secrets): have SQLite
        // zero the freed cells instead of leaving the old bytes in free space.
        let secure: i64 = self
            .conn
            .query_row("PRAGMA secure_delete", [], |r| r.get(0))?;
        self.conn.execute_batch("PRAGMA secure_delete = ON")?;
        let result = self.identity_apply_inner(change);
        if secure == 0 {
            self.conn.execute_batch("PRAGMA secure_delete = OFF")?;
        }
        result
    }

    fn identity_apply_inner(&mut self, change: &IdentityWrite) -> Result<()> {
        let tx = crate::file::write_tx(&mut self.conn)?;
        for purpose in &change.delete_purposes {
            tx.execute("DELETE FROM adf_identity WHERE purpose = ?1", [purpose])?;
        }
        if change.delete_sealed_credentials {
            tx.execute(
                "DELETE FROM adf_identity WHERE encryption_algo = 'env:credentials'",
                [],
            )?;
        }
        for row in &change.upsert_rows {
            tx.execute(
                "INSERT INTO adf_identity (purpose, value, encryption_algo, salt, kdf_params, code_access)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT(purpose) DO UPDATE SET value = excluded.value,
                   encryption_algo = excluded.encryption_algo, salt = excluded.salt, kdf_params = excluded.kdf_params",
                params![row.purpose, row.value, row.encryption_algo, row.salt, row.kdf_params, row.code_access],
            )?;
        }
        for role in &change.replace_roles {
            tx.execute("DELETE FROM adf_attestations WHERE role = ?1", [role])?;
        }
        for a in &change.attestations {
            tx.execute(
                "INSERT INTO adf_attestations (issuer, subject, role, issued_at, expires_at, scope, signature, raw_json)
                 SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8
                 WHERE NOT EXISTS (SELECT 1 FROM adf_attestations
                   WHERE issuer = ?1 AND subject = ?2 AND role = ?3 AND signature = ?7)",
                params![a.issuer, a.subject, a.role, a.issued_at, a.expires_at, a.scope, a.signature, a.raw_json],
            )?;
        }
        for (key, value) in &change.meta {
            set_runtime_key(&tx, key, value)?;
        }
        tx.commit()?;
        Ok(())
    }
}
