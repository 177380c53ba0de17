//! Read-only facts about any SQLite file, for judges outside this crate (`adf conform file`).
//!
//! The conformance kit judges files other runtimes wrote, so nothing here assumes the file is
//! ours or even an agent file: every read tolerates a missing table or column and reports what
//! it found. The connection is `immutable=1` (no lock, no sidecar, no byte changed) unless the
//! caller asks to see a WAL's frames, which it does only on a private copy of the file.

use std::collections::BTreeMap;
use std::path::Path;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};

use crate::error::Result;
use crate::schema::SCHEMA_DDL;

/// One column as `PRAGMA table_info` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnFacts {
    /// Column name.
    pub name: String,
    /// Declared type.
    pub kind: String,
    /// `NOT NULL` declared.
    pub not_null: bool,
    /// Default expression as written.
    pub default: Option<String>,
    /// Position in the primary key (0 = not part of it).
    pub primary_key: i64,
}

/// One `adf_meta` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaFacts {
    /// The key.
    pub key: String,
    /// The value as text.
    pub value: String,
    /// The protection as stored.
    pub protection: String,
}

/// One `adf_identity` row, described without its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityFacts {
    /// The row's purpose.
    pub purpose: String,
    /// `encryption_algo` as stored.
    pub algo: Option<String>,
    /// Byte length of `value`.
    pub value_len: usize,
    /// Whether `salt` is non-NULL.
    pub has_salt: bool,
    /// Whether `kdf_params` is non-NULL.
    pub has_kdf_params: bool,
    /// `code_access` as stored (its SQLite type name and text).
    pub code_access: String,
    /// The value when the row is public by its purpose (the signing public key, envelope
    /// descriptors); never for any other row, so no secret leaves this crate.
    pub public_value: Option<Vec<u8>>,
}

/// One `adf_files` row, without its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRowFacts {
    /// The path.
    pub path: String,
    /// The protection as stored.
    pub protection: String,
    /// `authorized` as SQLite type name.
    pub authorized_type: String,
    /// `size` column.
    pub size: i64,
    /// Byte length of `content`.
    pub content_len: i64,
}

/// One `adf_audit` row's encoding facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditFacts {
    /// Row id.
    pub id: i64,
    /// `source` column.
    pub source: String,
    /// Whether `data` decompresses (brotli) to JSON.
    pub decodes: bool,
}

/// Everything the kit reads from one file.
#[derive(Debug, Clone, Default)]
pub struct FileFacts {
    /// `PRAGMA encoding`.
    pub encoding: String,
    /// `PRAGMA integrity_check` lines (`["ok"]` when sound).
    pub integrity: Vec<String>,
    /// The header's read/write version bytes are 2 (WAL).
    pub wal_header: bool,
    /// Columns of every table in the file.
    pub tables: BTreeMap<String, Vec<ColumnFacts>>,
    /// `sqlite_master` SQL of every index, by name.
    pub indexes: BTreeMap<String, String>,
    /// `sqlite_master` SQL of every table, by name.
    pub table_sql: BTreeMap<String, String>,
    /// The same for a fresh schema-32 database, to compare against.
    pub reference_tables: BTreeMap<String, Vec<ColumnFacts>>,
    /// Reference index SQL by name.
    pub reference_indexes: BTreeMap<String, String>,
    /// Reference table SQL by name.
    pub reference_table_sql: BTreeMap<String, String>,
    /// `adf_meta` rows, when the table can be read.
    pub meta: Option<Vec<MetaFacts>>,
    /// `adf_config` rows as `(id, config_json)`, when the table can be read.
    pub config_rows: Option<Vec<(String, String)>>,
    /// `adf_identity` rows, when the table can be read.
    pub identity: Option<Vec<IdentityFacts>>,
    /// `adf_files` rows, when the table can be read.
    pub files: Option<Vec<FileRowFacts>>,
    /// `adf_audit` rows, when the table can be read.
    pub audit: Option<Vec<AuditFacts>>,
    /// `(table.column, rowid, SQLite type)` for every boolean flag cell that is not INTEGER.
    pub non_integer_flags: Vec<String>,
    /// `table.column#rowid` for every structured TEXT cell that is not valid JSON.
    pub invalid_json_cells: Vec<String>,
}

/// Boolean flag columns (§0.2): stored as INTEGER 0/1.
const FLAG_COLUMNS: [(&str, &str); 6] = [
    ("adf_files", "authorized"),
    ("adf_timers", "locked"),
    ("adf_timers", "warm"),
    ("adf_identity", "code_access"),
    ("adf_tasks", "requires_authorization"),
    ("adf_tasks", "executor_managed"),
];

