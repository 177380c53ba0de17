//! `adf check`: validates a file against the spec and reports every problem it finds.
//!
//! Errors are spec violations; warnings are things the spec tolerates (an invalid config loads
//! with a warning, §5). Nothing here prints secret values: identity rows are reported by
//! purpose only.

use std::collections::{BTreeMap, BTreeSet};

use rusqlite::Connection;
use serde::Serialize;
use serde_json::Value;

use crate::config;
use crate::defaults::CORE_FILES;
use crate::error::Result;
use crate::file::AdfFile;
use crate::meta::{self, MetaProtection};
use crate::protection::FileProtection;
use crate::schema::{FORMAT_VERSION, SCHEMA_DDL, SCHEMA_VERSION, SYSTEM_INDEXES, SYSTEM_TABLES};
use crate::skills;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The file breaks a MUST of the spec or cannot be read as ADF.
    Error,
    /// The file is usable but deviates from a SHOULD (journal mode, config violations, ...).
    Warning,
}

/// One problem found in a file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Finding {
    /// How bad the problem is.
    pub severity: Severity,
    /// Spec section the rule comes from, such as `§3.2`.
    pub rule: &'static str,
    /// What is wrong, for a human to read.
    pub message: String,
}

/// Everything `check` found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckReport {
    /// Every finding, errors and warnings together.
    pub findings: Vec<Finding>,
}

impl CheckReport {
    /// The findings that break a MUST.
    pub fn errors(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
    }

    /// The findings that are only warnings.
    pub fn warnings(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
    }

    /// No finding is an error (warnings allowed).
    pub fn is_ok(&self) -> bool {
        self.errors().next().is_none()
    }

    fn error(&mut self, rule: &'static str, message: impl Into<String>) {
        self.findings.push(Finding {
            severity: Severity::Error,
            rule,
            message: message.into(),
        });
    }

    fn warn(&mut self, rule: &'static str, message: impl Into<String>) {
        self.findings.push(Finding {
            severity: Severity::Warning,
            rule,
            message: message.into(),
        });
    }
}

/// One column as `PRAGMA table_info` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Column {
    name: String,
    kind: String,
    not_null: bool,
    default: Option<String>,
    primary_key: i64,
}

