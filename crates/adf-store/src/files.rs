//! `adf_files`: the virtual filesystem with its protection (§4.2), authorization (§4.3) and
//! deletion audit (§13.3).

use base64::Engine as _;
use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use crate::access::{Caller, WriteOutcome, log_bypass};
use crate::error::{ProtectedKind, Result, StoreError};
use crate::file::AdfFile;
use crate::{audit, skills, time};

/// Protection level of a file (§4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileProtection {
    /// Agent tools may neither write nor delete the file.
    ReadOnly,
    /// Agent tools may write the file but not delete it.
    NoDelete,
    /// No protection: agent tools may write and delete the file.
    None,
}

impl FileProtection {
    /// The level as `adf_files.protection` stores it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read_only",
            Self::NoDelete => "no_delete",
            Self::None => "none",
        }
    }

    /// Parses a stored or requested level; anything else is invalid input.
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "read_only" => Ok(Self::ReadOnly),
            "no_delete" => Ok(Self::NoDelete),
            "none" => Ok(Self::None),
            other => Err(StoreError::invalid(format!(
                "file protection must be read_only, no_delete or none, not '{other}'"
            ))),
        }
    }
}

/// A file's row without its content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileInfo {
    /// Path inside the virtual filesystem, e.g. `mind/log.md`.
    pub path: String,
    /// The MIME type recorded at write time, if any.
    pub mime_type: Option<String>,
    /// Content length in bytes.
    pub size: i64,
    /// `read_only`, `no_delete` or `none` (§4.2).
    pub protection: String,
    /// The owner trusts the file as code (§4.3); cleared whenever an agent writes it.
    pub authorized: bool,
    /// When the file was created, as an ISO-8601 timestamp.
    pub created_at: String,
    /// When the content last changed, as an ISO-8601 timestamp.
    pub updated_at: String,
}

/// A file with its content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileEntry {
    /// Everything but the content.
    #[serde(flatten)]
    pub info: FileInfo,
    /// The raw bytes; never serialized, so listings stay small.
    #[serde(skip)]
    pub content: Vec<u8>,
}

/// Options of a file write.
#[derive(Debug, Clone, Default)]
pub struct FileWrite {
    /// MIME type; guessed from the extension when absent and the file is new.
    pub mime_type: Option<String>,
    /// Protection for a newly created file; ignored when the file exists (FIL-14).
    pub protection_if_new: Option<FileProtection>,
}

/// Longest path the store accepts.
pub(crate) const MAX_PATH_LEN: usize = 1024;

/// Checks that `path` is a relative, normalized path of the flat namespace.
pub(crate) fn validate_path(path: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(StoreError::invalid(format!(
            "invalid file path '{path}': {why}"
        )))
    };
    if path.is_empty() {
        return bad("it is empty");
    }
    if path.len() > MAX_PATH_LEN {
        return bad("it is longer than 1024 bytes");
    }
    if path.starts_with('/') || path.contains('\\') {
        return bad("paths are relative and use '/'");
    }
    if path.chars().any(char::is_control) {
        return bad("it contains control characters");
    }
    if path
        .split('/')
        .any(|segment| segment.is_empty() || segment == "." || segment == "..")
    {
        return bad("empty, '.' and '..' segments are not allowed");
    }
    Ok(())
}

/// A MIME type from a file extension; `application/octet-stream` when unknown.
pub fn guess_mime(path: &str) -> &'static str {
    let ext = path
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "md" | "markdown" => "text/markdown",
        "txt" | "log" => "text/plain",
        "json" => "application/json",
        "js" | "mjs" => "text/javascript",
        "ts" | "mts" => "text/typescript",
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "csv" => "text/csv",
        "yaml" | "yml" => "application/yaml",
        "toml" => "application/toml",
        "xml" => "application/xml",
        "sh" => "application/x-sh",
        "py" => "text/x-python",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "wav" => "audio/wav",
        "mp3" => "audio/mpeg",
        "mp4" => "video/mp4",
        _ => "application/octet-stream",
    }
}

const INFO_COLUMNS: &str = "path, mime_type, size, protection, authorized, created_at, updated_at";

fn info_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<FileInfo> {
    Ok(FileInfo {
        path: row.get(0)?,
        mime_type: row.get(1)?,
        size: row.get(2)?,
        protection: row.get(3)?,
        authorized: row.get::<_, i64>(4)? != 0,
        created_at: row.get(5)?,
        updated_at: row.get(6)?,
    })
}