/// Structured TEXT columns (§0.2): JSON strings when non-NULL.
const JSON_COLUMNS: [(&str, &str); 8] = [
    ("adf_inbox", "attachments"),
    ("adf_inbox", "meta"),
    ("adf_outbox", "attachments"),
    ("adf_outbox", "meta"),
    ("adf_timers", "schedule_json"),
    ("adf_tasks", "args"),
    ("adf_tasks", "approval_meta"),
    ("adf_config", "config_json"),
];

/// Identity purposes whose value is public (a public key, envelope descriptors), never a secret.
fn is_public_purpose(purpose: &str) -> bool {
    purpose == "crypto:signing:public_key" || purpose.starts_with("crypto:envelope:")
}

impl FileFacts {
    /// Reads the facts of `path`. With `see_wal` false the file is opened `immutable=1`:
    /// nothing is locked or created and no byte can change, but a WAL sidecar's frames are
    /// not seen. With `see_wal` true it is opened read-only so committed WAL frames count —
    /// callers do that only on a private copy, since such a connection may create `-shm`.
    pub fn read(path: &Path, see_wal: bool) -> Result<Self> {
        crate::prepare_sqlite();
        let mut escaped = String::new();
        for c in path.to_string_lossy().chars() {
            match c {
                '%' | '?' | '#' => escaped.push_str(&format!("%{:02X}", c as u32)),
                _ => escaped.push(c),
            }
        }
        let uri = format!(
            "file:{escaped}{}",
            if see_wal { "?mode=ro" } else { "?immutable=1" }
        );
        let conn = Connection::open_with_flags(
            &uri,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
        )?;
        let mut facts = Self {
            wal_header: wal_header(path),
            ..Self::default()
        };
        facts.encoding = conn.query_row("PRAGMA encoding", [], |r| r.get(0))?;
        facts.integrity = conn
            .prepare("PRAGMA integrity_check")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        (facts.tables, facts.table_sql, facts.indexes) = schema_of(&conn)?;
        let reference = Connection::open_in_memory()?;
        reference.execute_batch(SCHEMA_DDL)?;
        (
            facts.reference_tables,
            facts.reference_table_sql,
            facts.reference_indexes,
        ) = schema_of(&reference)?;
        read_rows_of_tables(&conn, &mut facts);
        read_cell_types(&conn, &mut facts);
        Ok(facts)
    }

    /// The value of meta `key`, if the file has one.
    pub fn meta_value(&self, key: &str) -> Option<&MetaFacts> {
        self.meta.as_ref()?.iter().find(|m| m.key == key)
    }
}

/// The rows of the system tables the judges read, each `None` when the table (or a column the
/// read needs) is not there.
fn read_rows_of_tables(conn: &Connection, facts: &mut FileFacts) {
    let present: Vec<String> = facts.tables.keys().cloned().collect();
    let has = |table: &str| present.iter().any(|t| t == table);
    if has("adf_meta") {
        facts.meta = read_rows(conn, "SELECT key, value, protection FROM adf_meta", |r| {
            Ok(MetaFacts {
                key: r.get(0)?,
                value: text(r.get_ref(1)?),
                protection: text(r.get_ref(2)?),
            })
        });
    }
    if has("adf_config") {
        facts.config_rows = read_rows(conn, "SELECT id, config_json FROM adf_config", |r| {
            Ok((text(r.get_ref(0)?), text(r.get_ref(1)?)))
        });
    }
    if has("adf_identity") {
        facts.identity = read_rows(
            conn,
            "SELECT purpose, encryption_algo, value, salt IS NOT NULL, kdf_params IS NOT NULL,
                    typeof(code_access) || ':' || code_access FROM adf_identity",
            |r| {
                let purpose: String = r.get(0)?;
                let value: &[u8] = match r.get_ref(2)? {
                    ValueRef::Blob(b) | ValueRef::Text(b) => b,
                    _ => &[],
                };
                let value_len = value.len();
                let public_value = is_public_purpose(&purpose).then(|| value.to_vec());
                Ok(IdentityFacts {
                    algo: r.get(1)?,
                    value_len,
                    has_salt: r.get(3)?,
                    has_kdf_params: r.get(4)?,
                    code_access: r.get(5)?,
                    public_value,
                    purpose,
                })
            },
        );
    }
    if has("adf_files") {
        facts.files = read_rows(
            conn,
            "SELECT path, protection, typeof(authorized), size, length(CAST(content AS BLOB))
             FROM adf_files",
            |r| {
                Ok(FileRowFacts {
                    path: r.get(0)?,
                    protection: text(r.get_ref(1)?),
                    authorized_type: r.get(2)?,
                    size: r.get(3)?,
                    content_len: r.get(4)?,
                })
            },
        );
    }
    if has("adf_audit") {
        facts.audit = read_rows(conn, "SELECT id, source, data FROM adf_audit", |r| {
            let decodes = match r.get_ref(2)? {
                ValueRef::Blob(b) => crate::audit::decompress_json(b).is_ok(),
                _ => false,
            };
            Ok(AuditFacts {
                id: r.get(0)?,
                source: text(r.get_ref(1)?),
                decodes,
            })
        });
    }
}