fn columns(conn: &Connection, table: &str) -> Result<Vec<Column>> {
    let mut stmt = conn.prepare(&format!("PRAGMA table_info({table})"))?;
    let rows = stmt.query_map([], |row| {
        Ok(Column {
            name: row.get(1)?,
            kind: row.get(2)?,
            not_null: row.get::<_, i64>(3)? != 0,
            default: row.get(4)?,
            primary_key: row.get(5)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn object_sql(conn: &Connection, kind: &str) -> Result<BTreeMap<String, String>> {
    let mut stmt =
        conn.prepare("SELECT name, COALESCE(sql, '') FROM sqlite_master WHERE type = ?1")?;
    let rows = stmt.query_map([kind], |row| Ok((row.get(0)?, row.get(1)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Whitespace-insensitive form of a CREATE statement, for comparing against the DDL.
fn squash(sql: &str) -> String {
    sql.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("IF NOT EXISTS ", "")
        .replace("( ", "(")
        .replace(" )", ")")
}

/// A fresh in-memory database with the schema-32 DDL, the reference to compare against.
fn reference_schema() -> Result<Connection> {
    let conn = Connection::open_in_memory()?;
    conn.execute_batch(SCHEMA_DDL)?;
    Ok(conn)
}

impl AdfFile {
    /// Validates this file against the spec (§3, §4, §5, §8 storage) and returns every finding.
    pub fn check(&self) -> Result<CheckReport> {
        let mut report = CheckReport::default();
        let conn = &self.conn;

        let integrity: Vec<String> = conn
            .prepare("PRAGMA integrity_check")?
            .query_map([], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        if integrity != ["ok"] {
            report.error(
                "§3",
                format!("SQLite integrity check failed: {}", integrity.join("; ")),
            );
        }
        let encoding: String = conn.query_row("PRAGMA encoding", [], |row| row.get(0))?;
        if encoding != "UTF-8" {
            report.error("§0.2", format!("text encoding is {encoding}, not UTF-8"));
        }
        let journal: String = conn.query_row("PRAGMA journal_mode", [], |row| row.get(0))?;
        if journal != "wal" && self.mode() == crate::OpenMode::ReadWrite {
            report.warn("§3.1", format!("journal mode is {journal}, not WAL"));
        }

        let version = self.schema_version()?;
        if version != SCHEMA_VERSION {
            report.error(
                "§3.5",
                format!("storage schema is {version}, not {SCHEMA_VERSION}: run `adf migrate` to upgrade it"),
            );
            return Ok(report);
        }

        check_schema(conn, &mut report)?;
        check_meta(self, &mut report)?;
        if check_config_depth(self, &mut report)? {
            check_config(self, &mut report)?;
            check_unsupported_sections(self, &mut report);
        }
        check_files(self, &mut report)?;
        check_rows(conn, &mut report)?;
        check_identity(self, &mut report)?;
        report.findings.sort();
        Ok(report)
    }
}

fn check_schema(conn: &Connection, report: &mut CheckReport) -> Result<()> {
    let reference = reference_schema()?;
    let tables = object_sql(conn, "table")?;
    let reference_tables = object_sql(&reference, "table")?;
    for table in SYSTEM_TABLES {
        let Some(sql) = tables.get(table) else {
            report.error("§3.2", format!("table {table} is missing"));
            continue;
        };
        let expected = columns(&reference, table)?;
        let actual = columns(conn, table)?;
        for column in &expected {
            match actual.iter().find(|c| c.name == column.name) {
                None => report.error("§3.2", format!("{table}.{} is missing", column.name)),
                Some(found) if found != column => report.error(
                    "§3.2",
                    format!(
                        "{table}.{} is declared `{} {}{}` instead of `{} {}{}`",
                        column.name,
                        found.kind,
                        if found.not_null { "NOT NULL " } else { "" },
                        found
                            .default
                            .as_deref()
                            .map(|d| format!("DEFAULT {d}"))
                            .unwrap_or_default(),
                        column.kind,
                        if column.not_null { "NOT NULL " } else { "" },
                        column
                            .default
                            .as_deref()
                            .map(|d| format!("DEFAULT {d}"))
                            .unwrap_or_default(),
                    ),
                ),
                Some(_) => {}
            }
        }
        for extra in actual
            .iter()
            .filter(|c| !expected.iter().any(|e| e.name == c.name))
        {
            report.warn(
                "§0.2",
                format!("{table}.{} is not in the spec; it is preserved", extra.name),
            );
        }
        for check in ["CHECK(protection IN", "CHECK (id = 1)"] {
            let wanted = reference_tables
                .get(table)
                .is_some_and(|s| squash(s).contains(check));
            if wanted && !squash(sql).contains(check) {
                report.error("§3.2", format!("{table} lacks its {check}…) constraint"));
            }
        }
    }
    let indexes = object_sql(conn, "index")?;
    let reference_indexes = object_sql(&reference, "index")?;
    for (index, table) in SYSTEM_INDEXES {
        match (indexes.get(index), reference_indexes.get(index)) {
            (None, _) => report.error("§3.2", format!("index {index} on {table} is missing")),
            (Some(found), Some(expected)) if squash(found) != squash(expected) => {
                report.error(
                    "§3.2",
                    format!(
                        "index {index} is `{found}`, expected `{}`",
                        squash(expected)
                    ),
                );
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_meta(file: &AdfFile, report: &mut CheckReport) -> Result<()> {
    let entries = file.meta_list()?;
    let find = |key: &str| entries.iter().find(|e| e.key == key);
    match find("adf_version") {
        Some(entry) if entry.value == FORMAT_VERSION => {}
        Some(entry) => report.error(
            "§3.2",
            format!("adf_version is '{}', not '{FORMAT_VERSION}'", entry.value),
        ),
        None => report.error("§3.2", "required meta row adf_version is missing"),
    }
    for required in [
        "adf_schema_version",
        "adf_name",
        "adf_created_at",
        "adf_updated_at",
    ] {
        if find(required).is_none() {
            report.error("§3.3", format!("registry key {required} is missing"));
        }
    }
    for entry in &entries {
        if entry.key.starts_with("adf_") {
            match meta::registry_protection(&entry.key) {
                None => report.error(
                    "§3.3",
                    format!("meta key {} is not in the adf_ key registry", entry.key),
                ),
                Some(level) if level != entry.protection => {
                    let rule = if level == MetaProtection::Readonly {
                        "§4.4"
                    } else {
                        "§3.3"
                    };
                    report.error(
                        rule,
                        format!(
                            "meta key {} has protection {}, the registry says {}",
                            entry.key,
                            entry.protection,
                            level.as_str()
                        ),
                    );
                }
                Some(_) => {}
            }
        }
        if [
            "adf_attestations",
            "schema_version",
            "did",
            "owner_did",
            "runtime_did",
            "format",
            "identity_salt",
            "identity_kdf_params",
        ]
        .contains(&entry.key.as_str())
        {
            report.error(
                "§3.3",
                format!("retired meta key {} is still present", entry.key),
            );
        }
    }
    if file.mode() == crate::OpenMode::Inspect && find("adf_clean_close").is_none() {
        report.warn(
            "§3.3",
            "no clean-close marker: the last session did not close the file cleanly",
        );
    }
    Ok(())
}

fn check_config(file: &AdfFile, report: &mut CheckReport) -> Result<()> {
    let count: i64 = file
        .conn
        .query_row("SELECT COUNT(*) FROM adf_config", [], |row| row.get(0))?;
    if count != 1 {
        report.error(
            "§5",
            format!("adf_config holds {count} rows, not exactly one"),
        );
        if count == 0 {
            return Ok(());
        }
    }
    let config = match file.config() {
        Ok(config) => config,
        Err(error) => {
            report.error("§5", error.to_string());
            return Ok(());
        }
    };
    for violation in config::validate(&config) {
        report.warn("§5", format!("config {violation}"));
    }
    match config.get("id").and_then(Value::as_str) {
        Some(id) if id.chars().count() == 12 => {}
        Some(id) => report.warn(
            "§5.2",
            format!("config.id '{id}' is not a 12-character nanoid"),
        ),
        None => report.error("§5.2", "config.id is missing"),
    }
    let name = config.get("name").and_then(Value::as_str);
    if let (Some(name), Ok(Some(entry))) = (name, file.meta_get("adf_name"))
        && entry.value != name
    {
        report.warn(
            "§3.3",
            format!(
                "adf_name '{}' does not match config.name '{name}'",
                entry.value
            ),
        );
    }
    let mut seen = BTreeSet::new();
    for tool in config
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(name) = tool.get("name").and_then(Value::as_str)
            && !seen.insert(name)
        {
            report.warn(
                "§5.4",
                format!("tool {name} is declared more than once; the first declaration wins"),
            );
        }
    }
    // §8.5: an agent reachable from the internet should refuse unsigned messages.
    let public = config
        .pointer("/messaging/visibility")
        .and_then(Value::as_str)
        == Some("public");
    let allows_unsigned = config
        .pointer("/security/allow_unsigned")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    if public && allows_unsigned {
        report.warn(
            "§8.5",
            "messaging.visibility is public but security.allow_unsigned is true: an agent \
reachable from the internet should set security.allow_unsigned to false",
        );
    }
    for removed in ["loop_mode"] {
        if config.get(removed).is_some() {
            report.warn(
                "§5.1",
                format!("config.{removed} was removed from the format"),
            );
        }
    }
    Ok(())
}

/// A warning per configured section this runtime stores but does not run (see
/// [`crate::unsupported`]); a config that does not parse is `check_config`'s finding.
fn check_unsupported_sections(file: &AdfFile, report: &mut CheckReport) {
    let Ok(config) = file.config() else {
        return;
    };
    for section in crate::unsupported::unsupported_sections(&config) {
        report.warn(
            "§15",
            format!(
                "config {} is declared but this runtime does not run it yet: {}",
                section.path, section.what
            ),
        );
    }
}

/// A config nested deeper than [`MAX_CONFIG_DEPTH`] is an error of its own, measured on the
/// stored text (no parser reads it); the other config checks need a parse and are skipped.
/// Returns whether they can run (not when the table itself is missing).
fn check_config_depth(file: &AdfFile, report: &mut CheckReport) -> Result<bool> {
    use crate::config_depth::{MAX_CONFIG_DEPTH, raw_depth};
    use rusqlite::OptionalExtension as _;
    let table_exists: bool = file.conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'adf_config')",
        [],
        |row| row.get(0),
    )?;
    if !table_exists {
        // `check_schema` reported the missing table; there is no config to check.
        return Ok(false);
    }
    let text: Option<String> = file
        .conn
        .query_row(
            "SELECT config_json FROM adf_config WHERE id = 1",
            [],
            |row| row.get(0),
        )
        .optional()?;
    let Some(text) = text else {
        return Ok(true);
    };
    let (depth, key) = raw_depth(&text);
    if depth <= MAX_CONFIG_DEPTH {
        return Ok(true);
    }
    let repair = match key {
        Some(key) => {
            format!(" (deepest under '{key}'; replace it with `adf config set <file> {key} null`)")
        }
        None => String::new(),
    };
    report.error(
        "§5",
        format!("config nested {depth} levels deep, deeper than {MAX_CONFIG_DEPTH}{repair}"),
    );
    Ok(false)
}

fn check_files(file: &AdfFile, report: &mut CheckReport) -> Result<()> {
    let files = file.file_list("")?;
    for core in CORE_FILES {
        match files.iter().find(|f| f.path == core) {
            None => report.error("§4.1", format!("reserved file {core} is missing")),
            Some(info) if info.protection == FileProtection::None => {
                report.warn(
                    "§4.1",
                    format!(
                        "reserved file {core} has protection {}, normally no_delete",
                        info.protection
                    ),
                );
            }
            Some(_) => {}
        }
    }
    match files.iter().find(|f| f.path == skills::REGISTRY_PATH) {
        None => report.error(
            "§5.1",
            "skills-registry.json is missing; opening the file with the runtime creates it",
        ),
        Some(info) if info.protection != FileProtection::ReadOnly => {
            report.warn(
                "§4.1",
                format!(
                    "skills-registry.json has protection {}, normally read_only",
                    info.protection
                ),
            );
        }
        Some(_) => {}
    }
    let mismatched: Vec<String> = file
        .conn
        .prepare("SELECT path FROM adf_files WHERE size != length(CAST(content AS BLOB))")?
        .query_map([], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for path in mismatched {
        report.error(
            "§3.3",
            format!("adf_files.size of {path} does not match its content length"),
        );
    }
    for info in &files {
        if crate::files::validate_path(&info.path).is_err() {
            report.warn(
                "§4",
                format!(
                    "file path '{}' is not a normalized relative path",
                    info.path
                ),
            );
        }
    }
    Ok(())
}

/// JSON columns must hold JSON (§0.2) and flags must be integers 0/1.
fn check_rows(conn: &Connection, report: &mut CheckReport) -> Result<()> {
    let json_columns = [
        ("adf_inbox", "attachments"),
        ("adf_inbox", "meta"),
        ("adf_inbox", "source_context"),
        ("adf_outbox", "attachments"),
        ("adf_outbox", "meta"),
        ("adf_timers", "schedule_json"),
        ("adf_timers", "scope"),
        ("adf_tasks", "args"),
        ("adf_tasks", "approval_meta"),
        ("adf_loop", "content_json"),
        ("adf_logs", "data"),
    ];
    let flags = [
        ("adf_files", "authorized"),
        ("adf_timers", "locked"),
        ("adf_timers", "warm"),
        ("adf_timers", "expired"),
        ("adf_identity", "code_access"),
        ("adf_tasks", "requires_authorization"),
        ("adf_tasks", "executor_managed"),
    ];
    // Each rule: its columns, the condition a bad value meets, and the finding.
    let rules = [
        (
            &json_columns[..],
            "{c} IS NOT NULL AND json_valid({c}) = 0",
            "do not hold valid JSON",
        ),
        (
            &flags[..],
            "{c} NOT IN (0, 1) OR typeof({c}) != 'integer'",
            "are not integer 0/1",
        ),
    ];
    for (columns, bad_when, finding) in rules {
        for (table, column) in columns {
            let condition = bad_when.replace("{c}", column);
            let bad: i64 = conn.query_row(
                &format!("SELECT COUNT(*) FROM {table} WHERE {condition}"),
                [],
                |row| row.get(0),
            )?;
            if bad > 0 {
                report.error(
                    "§0.2",
                    format!("{bad} row(s) of {table}.{column} {finding}"),
                );
            }
        }
    }
    let roles: i64 = conn.query_row(
        "SELECT COUNT(*) FROM adf_loop WHERE role NOT IN ('user', 'assistant')",
        [],
        |row| row.get(0),
    )?;
    if roles > 0 {
        report.error(
            "§3.3",
            format!("{roles} adf_loop row(s) have a role other than user or assistant"),
        );
    }
    Ok(())
}

fn check_identity(file: &AdfFile, report: &mut CheckReport) -> Result<()> {
    let did = file
        .meta_get("adf_did")?
        .map(|e| e.value)
        .unwrap_or_default();
    let rows = file.identity_rows()?;
    let has_private = rows
        .iter()
        .any(|r| r.purpose == "crypto:signing:private_key");
    if did.is_empty() || !has_private {
        report.error(
            "§8.1",
            "the agent has no identity (no adf_did or no signing key): run `adf claim FILE` to provision one",
        );
    } else if !did.starts_with("did:key:z6Mk") {
        report.error("§8.1", format!("adf_did '{did}' is not an Ed25519 did:key"));
    }
    for row in &rows {
        let algo = row.encryption_algo.as_str();
        if !(algo == "plain" || algo == "aes-256-gcm" || algo.starts_with("env:")) {
            report.error(
                "§8.2",
                format!(
                    "identity row {} has unknown encryption_algo {algo}",
                    row.purpose
                ),
            );
        }
        let covered = if row.purpose == "crypto:signing:private_key" {
            Some("env:identity")
        } else if row.purpose.starts_with("crypto:") {
            None
        } else {
            Some("env:credentials")
        };
        if let Some(envelope) = covered
            && algo.starts_with("env:")
            && algo != envelope
        {
            report.error(
                "§8.2",
                format!(
                    "identity row {} is sealed in {algo}, expected {envelope}",
                    row.purpose
                ),
            );
        }
    }
    Ok(())
}