fn protected_file(path: &str, level: &str) -> StoreError {
    StoreError::Protected {
        kind: ProtectedKind::File,
        target: path.to_owned(),
        level: level.to_owned(),
    }
}

impl AdfFile {
    /// Resolves the legacy primary-document name: `document.md` means `README.md` unless a
    /// `document.md` row really exists (§17.0, FIL-19).
    pub fn resolve_path(&self, path: &str) -> Result<String> {
        if path == "document.md" {
            let exists: bool = self
                .conn
                .query_row(
                    "SELECT 1 FROM adf_files WHERE path = 'document.md'",
                    [],
                    |_| Ok(()),
                )
                .optional()?
                .is_some();
            if !exists {
                return Ok("README.md".to_owned());
            }
        }
        Ok(path.to_owned())
    }

    /// One file with its content.
    pub fn file_read(&self, path: &str) -> Result<Option<FileEntry>> {
        let path = self.resolve_path(path)?;
        Ok(self
            .conn
            .prepare_cached(&format!(
                "SELECT {INFO_COLUMNS}, content FROM adf_files WHERE path = ?1"
            ))?
            .query_row([&path], |row| {
                Ok(FileEntry {
                    info: info_from_row(row)?,
                    content: row.get(7)?,
                })
            })
            .optional()?)
    }

