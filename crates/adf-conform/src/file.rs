//! `adf conform file`: the file-level requirements judgeable from the bytes alone.
//!
//! The file is read through [`adf_store::inspection`] opened `immutable=1`, so no byte of it
//! changes. A file with a `-wal` sidecar (another process has it open, or it crashed) is
//! copied with its sidecar into a private directory and the copy is read, so committed WAL
//! frames count and the original is still never opened by SQLite.
//!
//! Checks that apply only to the current schema (32) skip on an older file: a runtime
//! migrates it on open (STO-26), so its older shape is no violation.

use std::path::Path;

use adf_store::inspection::{ColumnFacts, FileFacts};
use adf_store::meta::registry_protection;
use adf_store::schema::{FORMAT_VERSION, OLDEST_MIGRATABLE_SCHEMA, SCHEMA_VERSION};

use crate::{CheckResult, ConformError, Outcome, Report};

/// What one file judge sees.
#[derive(Debug)]
pub struct Subject {
    /// The facts read from the file.
    pub facts: FileFacts,
    /// The file had a `-wal` sidecar next to it.
    pub had_wal: bool,
}

impl Subject {
    fn schema(&self) -> Option<u32> {
        self.facts
            .meta_value("adf_schema_version")
            .and_then(|m| m.value.parse().ok())
    }

    /// Skips unless the file is at the current schema.
    fn current_schema(&self) -> Result<(), Outcome> {
        match self.schema() {
            Some(SCHEMA_VERSION) => Ok(()),
            Some(found) => Err(Outcome::skip(format!(
                "the file is at schema {found}; this requirement is judged at schema {SCHEMA_VERSION} (a runtime migrates on open)"
            ))),
            None => Err(Outcome::skip("the file declares no schema version")),
        }
    }
}

/// One row of the file table.
#[derive(Debug)]
pub struct FileCheck {
    /// Stable name.
    pub name: &'static str,
    /// Checklist IDs judged.
    pub ids: &'static [&'static str],
    /// Report section.
    pub section: &'static str,
    /// The requirement.
    pub description: &'static str,
    /// The judge.
    pub judge: fn(&Subject) -> Outcome,
}

