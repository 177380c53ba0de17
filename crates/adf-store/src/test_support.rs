//! What other crates' tests need from a file that the typed API does not give, without their
//! holding SQL text or the raw connection: whole tables read back for assertions (every log
//! column, a digest of every row to prove "nothing changed"), and the states the typed API
//! refuses to make — a row an older runtime or another writer left, a config edited by hand, a
//! column the schema does not know. Compiled only with the `test-support` feature, which only
//! dev-dependencies enable; no production build can reach it.
//!
//! Table and column names are checked against the file's schema before use, and values are
//! bound, never spliced: this is a typed fixture API, not an SQL passthrough.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, OpenFlags};
use serde_json::Value;

use crate::{AdfFile, Result, StoreError};

/// One row: column name → value. NULL is `null`, integers and reals are numbers, text is a
/// string and a blob an array of its byte values.
pub type Row = serde_json::Map<String, Value>;

/// Every cell of every table of a file as text (`NULL`, the number, the text, or the blob's
/// bytes in hex), keyed by table and in rowid order: what a file holds, to compare two states.
pub type Snapshot = BTreeMap<String, Vec<BTreeMap<String, String>>>;

/// One `adf_logs` row with every column, `loop` included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRow {
    /// The row id: increasing in write order.
    pub id: i64,
    /// Severity as written (`debug`, `info`, `warn`, `error`).
    pub level: String,
    /// The subsystem that wrote the row.
    pub origin: Option<String>,
    /// A machine-readable event name within the origin.
    pub event: Option<String>,
    /// What the row concerns, such as a tool name or file path.
    pub target: Option<String>,
    /// The human-readable text.
    pub message: String,
    /// Extra structured detail as JSON text, when the writer gave any.
    pub data: Option<String>,
    /// When the row was written, in epoch milliseconds.
    pub created_at: i64,
    /// The loop the row was written for; `None` for main and for rows outside a turn.
    pub loop_name: Option<String>,
}

/// The rows a change applies to: those whose `column` equals `value`.
#[derive(Debug, Clone)]
pub struct RowsWhere<'a> {
    /// The column compared.
    pub column: &'a str,
    /// The value it must equal (bound as [`Tables::set_column`] binds values).
    pub value: Value,
}

impl<'a> RowsWhere<'a> {
    /// The rows whose `column` equals `value`.
    pub fn new(column: &'a str, value: impl Into<Value>) -> Self {
        Self {
            column,
            value: value.into(),
        }
    }
}

/// The tables of an open file, through its own connection (so its config cache and update
/// hooks see every change, as they see the store's own writes).
pub fn tables(file: &AdfFile) -> Tables<'_> {
    Tables { conn: &file.conn }
}

/// A second connection to a file, as another process (a mesh server, `adf` in a shell, an
/// older runtime) holds one: it waits up to ten seconds for the file's writer, and its changes
/// reach the file without the store's API seeing them happen.
#[derive(Debug)]
pub struct OtherConnection {
    conn: Connection,
}

impl OtherConnection {
    /// Opens `path` read-write. The file need not be an agent file: a plain SQLite file is
    /// created if none is there.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        crate::prepare_sqlite();
        let conn = Connection::open(path.as_ref())?;
        conn.busy_timeout(Duration::from_secs(10))?;
        Ok(Self { conn })
    }

    /// Opens `path` read-only: it sees what writers committed and can write nothing.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self> {
        crate::prepare_sqlite();
        let conn = Connection::open_with_flags(path.as_ref(), OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        conn.busy_timeout(Duration::from_secs(10))?;
        Ok(Self { conn })
    }

    /// Opens `path` as immutable and read-only: reading it can change no byte of it, whatever
    /// its schema version.
    pub fn open_immutable(path: impl AsRef<Path>) -> Result<Self> {
        crate::prepare_sqlite();
        let uri = format!("file:{}?immutable=1", path.as_ref().display());
        let conn = Connection::open_with_flags(
            uri,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
        )?;
        Ok(Self { conn })
    }

    /// The tables as this connection sees them.
    pub fn tables(&self) -> Tables<'_> {
        Tables { conn: &self.conn }
    }
}

/// Typed reads and fixture writes on one connection's tables.
#[derive(Debug, Clone, Copy)]
pub struct Tables<'c> {
    conn: &'c Connection,
}