    /// Files whose path starts with `prefix` (all files for `""`), ordered by path.
    pub fn file_list(&self, prefix: &str) -> Result<Vec<FileInfo>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {INFO_COLUMNS} FROM adf_files WHERE substr(path, 1, length(?1)) = ?1 ORDER BY path"
        ))?;
        let rows = stmt.query_map([prefix], info_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Writes a whole file for `caller` (§4.2, §4.3): an agent cannot write a `read_only` file,
    /// authorized code can (and the bypass is logged), and any non-owner write clears
    /// `authorized`. The runtime-owned `skills-registry.json` is written only by the indexer.
    pub fn file_write(
        &mut self,
        caller: Caller,
        path: &str,
        content: &[u8],
        options: &FileWrite,
    ) -> Result<WriteOutcome> {
        self.check_writable()?;
        let path = self.resolve_path(path)?;
        validate_path(&path)?;
        if path == skills::REGISTRY_PATH {
            return Err(protected_file(
                &path,
                "read_only (generated by the runtime's skills indexer)",
            ));
        }
        let tx = crate::file::write_tx(&mut self.conn)?;
        let existing: Option<String> = tx
            .query_row(
                "SELECT protection FROM adf_files WHERE path = ?1",
                [&path],
                |row| row.get(0),
            )
            .optional()?;
        let now = time::now_iso();
        let mut outcome = WriteOutcome::default();
        let clear_authorized = caller.clears_authorization();
        match existing {
            Some(level) => {
                if level == "read_only" {
                    if caller.is_bound_by_protection() {
                        return Err(protected_file(&path, &level));
                    }
                    if caller.records_bypass() {
                        log_bypass(&tx, ProtectedKind::File, &path, &level)?;
                        outcome.bypassed = Some(level);
                    }
                }
                tx.execute(
                    "UPDATE adf_files SET content = ?2, size = ?3, updated_at = ?4,
                       mime_type = COALESCE(?5, mime_type),
                       authorized = CASE WHEN ?6 THEN 0 ELSE authorized END
                     WHERE path = ?1",
                    params![
                        path,
                        content,
                        content.len() as i64,
                        now,
                        options.mime_type,
                        clear_authorized
                    ],
                )?;
            }
            None => {
                let mime = options
                    .mime_type
                    .clone()
                    .unwrap_or_else(|| guess_mime(&path).to_owned());
                let protection = options.protection_if_new.unwrap_or(FileProtection::None);
                tx.execute(
                    "INSERT INTO adf_files (path, content, mime_type, size, protection, authorized, created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, ?6)",
                    params![path, content, mime, content.len() as i64, protection.as_str(), now],
                )?;
                outcome.created = true;
            }
        }
        if skills::affects_registry(&path) {
            skills::reindex(&tx)?;
        }
        crate::file::consume_marker(&tx, &self.marker_pending)?;
        tx.commit()?;
        Ok(outcome)
    }

    /// Deletes a file for `caller` (§4.2): an agent cannot delete `read_only` or `no_delete`
    /// files. With `audit.files` on, the file is snapshotted into `adf_audit` first.
    pub fn file_delete(&mut self, caller: Caller, path: &str) -> Result<WriteOutcome> {
        self.delete_file(caller, path, true)
    }

    /// Deletes a file as the owner from an owner surface (`adf rm`, the daemon's
    /// `DELETE /files/content`). The owner may delete anything, but a `read_only` or
    /// `no_delete` file is refused with [`StoreError::Protected`] unless `force` says the
    /// owner means it; the refusal is decided in the delete's own transaction, so the
    /// protection cannot change in between, and it leaves the file untouched.
    pub fn file_delete_as_owner(&mut self, path: &str, force: bool) -> Result<WriteOutcome> {
        self.delete_file(Caller::Owner, path, force)
    }

    fn delete_file(
        &mut self,
        caller: Caller,
        path: &str,
        owner_force: bool,
    ) -> Result<WriteOutcome> {
        self.check_writable()?;
        let path = self.resolve_path(path)?;
        if path == skills::REGISTRY_PATH && caller != Caller::Owner {
            return Err(protected_file(
                &path,
                "read_only (generated by the runtime's skills indexer)",
            ));
        }
        let audit_files = self.audit_enabled("files")?;
        let tx = crate::file::write_tx(&mut self.conn)?;
        let row: Option<(String, Vec<u8>, Option<String>, i64)> = tx
            .query_row(
                "SELECT protection, content, mime_type, size FROM adf_files WHERE path = ?1",
                [&path],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
            )
            .optional()?;
        let Some((level, content, mime_type, size)) = row else {
            return Err(StoreError::not_found("file", path));
        };
        let mut outcome = WriteOutcome::default();
        if level != "none" {
            let owner_unconfirmed = caller == Caller::Owner && !owner_force;
            if caller.is_bound_by_protection() || owner_unconfirmed {
                return Err(protected_file(&path, &level));
            }
            if caller.records_bypass() {
                log_bypass(&tx, ProtectedKind::File, &path, &level)?;
                outcome.bypassed = Some(level);
            }
        }
        if audit_files {
            let snapshot = serde_json::json!({
                "path": path,
                "content_base64": base64::engine::general_purpose::STANDARD.encode(&content),
                "mime_type": mime_type,
                "size": size,
            });
            audit::insert_snapshot(&tx, "file", None, Some(&path), 1, &snapshot)?;
        }
        tx.execute("DELETE FROM adf_files WHERE path = ?1", [&path])?;
        if skills::affects_registry(&path) || path == skills::REGISTRY_PATH {
            skills::reindex(&tx)?;
        }
        crate::file::consume_marker(&tx, &self.marker_pending)?;
        tx.commit()?;
        Ok(outcome)
    }

    /// Changes a file's protection: owner and authorized code only (`set_file_protection`).
    pub fn file_set_protection(
        &mut self,
        caller: Caller,
        path: &str,
        protection: FileProtection,
    ) -> Result<()> {
        if !caller.may_grant_trust() {
            return Err(StoreError::RequiresAuthorizedCode {
                action: "change file protection".into(),
            });
        }
        let path = self.resolve_path(path)?;
        let changed = self.update_existing(
            "UPDATE adf_files SET protection = ?2 WHERE path = ?1",
            params![path, protection.as_str()],
        )?;
        if changed == 0 {
            return Err(StoreError::not_found("file", path));
        }
        Ok(())
    }

    /// Marks a file as trusted code or withdraws that trust (§4.3): owner and authorized code only.
    pub fn file_set_authorized(
        &mut self,
        caller: Caller,
        path: &str,
        authorized: bool,
    ) -> Result<()> {
        if !caller.may_grant_trust() {
            return Err(StoreError::RequiresAuthorizedCode {
                action: "authorize files".into(),
            });
        }
        let path = self.resolve_path(path)?;
        let changed = self.update_existing(
            "UPDATE adf_files SET authorized = ?2 WHERE path = ?1",
            params![path, authorized],
        )?;
        if changed == 0 {
            return Err(StoreError::not_found("file", path));
        }
        Ok(())
    }
}