/// Every file check, in report order.
pub const FILE_CHECKS: &[FileCheck] = &[
    FileCheck {
        name: "storage.sqlite_utf8",
        ids: &["STO-01"],
        section: "storage",
        description: "SQLite 3 database with UTF-8 text encoding",
        judge: sqlite_utf8,
    },
    FileCheck {
        name: "storage.integrity",
        ids: &["STO-01", "STO-46"],
        section: "storage",
        description: "SQLite's integrity check answers ok",
        judge: integrity,
    },
    FileCheck {
        name: "storage.wal_mode",
        ids: &["STO-02"],
        section: "storage",
        description: "the database header records WAL journal mode",
        judge: wal_mode,
    },
    FileCheck {
        name: "storage.schema_version",
        ids: &["STO-19", "STO-26", "STO-27"],
        section: "storage",
        description: "adf_version is 0.2 and adf_schema_version a known schema (≤ 32), both readonly",
        judge: schema_version,
    },
    FileCheck {
        name: "storage.system_tables",
        ids: &["STO-14", "STO-10"],
        section: "storage",
        description: "the 12 adf_ tables exist with the §3.2 columns (extra columns allowed)",
        judge: system_tables,
    },
    FileCheck {
        name: "storage.system_indexes",
        ids: &["STO-15", "STO-34"],
        section: "storage",
        description: "every §3.2 index exists with its DDL",
        judge: system_indexes,
    },
    FileCheck {
        name: "storage.meta_protection_check",
        ids: &["STO-16"],
        section: "storage",
        description: "adf_meta.protection is CHECKed to none/readonly/increment and rows obey it",
        judge: meta_protection_check,
    },
    FileCheck {
        name: "storage.files_protection_check",
        ids: &["STO-17"],
        section: "storage",
        description: "adf_files.protection is CHECKed to read_only/no_delete/none and rows obey it",
        judge: files_protection_check,
    },
    FileCheck {
        name: "storage.config_single_row",
        ids: &["STO-18"],
        section: "storage",
        description: "adf_config holds exactly one row, id 1, CHECKed",
        judge: config_single_row,
    },
    FileCheck {
        name: "storage.boolean_flags",
        ids: &["STO-08"],
        section: "storage",
        description: "boolean flag columns hold INTEGER 0/1",
        judge: boolean_flags,
    },
    FileCheck {
        name: "storage.json_columns",
        ids: &["STO-09"],
        section: "storage",
        description: "structured TEXT columns hold valid JSON",
        judge: json_columns,
    },
    FileCheck {
        name: "storage.clean_close",
        ids: &["STO-46"],
        section: "storage",
        description: "a closed file (no -wal sidecar) carries the adf_clean_close marker",
        judge: clean_close,
    },
    FileCheck {
        name: "meta.registry",
        ids: &["MET-01", "MET-02", "MET-03"],
        section: "meta",
        description: "every adf_* meta key is in the registry with its listed protection",
        judge: meta_registry,
    },
    FileCheck {
        name: "meta.identity_keys_readonly",
        ids: &["MET-04"],
        section: "meta",
        description: "adf_did, adf_owner_did, adf_runtime_did, adf_did_history are readonly",
        judge: identity_keys_readonly,
    },
    FileCheck {
        name: "config.parses",
        ids: &["STO-09", "STO-12"],
        section: "config",
        description: "config_json is a JSON object declaring adf_version 0.2",
        judge: config_parses,
    },
    FileCheck {
        name: "config.schema",
        ids: &["CFG-01", "CFG-35", "CFG-36"],
        section: "config",
        description: "the config has no schema violation (§5)",
        judge: config_schema,
    },
    FileCheck {
        name: "files.core_files",
        ids: &["FIL-01", "FIL-02", "FIL-03"],
        section: "files",
        description: "README.md, mind.md, mind/log.md, soul.md exist (no_delete or read_only)",
        judge: core_files,
    },
    FileCheck {
        name: "files.size_matches",
        ids: &["FIL-18"],
        section: "files",
        description: "adf_files.size equals the byte length of content",
        judge: file_sizes,
    },
    FileCheck {
        name: "identity.did_format",
        ids: &["IDN-03", "IDN-01"],
        section: "identity",
        description: "adf_did is '' or did:key:z + base58btc(0xed01‖pub) of the stored public key",
        judge: did_format,
    },
    FileCheck {
        name: "identity.sealed_rows",
        ids: &["IDN-12", "IDN-19"],
        section: "identity",
        description: "env:* sealed rows are iv(12)‖ct‖tag(16) with NULL salt and kdf_params",
        judge: sealed_rows,
    },
    FileCheck {
        name: "identity.envelope_descriptors",
        ids: &["IDN-13", "IDN-16"],
        section: "identity",
        description: "envelope descriptors are JSON with slots; the identity envelope has no password slot",
        judge: envelope_descriptors,
    },
    FileCheck {
        name: "audit.encoding",
        ids: &["STO-48", "AUD-08"],
        section: "audit",
        description: "adf_audit blobs are brotli-compressed JSON",
        judge: audit_encoding,
    },
];

/// Judges the file at `path` without changing a byte of it.
pub fn check_file(path: &Path) -> Result<Report, ConformError> {
    let unreadable = |detail: String| ConformError::Unreadable {
        path: path.display().to_string(),
        detail,
    };
    let wal = adf_store::sidecar(path, "-wal");
    let had_wal = wal.exists();
    let facts = if had_wal {
        // Committed frames in the sidecar are part of the file's content; reading them needs
        // a non-immutable connection, which may create `-shm`, so it reads a private copy.
        let dir = tempfile::tempdir()?;
        let copy = dir.path().join("copy.adf");
        std::fs::copy(path, &copy)?;
        std::fs::copy(&wal, adf_store::sidecar(&copy, "-wal"))?;
        FileFacts::read(&copy, true).map_err(|e| unreadable(e.to_string()))?
    } else {
        FileFacts::read(path, false).map_err(|e| unreadable(e.to_string()))?
    };
    let subject = Subject { facts, had_wal };
    Ok(Report {
        subject: "file",
        target: path.display().to_string(),
        results: FILE_CHECKS
            .iter()
            .map(|check| {
                let outcome = (check.judge)(&subject);
                CheckResult {
                    name: check.name,
                    ids: check.ids,
                    section: check.section,
                    description: check.description,
                    status: outcome.status,
                    detail: outcome.detail,
                }
            })
            .collect(),
    })
}