impl Tables<'_> {
    /// Every row of `table`, in rowid order.
    pub fn rows(&self, table: &str) -> Result<Vec<Row>> {
        let table = self.table(table)?;
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT * FROM {} ORDER BY rowid", quoted(&table)))?;
        let names: Vec<String> = stmt.column_names().map(str::to_owned).collect();
        let mut rows = stmt.query([])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let mut cells = Row::new();
            for (index, name) in names.iter().enumerate() {
                cells.insert(name.clone(), json_of(row.get_ref(index)?));
            }
            out.push(cells);
        }
        Ok(out)
    }

    /// How many rows `table` holds.
    pub fn count(&self, table: &str) -> Result<i64> {
        let table = self.table(table)?;
        Ok(self.conn.query_row(
            &format!("SELECT COUNT(*) FROM {}", quoted(&table)),
            [],
            |row| row.get(0),
        )?)
    }

    /// Every `adf_logs` row, oldest first.
    pub fn logs(&self) -> Result<Vec<LogRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, level, origin, event, target, message, data, created_at, loop
             FROM adf_logs ORDER BY id",
        )?;
        let rows = stmt.query_map([], |row| {
            Ok(LogRow {
                id: row.get(0)?,
                level: row.get(1)?,
                origin: row.get(2)?,
                event: row.get(3)?,
                target: row.get(4)?,
                message: row.get(5)?,
                data: row.get(6)?,
                created_at: row.get(7)?,
                loop_name: row.get(8)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// The schema and every row of every table but `skipped`, as one text: two digests are
    /// equal exactly when nothing (outside `skipped`) changed. Virtual tables' shadow rows are
    /// compared by schema only.
    pub fn digest(&self, skipped: &[&str]) -> Result<String> {
        let schema: Vec<String> = self
            .conn
            .prepare(
                "SELECT type || ' ' || name || ' ' || COALESCE(sql, '') FROM sqlite_master
                 ORDER BY name",
            )?
            .query_map([], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let mut out = schema.join("\n");
        for table in self.table_names()? {
            if skipped.contains(&table.as_str()) {
                continue;
            }
            let Ok(mut stmt) = self
                .conn
                .prepare(&format!("SELECT * FROM {} ORDER BY rowid", quoted(&table)))
            else {
                continue;
            };
            let columns = stmt.column_count();
            let mut rows = stmt.query([])?;
            out.push_str(&format!("\n#{table}"));
            while let Some(row) = rows.next()? {
                out.push('\n');
                for index in 0..columns {
                    out.push_str(&format!("{:?}|", row.get_ref(index)?));
                }
            }
        }
        Ok(out)
    }

    /// Every cell of every table as text; see [`Snapshot`].
    pub fn snapshot(&self) -> Result<Snapshot> {
        let mut out = Snapshot::new();
        for table in self.table_names()? {
            let mut stmt = self
                .conn
                .prepare(&format!("SELECT * FROM {} ORDER BY rowid", quoted(&table)))?;
            let names: Vec<String> = stmt.column_names().map(str::to_owned).collect();
            let mut rows = stmt.query([])?;
            let mut result = Vec::new();
            while let Some(row) = rows.next()? {
                let mut cells = BTreeMap::new();
                for (index, name) in names.iter().enumerate() {
                    cells.insert(name.clone(), text_of(row.get_ref(index)?));
                }
                result.push(cells);
            }
            out.insert(table, result);
        }
        Ok(out)
    }

    /// Sets `column` to `value` in the rows `rows` selects; returns how many it changed.
    pub fn set_column(
        &self,
        table: &str,
        rows: &RowsWhere<'_>,
        column: &str,
        value: &Value,
    ) -> Result<usize> {
        let table = self.table(table)?;
        let key = self.column(&table, rows.column)?;
        let column = self.column(&table, column)?;
        Ok(self.conn.execute(
            &format!(
                "UPDATE {} SET {} = ?1 WHERE {} = ?2",
                quoted(&table),
                quoted(&column),
                quoted(&key)
            ),
            [sql_of(value)?, sql_of(&rows.value)?],
        )?)
    }

    /// Replaces the stored config text as it sits in the row, unchecked: a config an older
    /// runtime or a hand edit left (deprecated fields, a violation, malformed JSON).
    pub fn set_config_text(&self, text: &str) -> Result<()> {
        let changed = self.set_column(
            "adf_config",
            &RowsWhere::new("id", 1),
            "config_json",
            &Value::from(text),
        )?;
        if changed == 1 {
            Ok(())
        } else {
            Err(StoreError::Malformed("the file has no config row".into()))
        }
    }

    /// Inserts one row of `cells` into `table`, unchecked by the store's rules.
    pub fn insert_row(&self, table: &str, cells: &[(&str, Value)]) -> Result<()> {
        let table = self.table(table)?;
        let mut columns = Vec::with_capacity(cells.len());
        let mut values = Vec::with_capacity(cells.len());
        for (column, value) in cells {
            columns.push(quoted(&self.column(&table, column)?));
            values.push(sql_of(value)?);
        }
        let placeholders: Vec<String> = (1..=values.len()).map(|n| format!("?{n}")).collect();
        self.conn.execute(
            &format!(
                "INSERT INTO {} ({}) VALUES ({})",
                quoted(&table),
                columns.join(", "),
                placeholders.join(", ")
            ),
            rusqlite::params_from_iter(values),
        )?;
        Ok(())
    }

    /// Deletes the rows `rows` selects from `table`; returns how many it removed.
    pub fn delete_rows(&self, table: &str, rows: &RowsWhere<'_>) -> Result<usize> {
        let table = self.table(table)?;
        let key = self.column(&table, rows.column)?;
        Ok(self.conn.execute(
            &format!("DELETE FROM {} WHERE {} = ?1", quoted(&table), quoted(&key)),
            [sql_of(&rows.value)?],
        )?)
    }

    /// Adds a TEXT column the schema does not know to `table`, as a newer runtime might.
    pub fn add_text_column(&self, table: &str, column: &str) -> Result<()> {
        let table = self.table(table)?;
        plain_name(column)?;
        self.conn.execute(
            &format!(
                "ALTER TABLE {} ADD COLUMN {} TEXT",
                quoted(&table),
                quoted(column)
            ),
            [],
        )?;
        Ok(())
    }

    /// Drops `table`, as damage or an older runtime might leave a file without it.
    pub fn drop_table(&self, table: &str) -> Result<()> {
        let table = self.table(table)?;
        self.conn
            .execute(&format!("DROP TABLE {}", quoted(&table)), [])?;
        Ok(())
    }

    /// Creates a table of TEXT `columns` whose name the caller chooses: an agent's own `local_`
    /// table, or any table of a plain SQLite file that is no agent file.
    pub fn create_table(&self, table: &str, columns: &[&str]) -> Result<()> {
        plain_name(table)?;
        for column in columns {
            plain_name(column)?;
        }
        let columns: Vec<String> = columns
            .iter()
            .map(|c| format!("{} TEXT", quoted(c)))
            .collect();
        self.conn.execute(
            &format!("CREATE TABLE {} ({})", quoted(table), columns.join(", ")),
            [],
        )?;
        Ok(())
    }

    fn table_names(&self) -> Result<Vec<String>> {
        let names = self
            .conn
            .prepare(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'
                 ORDER BY name",
            )?
            .query_map([], |row| row.get(0))?
            .collect::<rusqlite::Result<Vec<String>>>()?;
        Ok(names)
    }

    /// `table` if the file has it.
    fn table(&self, table: &str) -> Result<String> {
        let known: bool = self.conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
            [table],
            |row| row.get(0),
        )?;
        if known {
            Ok(table.to_owned())
        } else {
            Err(StoreError::InvalidInput(format!("no table {table}")))
        }
    }

    /// `column` if `table` has it.
    fn column(&self, table: &str, column: &str) -> Result<String> {
        let known: bool = self.conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2)",
            [table, column],
            |row| row.get(0),
        )?;
        if known {
            Ok(column.to_owned())
        } else {
            Err(StoreError::InvalidInput(format!(
                "no column {column} in {table}"
            )))
        }
    }
}

/// A name made of letters, digits and `_` only, so a new table or column is what it says.
fn plain_name(name: &str) -> Result<()> {
    if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(())
    } else {
        Err(StoreError::InvalidInput(format!(
            "not a plain name: {name}"
        )))
    }
}

fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn json_of(cell: ValueRef<'_>) -> Value {
    match cell {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(v) => Value::from(v),
        ValueRef::Real(v) => Value::from(v),
        ValueRef::Text(t) => Value::from(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => Value::from(b.to_vec()),
    }
}

fn text_of(cell: ValueRef<'_>) -> String {
    match cell {
        ValueRef::Null => "NULL".to_owned(),
        ValueRef::Integer(v) => v.to_string(),
        ValueRef::Real(v) => v.to_string(),
        ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
        ValueRef::Blob(b) => format!("{b:02x?}"),
    }
}

/// A JSON value as the SQL value it binds: `null`, a boolean as 0/1, a number, text; an array
/// of byte values is a blob.
fn sql_of(value: &Value) -> Result<SqlValue> {
    Ok(match value {
        Value::Null => SqlValue::Null,
        Value::Bool(b) => SqlValue::Integer(i64::from(*b)),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => SqlValue::Integer(i),
            (None, Some(f)) => SqlValue::Real(f),
            (None, None) => return Err(StoreError::InvalidInput(format!("number {n}"))),
        },
        Value::String(s) => SqlValue::Text(s.clone()),
        Value::Array(items) => SqlValue::Blob(
            items
                .iter()
                .map(|item| {
                    item.as_u64()
                        .and_then(|b| u8::try_from(b).ok())
                        .ok_or_else(|| StoreError::InvalidInput(format!("not a byte: {item}")))
                })
                .collect::<Result<Vec<u8>>>()?,
        ),
        Value::Object(_) => {
            return Err(StoreError::InvalidInput(
                "an object binds as its JSON text: pass value.to_string()".into(),
            ));
        }
    })
}