/// Cells whose stored type breaks §0.2 (flags not INTEGER 0/1, structured text not JSON).
fn read_cell_types(conn: &Connection, facts: &mut FileFacts) {
    for (table, column) in FLAG_COLUMNS {
        if !has_column(facts, table, column) {
            continue;
        }
        let bad = read_rows(
            conn,
            &format!(
                "SELECT rowid, typeof(\"{column}\") FROM \"{table}\"
                 WHERE typeof(\"{column}\") <> 'integer' OR \"{column}\" NOT IN (0, 1)"
            ),
            |r| {
                Ok(format!(
                    "{table}.{column}#{}={}",
                    text(r.get_ref(0)?),
                    text(r.get_ref(1)?)
                ))
            },
        );
        facts.non_integer_flags.extend(bad.unwrap_or_default());
    }
    for (table, column) in JSON_COLUMNS {
        if !has_column(facts, table, column) {
            continue;
        }
        let bad = read_rows(
            conn,
            &format!(
                "SELECT rowid FROM \"{table}\"
                 WHERE \"{column}\" IS NOT NULL AND NOT json_valid(\"{column}\")"
            ),
            |r| Ok(format!("{table}.{column}#{}", text(r.get_ref(0)?))),
        );
        facts.invalid_json_cells.extend(bad.unwrap_or_default());
    }
}

fn has_column(facts: &FileFacts, table: &str, column: &str) -> bool {
    facts
        .tables
        .get(table)
        .is_some_and(|cols| cols.iter().any(|c| c.name == column))
}

/// Reads rows, treating a statement the file's shape cannot answer (a column another runtime
/// dropped) as "not readable" rather than an error: the judges report that as a finding.
fn read_rows<T>(
    conn: &Connection,
    sql: &str,
    map: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Option<Vec<T>> {
    let mut stmt = conn.prepare(sql).ok()?;
    let rows = stmt.query_map([], map).ok()?;
    rows.collect::<rusqlite::Result<Vec<T>>>().ok()
}

fn text(value: ValueRef<'_>) -> String {
    match value {
        ValueRef::Null => String::new(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => f.to_string(),
        ValueRef::Text(t) | ValueRef::Blob(t) => String::from_utf8_lossy(t).into_owned(),
    }
}

type Schema = (
    BTreeMap<String, Vec<ColumnFacts>>,
    BTreeMap<String, String>,
    BTreeMap<String, String>,
);

fn schema_of(conn: &Connection) -> Result<Schema> {
    let mut tables = BTreeMap::new();
    let mut table_sql = BTreeMap::new();
    let mut indexes = BTreeMap::new();
    let objects: Vec<(String, String, String)> = conn
        .prepare("SELECT type, name, COALESCE(sql, '') FROM sqlite_master")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (kind, name, sql) in objects {
        match kind.as_str() {
            "table" => {
                let columns = conn
                    .prepare(
                        "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info(?1)",
                    )?
                    .query_map([&name], |r| {
                        Ok(ColumnFacts {
                            name: r.get(0)?,
                            kind: r.get(1)?,
                            not_null: r.get::<_, i64>(2)? != 0,
                            default: r.get(3)?,
                            primary_key: r.get(4)?,
                        })
                    })?
                    .collect::<rusqlite::Result<_>>()?;
                tables.insert(name.clone(), columns);
                table_sql.insert(name, sql);
            }
            "index" => {
                indexes.insert(name, sql);
            }
            _ => {}
        }
    }
    Ok((tables, table_sql, indexes))
}

/// Header bytes 18 and 19 are 2 when the database is in WAL mode (SQLite file format §1.3.3).
fn wal_header(path: &Path) -> bool {
    use std::io::Read as _;
    let mut header = [0u8; 20];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut header))
        .is_ok_and(|()| header[18] == 2 && header[19] == 2)
}