fn sqlite_utf8(s: &Subject) -> Outcome {
    if s.facts.encoding == "UTF-8" {
        Outcome::pass()
    } else {
        Outcome::fail(format!("text encoding is {}", s.facts.encoding))
    }
}

fn integrity(s: &Subject) -> Outcome {
    if s.facts.integrity == ["ok"] {
        Outcome::pass()
    } else {
        Outcome::from_problems(s.facts.integrity.clone())
    }
}

fn wal_mode(s: &Subject) -> Outcome {
    if s.facts.wal_header {
        Outcome::pass()
    } else {
        Outcome::fail("header bytes 18/19 are not 2: the file is not in WAL mode")
    }
}

fn schema_version(s: &Subject) -> Outcome {
    let mut problems = Vec::new();
    match s.facts.meta_value("adf_version") {
        Some(m) if m.value == FORMAT_VERSION && m.protection == "readonly" => {}
        Some(m) => problems.push(format!(
            "adf_version is '{}' ({}), expected '{FORMAT_VERSION}' (readonly)",
            m.value, m.protection
        )),
        None => problems.push("adf_version is missing".to_owned()),
    }
    match s.facts.meta_value("adf_schema_version") {
        Some(m) => match m.value.parse::<u32>() {
            Ok(v) if v > SCHEMA_VERSION => problems.push(format!(
                "schema {v} is newer than {SCHEMA_VERSION}, the newest this kit knows"
            )),
            Ok(v) if v < OLDEST_MIGRATABLE_SCHEMA => problems.push(format!(
                "schema {v} is older than any migratable schema ({OLDEST_MIGRATABLE_SCHEMA})"
            )),
            Ok(_) if m.protection != "readonly" => problems.push(format!(
                "adf_schema_version has protection {}, expected readonly",
                m.protection
            )),
            Ok(_) => {}
            Err(_) => problems.push(format!("adf_schema_version is '{}', not a number", m.value)),
        },
        None => problems.push("adf_schema_version is missing".to_owned()),
    }
    Outcome::from_problems(problems)
}

fn same_column(found: &ColumnFacts, expected: &ColumnFacts) -> bool {
    found.kind.eq_ignore_ascii_case(&expected.kind)
        && found.not_null == expected.not_null
        && found.default == expected.default
        && found.primary_key == expected.primary_key
}

fn system_tables(s: &Subject) -> Outcome {
    if let Err(skip) = s.current_schema() {
        return skip;
    }
    let mut problems = Vec::new();
    for (table, expected) in &s.facts.reference_tables {
        if table.starts_with("sqlite_") {
            continue;
        }
        let Some(found) = s.facts.tables.get(table) else {
            problems.push(format!("table {table} is missing"));
            continue;
        };
        for column in expected {
            match found.iter().find(|c| c.name == column.name) {
                None => problems.push(format!("{table}.{} is missing", column.name)),
                Some(c) if !same_column(c, column) => problems.push(format!(
                    "{table}.{}: found {} notnull={} default={:?} pk={}, expected {} notnull={} default={:?} pk={}",
                    column.name,
                    c.kind,
                    c.not_null,
                    c.default,
                    c.primary_key,
                    column.kind,
                    column.not_null,
                    column.default,
                    column.primary_key
                )),
                Some(_) => {}
            }
        }
    }
    Outcome::from_problems(problems)
}

/// Whitespace- and `IF NOT EXISTS`-insensitive form of a CREATE statement.
fn squash(sql: &str) -> String {
    sql.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("IF NOT EXISTS ", "")
        .replace("( ", "(")
        .replace(" )", ")")
        .replace(", ", ",")
}

fn system_indexes(s: &Subject) -> Outcome {
    if let Err(skip) = s.current_schema() {
        return skip;
    }
    let mut problems = Vec::new();
    for (index, expected) in &s.facts.reference_indexes {
        if expected.is_empty() {
            continue; // automatic indexes (primary keys) have no SQL
        }
        match s.facts.indexes.get(index) {
            None => problems.push(format!("index {index} is missing")),
            Some(found) if squash(found) != squash(expected) => {
                problems.push(format!("index {index} is `{found}`"));
            }
            Some(_) => {}
        }
    }
    Outcome::from_problems(problems)
}

fn table_has_check(s: &Subject, table: &str, check: &str) -> Result<(), String> {
    match s.facts.table_sql.get(table) {
        None => Err(format!("table {table} is missing")),
        Some(sql) if squash(sql).replace(' ', "").contains(check) => Ok(()),
        Some(_) => Err(format!("{table} has no `{check}` constraint")),
    }
}

fn meta_protection_check(s: &Subject) -> Outcome {
    let mut problems = Vec::new();
    if let Err(p) = table_has_check(
        s,
        "adf_meta",
        "CHECK(protectionIN('none','readonly','increment'))",
    ) {
        problems.push(p);
    }
    for m in s.facts.meta.iter().flatten() {
        if !["none", "readonly", "increment"].contains(&m.protection.as_str()) {
            problems.push(format!("meta {} has protection '{}'", m.key, m.protection));
        }
    }
    Outcome::from_problems(problems)
}

fn files_protection_check(s: &Subject) -> Outcome {
    let mut problems = Vec::new();
    if let Err(p) = table_has_check(
        s,
        "adf_files",
        "CHECK(protectionIN('read_only','no_delete','none'))",
    ) {
        problems.push(p);
    }
    for f in s.facts.files.iter().flatten() {
        if !["read_only", "no_delete", "none"].contains(&f.protection.as_str()) {
            problems.push(format!("file {} has protection '{}'", f.path, f.protection));
        }
    }
    Outcome::from_problems(problems)
}

fn config_single_row(s: &Subject) -> Outcome {
    let mut problems = Vec::new();
    if let Err(p) = table_has_check(s, "adf_config", "CHECK(id=1)") {
        problems.push(p);
    }
    match &s.facts.config_rows {
        None => problems.push("adf_config cannot be read".to_owned()),
        Some(rows) if rows.len() == 1 && rows[0].0 == "1" => {}
        Some(rows) => problems.push(format!(
            "adf_config has {} row(s) with ids [{}]",
            rows.len(),
            rows.iter()
                .map(|r| r.0.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
    Outcome::from_problems(problems)
}

fn boolean_flags(s: &Subject) -> Outcome {
    Outcome::from_problems(
        s.facts
            .non_integer_flags
            .iter()
            .map(|cell| format!("{cell} is not INTEGER 0/1"))
            .collect(),
    )
}

fn json_columns(s: &Subject) -> Outcome {
    Outcome::from_problems(
        s.facts
            .invalid_json_cells
            .iter()
            .map(|cell| format!("{cell} is not valid JSON"))
            .collect(),
    )
}

fn clean_close(s: &Subject) -> Outcome {
    if s.had_wal {
        return Outcome::skip(
            "the file has a -wal sidecar: it is open (or its runtime crashed), so no marker is expected",
        );
    }
    if s.facts.meta_value("adf_clean_close").is_some() {
        Outcome::pass()
    } else {
        Outcome::fail("no adf_clean_close marker in a file without a -wal sidecar")
    }
}

fn meta_registry(s: &Subject) -> Outcome {
    if let Err(skip) = s.current_schema() {
        return skip;
    }
    let Some(meta) = &s.facts.meta else {
        return Outcome::fail("adf_meta cannot be read");
    };
    let mut problems = Vec::new();
    for m in meta.iter().filter(|m| m.key.starts_with("adf_")) {
        match registry_protection(&m.key) {
            None => problems.push(format!("{} is not in the registry", m.key)),
            Some(p) if p.as_str() != m.protection => problems.push(format!(
                "{} has protection {}, the registry lists {}",
                m.key,
                m.protection,
                p.as_str()
            )),
            Some(_) => {}
        }
    }
    Outcome::from_problems(problems)
}

fn identity_keys_readonly(s: &Subject) -> Outcome {
    let mut problems = Vec::new();
    for key in [
        "adf_did",
        "adf_owner_did",
        "adf_runtime_did",
        "adf_did_history",
    ] {
        if let Some(m) = s.facts.meta_value(key)
            && m.protection != "readonly"
        {
            problems.push(format!("{key} has protection {}", m.protection));
        }
    }
    Outcome::from_problems(problems)
}

fn config_value(s: &Subject) -> Result<serde_json::Value, Outcome> {
    let Some(rows) = &s.facts.config_rows else {
        return Err(Outcome::fail("adf_config cannot be read"));
    };
    let Some((_, text)) = rows.iter().find(|r| r.0 == "1") else {
        return Err(Outcome::fail("adf_config has no row 1"));
    };
    serde_json::from_str(text).map_err(|e| Outcome::fail(format!("config_json is not JSON: {e}")))
}

fn config_parses(s: &Subject) -> Outcome {
    let config = match config_value(s) {
        Ok(c) => c,
        Err(outcome) => return outcome,
    };
    match config.get("adf_version").and_then(|v| v.as_str()) {
        _ if !config.is_object() => Outcome::fail("config_json is not a JSON object"),
        Some(FORMAT_VERSION) => Outcome::pass(),
        Some(other) => Outcome::fail(format!("config adf_version is '{other}'")),
        None => Outcome::fail("config has no adf_version"),
    }
}

fn config_schema(s: &Subject) -> Outcome {
    if let Err(skip) = s.current_schema() {
        return skip;
    }
    let config = match config_value(s) {
        Ok(c) => c,
        Err(_) => return Outcome::skip("the config does not parse (judged by config.parses)"),
    };
    Outcome::from_problems(
        adf_store::config::validate(&config)
            .iter()
            .map(ToString::to_string)
            .collect(),
    )
}

fn core_files(s: &Subject) -> Outcome {
    let Some(files) = &s.facts.files else {
        return Outcome::fail("adf_files cannot be read");
    };
    let mut problems = Vec::new();
    for path in adf_store::defaults::CORE_FILES {
        match files.iter().find(|f| f.path == path) {
            None => problems.push(format!("{path} is missing")),
            Some(f) if f.protection == "none" => {
                problems.push(format!("{path} has protection none"));
            }
            Some(_) => {}
        }
    }
    Outcome::from_problems(problems)
}

fn file_sizes(s: &Subject) -> Outcome {
    let Some(files) = &s.facts.files else {
        return Outcome::fail("adf_files cannot be read");
    };
    let mut problems: Vec<String> = files
        .iter()
        .filter(|f| f.size != f.content_len)
        .map(|f| {
            format!(
                "{}: size {} but content is {} bytes",
                f.path, f.size, f.content_len
            )
        })
        .collect();
    problems.extend(
        files
            .iter()
            .filter(|f| f.authorized_type != "integer")
            .map(|f| format!("{}: authorized is {}", f.path, f.authorized_type)),
    );
    Outcome::from_problems(problems)
}

/// The raw 32 bytes of an Ed25519 public key stored raw or as SPKI DER (12-byte prefix).
fn raw_public_key(value: &[u8]) -> Option<[u8; 32]> {
    const SPKI_PREFIX: [u8; 12] = [
        0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
    ];
    let raw = match value.len() {
        32 => value,
        44 if value.starts_with(&SPKI_PREFIX) => &value[12..],
        _ => return None,
    };
    raw.try_into().ok()
}

fn did_format(s: &Subject) -> Outcome {
    let Some(did) = s.facts.meta_value("adf_did") else {
        return Outcome::skip("the file has no adf_did (provisioned on first open, IDN-02)");
    };
    if did.value.is_empty() {
        return Outcome::pass();
    }
    let Ok(public) = adf_crypto::did::public_bytes_from_did(&did.value) else {
        return Outcome::fail(format!(
            "adf_did '{}' is not a did:key Ed25519 DID",
            did.value
        ));
    };
    let stored = s
        .facts
        .identity
        .iter()
        .flatten()
        .find(|row| row.purpose == "crypto:signing:public_key")
        .and_then(|row| row.public_value.as_deref());
    match stored {
        None => Outcome::fail("adf_did is set but crypto:signing:public_key is missing"),
        Some(value) => match raw_public_key(value) {
            Some(raw) if raw == public => Outcome::pass(),
            Some(_) => Outcome::fail("adf_did does not encode the stored signing public key"),
            None => Outcome::fail(format!(
                "crypto:signing:public_key is {} bytes, neither raw nor SPKI Ed25519",
                value.len()
            )),
        },
    }
}

fn sealed_rows(s: &Subject) -> Outcome {
    let Some(rows) = &s.facts.identity else {
        return Outcome::skip("adf_identity cannot be read");
    };
    let sealed: Vec<_> = rows
        .iter()
        .filter(|r| r.algo.as_deref().is_some_and(|a| a.starts_with("env:")))
        .collect();
    if sealed.is_empty() {
        return Outcome::skip("no env:* sealed rows in this file");
    }
    let mut problems = Vec::new();
    for row in sealed {
        let algo = row.algo.as_deref().unwrap_or_default();
        if !["env:identity", "env:credentials"].contains(&algo) {
            problems.push(format!("{}: unknown envelope {algo}", row.purpose));
        }
        if row.value_len < 12 + 16 {
            problems.push(format!(
                "{}: {} bytes, shorter than iv(12)+tag(16)",
                row.purpose, row.value_len
            ));
        }
        if row.has_salt || row.has_kdf_params {
            problems.push(format!("{}: salt/kdf_params not NULL", row.purpose));
        }
    }
    Outcome::from_problems(problems)
}

fn envelope_descriptors(s: &Subject) -> Outcome {
    let Some(rows) = &s.facts.identity else {
        return Outcome::skip("adf_identity cannot be read");
    };
    let descriptors: Vec<_> = rows
        .iter()
        .filter(|r| r.purpose.starts_with("crypto:envelope:"))
        .collect();
    if descriptors.is_empty() {
        return Outcome::skip("no envelope descriptors in this file");
    }
    let mut problems = Vec::new();
    for row in descriptors {
        let value = row.public_value.as_deref().unwrap_or_default();
        let Ok(json) = serde_json::from_slice::<serde_json::Value>(value) else {
            problems.push(format!("{} is not JSON", row.purpose));
            continue;
        };
        let Some(slots) = json.get("slots").and_then(|v| v.as_array()) else {
            problems.push(format!("{} has no slots array", row.purpose));
            continue;
        };
        if row.purpose == "crypto:envelope:identity"
            && slots
                .iter()
                .any(|slot| slot.get("type").and_then(|t| t.as_str()) == Some("password"))
        {
            problems.push("the identity envelope has a password slot".to_owned());
        }
    }
    Outcome::from_problems(problems)
}

fn audit_encoding(s: &Subject) -> Outcome {
    let Some(rows) = &s.facts.audit else {
        return Outcome::fail("adf_audit cannot be read");
    };
    if rows.is_empty() {
        return Outcome::skip("adf_audit is empty");
    }
    Outcome::from_problems(
        rows.iter()
            .filter(|r| !r.decodes)
            .map(|r| format!("audit row {} ({}) is not brotli JSON", r.id, r.source))
            .collect(),
    )
}
