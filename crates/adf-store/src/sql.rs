//! Agent SQL: the one place a statement written by an agent runs against the file (`db_query`,
//! `db_execute`, spec §3.4, §10.3, tools guide "Database Tools").
//!
//! Enforcement never reads the SQL text. SQLite parses the statement and reports every table,
//! column, function, pragma and schema change it touches to an authorizer callback installed
//! for exactly as long as the statement is prepared and stepped; the `Policy` answers each
//! report. Statements SQLite prepares on the agent's behalf while the agent's statement runs
//! (a `pragma_table_info(...)` argument, `vec0`'s reads and writes of its shadow tables) go
//! through the same callback, so nothing reaches a table the policy did not allow.
//!
//! The rules (which tables agent SQL may read and write, and what `security.table_protections`
//! lets each caller do, are decided in [`crate::protection`] beside file, meta and config
//! protection; this module maps SQLite's authorizer reports onto those decisions):
//! - Readable: `local_*` tables (shadow tables of `local_*` virtual tables included), the
//!   [`READABLE_SYSTEM_TABLES`] of the tools guide, the schema tables (`sqlite_master`, so the
//!   schema is visible; data is not), and the table-valued functions in [`READABLE_FUNCTIONS`].
//!   Everything else is refused: `adf_meta`, `adf_config`, `adf_identity`, and also
//!   `adf_attestations`, which the tools guide's list of queryable tables omits.
//! - Pragmas: only the schema pragmas of [`SCHEMA_PRAGMAS`], and only on a readable table; a
//!   pragma that sets anything is refused.
//! - Writable (execute only, `main` database): `INSERT`/`UPDATE`/`DELETE` on `local_*`;
//!   `CREATE TABLE`, `CREATE INDEX`, `CREATE VIRTUAL TABLE` with a module of
//!   [`ALLOWED_MODULES`], `DROP TABLE`, `DROP INDEX` of `local_*` tables. Views, triggers, temp
//!   objects, `ALTER`, `ATTACH`, `DETACH`, `REINDEX`, `ANALYZE`, transactions, savepoints and
//!   [`DENIED_FUNCTIONS`] are refused. SQLite's defensive mode is on while the statement runs,
//!   so `writable_schema` tricks and direct writes to virtual-table shadow tables fail inside
//!   SQLite as well.
//! - `security.table_protections` (§5.6): `append_only` refuses UPDATE, DELETE and DROP for
//!   every caller but the owner (conflict resolution that replaces rows is caught by counting
//!   rows); `authorized` refuses every write except CREATE unless the caller is authorized code
//!   (the bypass is logged) or the owner. Unknown levels are treated as `authorized`.
//! - A new table may not declare a foreign key to a table outside `local_*`: such a key would
//!   let agent rows block or cascade into the runtime's own writes.
//! - One statement per call; a failing write leaves the file unchanged (its own savepoint).
//! - Resources: while the statement is prepared and runs, the connection carries the
//!   [`AGENT_SQLITE_LIMITS`] (value size, columns, expression depth, compound terms, function
//!   arguments, LIKE pattern, variables, SQL length, trigger depth), restored afterwards since
//!   the store's own writes go up to `limits.max_file_size`; a progress handler enforces the
//!   caller's deadline and step budget; a query's returned values are capped at
//!   [`SqlLimits::max_result_bytes`]. Each refusal is a [`SqlError::LimitExceeded`] naming the
//!   limit, and nothing is kept.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU8, Ordering};

use rusqlite::config::DbConfig;
use rusqlite::fallible_iterator::FallibleIterator;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::types::ValueRef;
use rusqlite::{Batch, Connection, ErrorCode};

use crate::access::log_bypass;
use crate::protection::{self, TableDecision, TableWrite};
use crate::{AdfFile, Caller, ProtectedKind, StoreError};

pub use crate::protection::{READABLE_SYSTEM_TABLES, TableProtection};

/// Table-valued functions over their arguments only (never over the file's pages or other
/// tables: `dbstat` is not here).
pub const READABLE_FUNCTIONS: [&str; 6] = [
    "json_each",
    "json_tree",
    "jsonb_each",
    "jsonb_tree",
    "vec_each",
    "vec_npy_each",
];

/// Pragmas that describe a table's schema, allowed on readable tables only.
pub const SCHEMA_PRAGMAS: [&str; 4] = [
    "table_info",
    "table_xinfo",
    "index_list",
    "foreign_key_list",
];

/// Pragmas without an argument that read a counter and change nothing (`fts5` asks for
/// `data_version` to validate its caches).
const READ_ONLY_PRAGMAS: [&str; 1] = ["data_version"];

/// Virtual table modules an agent may instantiate (`vec0` per §3.4; full-text and spatial
/// indexes keep their shadow tables under the `local_` name too).
pub const ALLOWED_MODULES: [&str; 3] = ["vec0", "fts5", "rtree"];

/// Functions no agent statement may call.
pub const DENIED_FUNCTIONS: [&str; 2] = ["load_extension", "fts3_tokenizer"];

/// One SQL value, as bound or returned.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    /// SQL `NULL`.
    Null,
    /// An SQLite `INTEGER` (64-bit signed).
    Integer(i64),
    /// An SQLite `REAL` (64-bit float).
    Real(f64),
    /// An SQLite `TEXT` value, UTF-8.
    Text(String),
    /// An SQLite `BLOB`, raw bytes.
    Blob(Vec<u8>),
}

impl SqlValue {
    fn from_ref(value: ValueRef<'_>) -> Self {
        match value {
            ValueRef::Null => Self::Null,
            ValueRef::Integer(i) => Self::Integer(i),
            ValueRef::Real(f) => Self::Real(f),
            ValueRef::Text(t) => Self::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => Self::Blob(b.to_vec()),
        }
    }

    fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Self::Null => ValueRef::Null,
            Self::Integer(i) => ValueRef::Integer(*i),
            Self::Real(f) => ValueRef::Real(*f),
            Self::Text(t) => ValueRef::Text(t.as_bytes()),
            Self::Blob(b) => ValueRef::Blob(b),
        }
    }
}

impl rusqlite::ToSql for SqlValue {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(rusqlite::types::ToSqlOutput::Borrowed(self.as_ref()))
    }
}

/// Bounds on one statement.
#[derive(Debug, Clone)]
pub struct SqlLimits {
    /// Rows returned by a query; the rest are counted, not returned. `None` returns all.
    pub max_rows: Option<usize>,
    /// Wall-clock budget of the statement; it is interrupted when exceeded.
    pub timeout: Option<Duration>,
    /// Virtual-machine steps the statement may take, counted in units of
    /// [`PROGRESS_PERIOD`] instructions; it is interrupted when exceeded. A budget that does not
    /// depend on the clock (tests use a tiny one).
    pub max_steps: Option<u64>,
    /// Bytes of values a query may return (text and blobs by length, other values as 8); the
    /// query fails past it instead of growing without bound. Default
    /// [`DEFAULT_MAX_RESULT_BYTES`].
    pub max_result_bytes: Option<usize>,
}

impl Default for SqlLimits {
    fn default() -> Self {
        Self {
            max_rows: None,
            timeout: None,
            max_steps: None,
            max_result_bytes: Some(DEFAULT_MAX_RESULT_BYTES),
        }
    }
}

/// Default of [`SqlLimits::max_result_bytes`]: 64 MiB.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 64 * 1024 * 1024;

/// Virtual-machine instructions between two progress-handler calls; one step of
/// [`SqlLimits::max_steps`].
pub const PROGRESS_PERIOD: i32 = 1000;

/// The largest string or blob an agent statement may make or read: 8 MiB.
pub const AGENT_MAX_VALUE_BYTES: i32 = 8 * 1024 * 1024;

/// SQLite limits on the connection while an agent statement is prepared and runs. With a
/// value at most 8 MiB and at most 100 result columns, one row stays within 800 MiB even when
/// every column is as large as allowed (SQLite's defaults, 1 GB values and 2000 columns, let
/// `SELECT randomblob(999999999), …` take gigabytes).
pub const AGENT_SQLITE_LIMITS: [(Limit, i32, &str); 9] = [
    (
        Limit::SQLITE_LIMIT_LENGTH,
        AGENT_MAX_VALUE_BYTES,
        "bytes per string or blob value",
    ),
    (
        Limit::SQLITE_LIMIT_SQL_LENGTH,
        1_000_000,
        "bytes of SQL text",
    ),
    (Limit::SQLITE_LIMIT_COLUMN, 100, "columns"),
    (
        Limit::SQLITE_LIMIT_EXPR_DEPTH,
        100,
        "levels of expression depth",
    ),
    (
        Limit::SQLITE_LIMIT_COMPOUND_SELECT,
        64,
        "terms of a compound SELECT",
    ),
    (Limit::SQLITE_LIMIT_FUNCTION_ARG, 64, "function arguments"),
    (
        Limit::SQLITE_LIMIT_LIKE_PATTERN_LENGTH,
        1000,
        "bytes of LIKE/GLOB pattern",
    ),
    (Limit::SQLITE_LIMIT_VARIABLE_NUMBER, 1000, "parameters"),
    (
        Limit::SQLITE_LIMIT_TRIGGER_DEPTH,
        10,
        "levels of trigger recursion",
    ),
];

/// The result of a query.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryOutput {
    /// Result column names, in statement order.
    pub columns: Vec<String>,
    /// The returned rows, each with one value per column; at most `max_rows` of them.
    pub rows: Vec<Vec<SqlValue>>,
    /// Every row the statement produced, returned or not.
    pub total_rows: u64,
    /// More rows were produced than the row limit let through, so `rows` is a prefix.
    pub truncated: bool,
}

/// The result of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecuteOutput {
    /// Rows inserted, updated or deleted by the statement (0 for schema changes).
    pub changes: u64,
    /// SQLite's rowid of the last row inserted on this connection (unchanged by non-inserts).
    pub last_insert_rowid: i64,
}

/// Why an agent statement did not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqlError {
    /// The policy refused a read, a write or a statement kind. Nothing ran.
    #[error("{message}")]
    Refused {
        /// What was refused and why, for the agent to read.
        message: String,
        /// The refused operation was a write rather than a read.
        write: bool,
    },

    /// A `table_protections` level refused the write.
    #[error("table '{table}' is {}: {action} refused", level.as_str())]
    Protected {
        /// The protected `local_*` table.
        table: String,
        /// The level that refused the write.
        level: TableProtection,
        /// The refused change, e.g. "delete from" or "replace rows in".
        action: &'static str,
    },

    /// An `authorized` table written by a caller that is not authorized code.
    #[error("table '{table}' is authorized: only authorized code may {action} it")]
    RequiresAuthorizedCode {
        /// The `authorized` table.
        table: String,
        /// The refused change, e.g. "insert into".
        action: &'static str,
    },

    /// SQLite could not prepare the statement (syntax, unknown table, wrong parameter count).
    #[error("{0}")]
    Invalid(String),

    /// The statement failed while running (a constraint, a type error); nothing was kept.
    #[error("{0}")]
    Failed(String),

    /// The statement ran past its time limit and SQLite was interrupted; nothing was kept.
    #[error("the statement ran longer than {} ms and was interrupted", .0.as_millis())]
    Timeout(Duration),

    /// A resource bound of agent SQL (an SQLite limit, the step budget, the result size) was
    /// reached; nothing was kept. The message names the limit.
    #[error("{0}")]
    LimitExceeded(String),

    /// The store itself failed (opening, a connection error) rather than the agent statement.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<rusqlite::Error> for SqlError {
    fn from(error: rusqlite::Error) -> Self {
        Self::Store(StoreError::Sqlite(error))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Query,
    Execute,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The agent's statement is being compiled: what it touches is its shape.
    Prepare,
    /// The statement runs; nested statements (pragma functions, vec0) are still policed.
    Run,
    /// The store's own checks between the two: not agent SQL.
    Internal,
}

/// What the compiled statement does, as the authorizer saw it.
#[derive(Debug, Default)]
struct Shape {
    /// INSERT/UPDATE/DELETE of an agent table.
    writes_rows: bool,
    /// CREATE/DROP of a table or index.
    changes_schema: bool,
    /// A write to SQLite's schema table, legitimate only as part of a schema change.
    writes_schema_table: bool,
    dropped_local_table: bool,
    created_tables: BTreeSet<String>,
    created_indexes: BTreeSet<String>,
    /// `append_only` tables the statement inserts into, checked for replaced rows.
    append_only_inserts: BTreeSet<String>,
    /// `authorized` tables authorized code wrote.
    authorized_bypasses: BTreeSet<String>,
}

/// The answers of the authorizer for one statement.
#[derive(Debug)]
struct Policy {
    mode: Mode,
    phase: Phase,
    caller: Caller,
    protections: BTreeMap<String, TableProtection>,
    shape: Shape,
    refusal: Option<SqlError>,
}

fn is_readable(table: &str) -> bool {
    protection::agent_sql_may_read(table)
        || READABLE_FUNCTIONS.contains(&table)
        // Pragma functions are readable; the pragma each one runs is decided on its own.
        || table.starts_with("pragma_")
}

fn unreadable_message(table: &str) -> String {
    match table {
        "adf_meta" | "adf_config" | "adf_identity" => format!(
            "{table} is not readable through SQL (spec §10.3); use sys_get_meta or sys_get_config"
        ),
        _ => format!(
            "{table} is not readable through SQL: queries may read local_* tables and {}",
            READABLE_SYSTEM_TABLES.join(", ")
        ),
    }
}

impl Policy {
    fn new(mode: Mode, caller: Caller, protections: BTreeMap<String, TableProtection>) -> Self {
        Self {
            mode,
            phase: Phase::Prepare,
            caller,
            protections,
            shape: Shape::default(),
            refusal: None,
        }
    }

    fn refuse(&mut self, error: SqlError) -> Authorization {
        // The first refusal explains the failure; later ones are its consequences.
        if self.refusal.is_none() {
            self.refusal = Some(error);
        }
        Authorization::Deny
    }

    fn refuse_statement(&mut self, message: String) -> Authorization {
        let write = self.mode == Mode::Execute;
        self.refuse(SqlError::Refused { message, write })
    }

    fn decide(&mut self, context: &AuthContext<'_>) -> Authorization {
        if self.phase == Phase::Internal {
            return Authorization::Allow;
        }
        let database = context.database_name.unwrap_or("main");
        match context.action {
            AuthAction::Select | AuthAction::Recursive => Authorization::Allow,
            AuthAction::Read { table_name, .. } => self.read(&table_name.to_ascii_lowercase()),
            AuthAction::Function { function_name } => {
                let name = function_name.to_ascii_lowercase();
                if DENIED_FUNCTIONS.contains(&name.as_str()) {
                    self.refuse_statement(format!("the function {name}() is not allowed"))
                } else {
                    Authorization::Allow
                }
            }
            AuthAction::Pragma {
                pragma_name,
                pragma_value,
            } => self.pragma(pragma_name, pragma_value),
            AuthAction::Insert { table_name } => {
                self.write_rows(table_name, database, TableWrite::Insert)
            }
            AuthAction::Update { table_name, .. } => {
                self.write_rows(table_name, database, TableWrite::Update)
            }
            AuthAction::Delete { table_name } => {
                self.write_rows(table_name, database, TableWrite::Delete)
            }
            AuthAction::CreateTable { table_name } => {
                self.create(table_name, table_name, database, "CREATE TABLE")
            }
            AuthAction::CreateIndex {
                index_name,
                table_name,
            } => self.create_index(index_name, table_name, database),
            // SQLite fills a new index through its REINDEX path.
            AuthAction::Reindex { index_name }
                if self
                    .shape
                    .created_indexes
                    .contains(&index_name.to_ascii_lowercase()) =>
            {
                Authorization::Allow
            }
            AuthAction::CreateVtable {
                table_name,
                module_name,
            } => self.create_vtable(table_name, module_name, database),
            AuthAction::DropTable { table_name } | AuthAction::DropVtable { table_name, .. } => {
                self.drop_table(table_name, database)
            }
            AuthAction::DropIndex { table_name, .. } => {
                let table = table_name.to_ascii_lowercase();
                if self.mode == Mode::Execute
                    && database == "main"
                    && protection::is_agent_table(&table)
                {
                    self.shape.changes_schema = true;
                    Authorization::Allow
                } else {
                    self.refuse_write(&table)
                }
            }
            other => {
                let what = statement_kind(&other);
                self.refuse_statement(format!(
                    "{what} is not allowed; db_execute runs INSERT, UPDATE, DELETE, CREATE TABLE, \
                     CREATE INDEX, CREATE VIRTUAL TABLE and DROP on local_* tables"
                ))
            }
        }
    }

    /// A read of `table` (lowercased): only the tables SQL may read (§10.3).
    fn read(&mut self, table: &str) -> Authorization {
        if is_readable(table) {
            Authorization::Allow
        } else {
            let message = unreadable_message(table);
            self.refuse(SqlError::Refused {
                message,
                write: false,
            })
        }
    }

    /// Read-only pragmas, and the schema pragmas of a readable table.
    fn pragma(&mut self, pragma_name: &str, pragma_value: Option<&str>) -> Authorization {
        let name = pragma_name.to_ascii_lowercase();
        let target = pragma_value.map(str::to_ascii_lowercase);
        match target {
            None if READ_ONLY_PRAGMAS.contains(&name.as_str()) => Authorization::Allow,
            Some(table) if SCHEMA_PRAGMAS.contains(&name.as_str()) => self.read(&table),
            _ => self.refuse_statement(format!(
                "PRAGMA {name} is not allowed; only {} of a readable table",
                SCHEMA_PRAGMAS.join(", ")
            )),
        }
    }

    /// An index on a local table; remembered so SQLite's REINDEX that fills it is allowed.
    fn create_index(
        &mut self,
        index_name: &str,
        table_name: &str,
        database: &str,
    ) -> Authorization {
        if !protection::is_agent_table(&table_name.to_ascii_lowercase()) {
            return self.refuse_write(&table_name.to_ascii_lowercase());
        }
        let decision = self.create(table_name, "", database, "CREATE INDEX");
        if decision == Authorization::Allow {
            self.shape
                .created_indexes
                .insert(index_name.to_ascii_lowercase());
        }
        decision
    }

    /// A virtual table of an allowed module.
    fn create_vtable(
        &mut self,
        table_name: &str,
        module_name: &str,
        database: &str,
    ) -> Authorization {
        let module = module_name.to_ascii_lowercase();
        if ALLOWED_MODULES.contains(&module.as_str()) {
            self.create(table_name, "", database, "CREATE VIRTUAL TABLE")
        } else {
            self.refuse_statement(format!(
                "virtual tables using {module} are not allowed; modules: {}",
                ALLOWED_MODULES.join(", ")
            ))
        }
    }

    fn refuse_write(&mut self, table: &str) -> Authorization {
        let message = if self.mode == Mode::Query {
            "db_query runs one read-only statement; use db_execute to write".to_owned()
        } else if table.starts_with("adf_") || table.starts_with("sqlite_") {
            format!("{table} is a system table; db_execute writes only local_* tables")
        } else {
            format!("'{table}' is not a local_* table; db_execute writes only local_* tables")
        };
        self.refuse(SqlError::Refused {
            message,
            write: true,
        })
    }

    fn write_rows(&mut self, table_name: &str, database: &str, kind: TableWrite) -> Authorization {
        let table = table_name.to_ascii_lowercase();
        if self.mode == Mode::Query {
            return self.refuse_write(&table);
        }
        if protection::SCHEMA_TABLES.contains(&table.as_str()) {
            // SQLite writes its schema table for every CREATE and DROP and refuses direct
            // writes itself (defensive mode, writable_schema refused); a statement that writes
            // it without a schema change is refused after preparing.
            self.shape.writes_schema_table = true;
            return Authorization::Allow;
        }
        if table == "sqlite_sequence" && self.shape.dropped_local_table {
            // Dropping an AUTOINCREMENT table removes its counter row.
            return Authorization::Allow;
        }
        if database != "main" || !protection::is_agent_table(&table) {
            return self.refuse_write(&table);
        }
        if self.phase == Phase::Prepare {
            self.shape.writes_rows = true;
        }
        self.check_protection(&table, kind)
    }

    fn create(
        &mut self,
        table_name: &str,
        created: &str,
        database: &str,
        what: &str,
    ) -> Authorization {
        let table = table_name.to_ascii_lowercase();
        if self.mode == Mode::Execute && database == "main" && protection::is_agent_table(&table) {
            self.shape.changes_schema = true;
            if !created.is_empty() && self.phase == Phase::Prepare {
                self.shape.created_tables.insert(created.to_owned());
            }
            Authorization::Allow
        } else if self.mode == Mode::Execute && database == "main" {
            let message = format!("{what} {table}: agent tables must be named local_*");
            self.refuse(SqlError::Refused {
                message,
                write: true,
            })
        } else {
            self.refuse_write(&table)
        }
    }

    fn drop_table(&mut self, table_name: &str, database: &str) -> Authorization {
        let table = table_name.to_ascii_lowercase();
        if self.mode != Mode::Execute || database != "main" || !protection::is_agent_table(&table) {
            return self.refuse_write(&table);
        }
        self.shape.changes_schema = true;
        let decision = self.check_protection(&table, TableWrite::Drop);
        if decision == Authorization::Allow {
            self.shape.dropped_local_table = true;
        }
        decision
    }

    fn check_protection(&mut self, table: &str, kind: TableWrite) -> Authorization {
        let level = self
            .protections
            .get(table)
            .copied()
            .unwrap_or(TableProtection::None);
        match protection::decide_table_write(self.caller, level, kind) {
            TableDecision::Allow => Authorization::Allow,
            TableDecision::AllowUnlessRowsReplaced => {
                self.shape.append_only_inserts.insert(table.to_owned());
                Authorization::Allow
            }
            TableDecision::Bypass => {
                self.shape.authorized_bypasses.insert(table.to_owned());
                Authorization::Allow
            }
            TableDecision::RefuseAppendOnly => self.refuse(SqlError::Protected {
                table: table.to_owned(),
                level,
                action: kind.verb(),
            }),
            TableDecision::RequiresAuthorizedCode => {
                self.refuse(SqlError::RequiresAuthorizedCode {
                    table: table.to_owned(),
                    action: kind.verb(),
                })
            }
        }
    }
}

fn statement_kind(action: &AuthAction<'_>) -> String {
    match action {
        AuthAction::Attach { .. } => "ATTACH".into(),
        AuthAction::Detach { .. } => "DETACH".into(),
        AuthAction::AlterTable { .. } => "ALTER TABLE".into(),
        AuthAction::Reindex { .. } => "REINDEX".into(),
        AuthAction::Analyze { .. } => "ANALYZE".into(),
        AuthAction::Transaction { .. } => "a transaction statement (BEGIN/COMMIT/ROLLBACK)".into(),
        AuthAction::Savepoint { .. } => "SAVEPOINT/RELEASE".into(),
        AuthAction::CreateView { .. } | AuthAction::CreateTempView { .. } => "CREATE VIEW".into(),
        AuthAction::DropView { .. } | AuthAction::DropTempView { .. } => "DROP VIEW".into(),
        AuthAction::CreateTrigger { .. } | AuthAction::CreateTempTrigger { .. } => {
            "CREATE TRIGGER".into()
        }
        AuthAction::DropTrigger { .. } | AuthAction::DropTempTrigger { .. } => {
            "DROP TRIGGER".into()
        }
        AuthAction::CreateTempTable { .. } | AuthAction::CreateTempIndex { .. } => {
            "a TEMP object".into()
        }
        AuthAction::DropTempTable { .. } | AuthAction::DropTempIndex { .. } => {
            "dropping a TEMP object".into()
        }
        other => format!("the operation {other:?}"),
    }
}

type Shared = Arc<Mutex<Policy>>;

fn lock(policy: &Shared) -> std::sync::MutexGuard<'_, Policy> {
    policy.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The connection with the policy's authorizer, the deadline and defensive mode installed;
/// dropping it removes all three on every path.
struct Policed<'c> {
    conn: &'c mut Connection,
    policy: Shared,
    was_defensive: bool,
    /// The connection's own limits, put back on drop.
    saved_limits: Vec<(Limit, i32)>,
    /// Why the progress handler interrupted the statement, if it did.
    interrupted: Arc<AtomicU8>,
}

const NOT_INTERRUPTED: u8 = 0;
const INTERRUPTED_BY_DEADLINE: u8 = 1;
const INTERRUPTED_BY_STEPS: u8 = 2;

impl<'c> Policed<'c> {
    fn install(
        conn: &'c mut Connection,
        policy: Policy,
        limits: &SqlLimits,
    ) -> Result<Self, SqlError> {
        let was_defensive = conn.db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE)?;
        // Built first, so a failure while installing still uninstalls everything on drop.
        let mut policed = Self {
            conn,
            policy: Arc::new(Mutex::new(policy)),
            was_defensive,
            saved_limits: Vec::new(),
            interrupted: Arc::new(AtomicU8::new(NOT_INTERRUPTED)),
        };
        for (limit, value, _) in AGENT_SQLITE_LIMITS {
            let previous = policed.conn.set_limit(limit, value)?;
            policed.saved_limits.push((limit, previous));
        }
        policed
            .conn
            .set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)?;
        let hook = Arc::clone(&policed.policy);
        policed
            .conn
            .authorizer(Some(move |context: AuthContext<'_>| {
                lock(&hook).decide(&context)
            }))?;
        if limits.timeout.is_some() || limits.max_steps.is_some() {
            let deadline = limits.timeout.map(|timeout| Instant::now() + timeout);
            let max_steps = limits.max_steps;
            let interrupted = Arc::clone(&policed.interrupted);
            let mut steps: u64 = 0;
            policed.conn.progress_handler(
                PROGRESS_PERIOD,
                Some(move || {
                    steps += 1;
                    let reason = if max_steps.is_some_and(|max| steps > max) {
                        INTERRUPTED_BY_STEPS
                    } else if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                        INTERRUPTED_BY_DEADLINE
                    } else {
                        return false;
                    };
                    interrupted.store(reason, Ordering::Relaxed);
                    true
                }),
            )?;
        }
        Ok(policed)
    }

    fn set_phase(&self, phase: Phase) {
        lock(&self.policy).phase = phase;
    }

    fn take_refusal(&self) -> Option<SqlError> {
        lock(&self.policy).refusal.take()
    }

    /// The error of a statement that failed while running: the policy's refusal, a resource
    /// bound that interrupted it, or SQLite's own error.
    fn run_failure(&self, error: rusqlite::Error, limits: &SqlLimits) -> SqlError {
        if let Some(refusal) = self.take_refusal() {
            return refusal;
        }
        match self.interrupted.load(Ordering::Relaxed) {
            INTERRUPTED_BY_STEPS => SqlError::LimitExceeded(format!(
                "the statement took more than its budget of {} steps of {PROGRESS_PERIOD} instructions and was interrupted",
                limits.max_steps.unwrap_or_default()
            )),
            INTERRUPTED_BY_DEADLINE => SqlError::Timeout(limits.timeout.unwrap_or_default()),
            _ => run_error(error, limits),
        }
    }
}

impl Drop for Policed<'_> {
    fn drop(&mut self) {
        let removed = self
            .conn
            .authorizer(None::<fn(AuthContext<'_>) -> Authorization>)
            .and_then(|()| self.conn.progress_handler(0, None::<fn() -> bool>))
            .and_then(|_| {
                self.conn
                    .set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, self.was_defensive)
            })
            .and_then(|_| {
                self.saved_limits
                    .iter()
                    .try_for_each(|(limit, value)| self.conn.set_limit(*limit, *value).map(drop))
            });
        if let Err(error) = removed {
            tracing::error!(%error, "removing the agent SQL authorizer failed");
        }
    }
}

/// Prepares exactly one statement: a second one, even a harmless one, is refused.
fn prepare_one<'c>(
    policed: &'c Policed<'_>,
    sql: &str,
) -> Result<rusqlite::Statement<'c>, SqlError> {
    let mut batch = Batch::new(policed.conn, sql);
    let first = match batch.next() {
        Ok(Some(statement)) => statement,
        Ok(None) => return Err(SqlError::Invalid("the SQL holds no statement".into())),
        Err(error) => {
            return Err(policed
                .take_refusal()
                .unwrap_or_else(|| prepare_error(&error)));
        }
    };
    // The tail is compiled by SQLite only to find out whether it holds a statement.
    match batch.next() {
        Ok(None) => Ok(first),
        Ok(Some(_)) | Err(_) => Err(SqlError::Refused {
            message: "one statement per call: remove everything after the first ';'".into(),
            write: false,
        }),
    }
}

/// SQLite's "string or blob too big", said with the limit it hit.
fn too_big(error: &rusqlite::Error) -> Option<SqlError> {
    match error {
        rusqlite::Error::SqliteFailure(failure, _) if failure.code == ErrorCode::TooBig => {
            Some(SqlError::LimitExceeded(format!(
                "a value, row or statement of this statement exceeds the agent SQL limit of {AGENT_MAX_VALUE_BYTES} bytes per string or blob (SQLITE_LIMIT_LENGTH); nothing was kept"
            )))
        }
        _ => None,
    }
}

fn prepare_error(error: &rusqlite::Error) -> SqlError {
    if let Some(exceeded) = too_big(error) {
        return exceeded;
    }
    SqlError::Invalid(match error {
        rusqlite::Error::SqliteFailure(_, Some(message)) => message.clone(),
        other => other.to_string(),
    })
}

fn run_error(error: rusqlite::Error, limits: &SqlLimits) -> SqlError {
    if let Some(exceeded) = too_big(&error) {
        return exceeded;
    }
    match (&error, limits.timeout) {
        (rusqlite::Error::SqliteFailure(failure, _), Some(timeout))
            if failure.code == ErrorCode::OperationInterrupted =>
        {
            SqlError::Timeout(timeout)
        }
        (rusqlite::Error::SqliteFailure(_, Some(message)), _) => SqlError::Failed(message.clone()),
        _ => SqlError::Failed(error.to_string()),
    }
}

fn bind(statement: &mut rusqlite::Statement<'_>, params: &[SqlValue]) -> Result<(), SqlError> {
    let expected = statement.parameter_count();
    if expected != params.len() {
        return Err(SqlError::Invalid(format!(
            "the statement has {expected} parameter(s) but {} value(s) were given in params",
            params.len()
        )));
    }
    for (index, value) in params.iter().enumerate() {
        statement
            .raw_bind_parameter(index + 1, value)
            .map_err(|e| prepare_error(&e))?;
    }
    Ok(())
}

fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn count_rows(conn: &Connection, table: &str) -> Result<i64, SqlError> {
    Ok(conn.query_row(
        &format!("SELECT count(*) FROM {}", quoted(table)),
        [],
        |row| row.get(0),
    )?)
}

impl AdfFile {
    /// Runs one read-only statement written by an agent (`db_query`). Rows beyond
    /// `limits.max_rows` are counted and dropped.
    pub fn sql_query(
        &mut self,
        sql: &str,
        params: &[SqlValue],
        limits: &SqlLimits,
    ) -> Result<QueryOutput, SqlError> {
        let policy = Policy::new(Mode::Query, Caller::Agent, BTreeMap::new());
        let policed = Policed::install(&mut self.conn, policy, limits)?;
        let mut statement = prepare_one(&policed, sql)?;
        if let Some(refusal) = policed.take_refusal() {
            return Err(refusal);
        }
        if !statement.readonly() || statement.column_count() == 0 {
            return Err(SqlError::Refused {
                message: "db_query runs one read-only statement that returns rows (SELECT, WITH … SELECT, VALUES); use db_execute to write".into(),
                write: false,
            });
        }
        bind(&mut statement, params)?;
        let columns: Vec<String> = statement.column_names().map(str::to_owned).collect();
        policed.set_phase(Phase::Run);
        let mut output = QueryOutput {
            columns,
            rows: Vec::new(),
            total_rows: 0,
            truncated: false,
        };
        let mut rows = statement.raw_query();
        let mut result_bytes: usize = 0;
        loop {
            let row = match rows.next() {
                Ok(Some(row)) => row,
                Ok(None) => break,
                Err(error) => return Err(policed.run_failure(error, limits)),
            };
            output.total_rows += 1;
            if limits.max_rows.is_some_and(|max| output.rows.len() >= max) {
                output.truncated = true;
                continue;
            }
            let mut values = Vec::with_capacity(output.columns.len());
            for index in 0..output.columns.len() {
                let value = row.get_ref(index)?;
                result_bytes = result_bytes.saturating_add(match value {
                    ValueRef::Text(bytes) | ValueRef::Blob(bytes) => bytes.len(),
                    _ => 8,
                });
                if let Some(max) = limits.max_result_bytes
                    && result_bytes > max
                {
                    return Err(SqlError::LimitExceeded(format!(
                        "the result exceeds {max} bytes after {} rows; select fewer rows or columns (LIMIT/OFFSET, substr)",
                        output.rows.len()
                    )));
                }
                values.push(SqlValue::from_ref(value));
            }
            output.rows.push(values);
        }
        Ok(output)
    }

    /// Runs one write statement written by an agent (`db_execute`) as `caller`, inside its own
    /// savepoint: refused or failed, the file is left as it was.
    pub fn sql_execute(
        &mut self,
        caller: Caller,
        sql: &str,
        params: &[SqlValue],
        limits: &SqlLimits,
    ) -> Result<ExecuteOutput, SqlError> {
        self.check_writable()?;
        let policy = Policy::new(Mode::Execute, caller, self.table_protections()?);
        let top = self.conn.is_autocommit();
        self.conn.execute_batch("SAVEPOINT adf_sql")?;
        // The marker is removed inside the savepoint, so a refused or failed statement rolls
        // its removal back too and the file stays byte-identical.
        let marker_was_pending = self.marker_pending.get();
        let result = crate::file::consume_marker(&self.conn, &self.marker_pending)
            .map_err(SqlError::from)
            .and_then(|()| execute_policed(&mut self.conn, policy, sql, params, limits))
            .and_then(|(output, bypassed)| {
                for table in bypassed {
                    log_bypass(&self.conn, ProtectedKind::Table, &table, "authorized")?;
                }
                Ok(output)
            });
        if result.is_err() {
            self.marker_pending.set(marker_was_pending);
        }
        if self.conn.is_autocommit() {
            // SQLite already rolled the whole transaction back: an interrupted write (the
            // timeout) or an I/O error ends every enclosing transaction, not just the statement.
            return result;
        }
        // At the top level a failure ends with ROLLBACK: rolling back to the savepoint and
        // releasing it would commit an empty write transaction, which still bumps the file's
        // change counter.
        let end = match (result.is_ok(), top) {
            (true, _) => "RELEASE adf_sql",
            (false, true) => "ROLLBACK",
            (false, false) => "ROLLBACK TO adf_sql; RELEASE adf_sql",
        };
        self.conn.execute_batch(end)?;
        result
    }
}

fn execute_policed(
    conn: &mut Connection,
    policy: Policy,
    sql: &str,
    params: &[SqlValue],
    limits: &SqlLimits,
) -> Result<(ExecuteOutput, BTreeSet<String>), SqlError> {
    let policed = Policed::install(conn, policy, limits)?;
    let mut statement = prepare_one(&policed, sql)?;
    if let Some(refusal) = policed.take_refusal() {
        return Err(refusal);
    }
    let (writes_rows, append_only, created) = {
        let policy = lock(&policed.policy);
        let shape = &policy.shape;
        if !shape.writes_rows && !shape.changes_schema {
            return Err(SqlError::Refused {
                message: "db_execute runs INSERT, UPDATE, DELETE, CREATE TABLE, CREATE INDEX, \
                          CREATE VIRTUAL TABLE or DROP on local_* tables; use db_query to read"
                    .into(),
                write: true,
            });
        }
        if shape.writes_schema_table && !shape.changes_schema {
            return Err(SqlError::Refused {
                message: "the schema tables are not writable".into(),
                write: true,
            });
        }
        (
            shape.writes_rows,
            shape.append_only_inserts.clone(),
            shape.created_tables.clone(),
        )
    };
    bind(&mut statement, params)?;

    policed.set_phase(Phase::Internal);
    let mut counts_before = Vec::new();
    for table in &append_only {
        counts_before.push((table.clone(), count_rows(policed.conn, table)?));
    }

    policed.set_phase(Phase::Run);
    let mut rows = statement.raw_query();
    loop {
        match rows.next() {
            // RETURNING rows are not part of db_execute's result.
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(error) => return Err(policed.run_failure(error, limits)),
        }
    }
    drop(rows);
    drop(statement);
    if let Some(refusal) = policed.take_refusal() {
        return Err(refusal);
    }
    let changes = if writes_rows {
        policed.conn.changes()
    } else {
        0
    };
    let last_insert_rowid = policed.conn.last_insert_rowid();

    policed.set_phase(Phase::Internal);
    for (table, before) in counts_before {
        // An INSERT that replaced rows (OR REPLACE, REPLACE INTO, an ON CONFLICT REPLACE
        // column) removed history the append_only level keeps.
        let after = count_rows(policed.conn, &table)?;
        if i128::from(after) != i128::from(before) + i128::from(changes) {
            return Err(SqlError::Protected {
                table,
                level: TableProtection::AppendOnly,
                action: "replace rows in",
            });
        }
    }
    for table in &created {
        let mut statement = policed
            .conn
            .prepare("SELECT \"table\" FROM pragma_foreign_key_list(?1)")?;
        let parents: Vec<String> = statement
            .query_map([table], |row| row.get(0))?
            .collect::<Result<_, _>>()?;
        if let Some(parent) = parents
            .iter()
            .find(|p| !protection::is_agent_table(&p.to_ascii_lowercase()))
        {
            return Err(SqlError::Refused {
                message: format!(
                    "{table} declares a foreign key to {parent}; agent tables may reference local_* tables only"
                ),
                write: true,
            });
        }
    }
    let bypassed = lock(&policed.policy).shape.authorized_bypasses.clone();
    Ok((
        ExecuteOutput {
            changes,
            last_insert_rowid,
        },
        bypassed,
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn readable_tables_are_an_allow_list() {
        for table in [
            "local_x",
            "adf_loop",
            "adf_tasks",
            "sqlite_master",
            "json_each",
            "pragma_table_info",
        ] {
            assert!(is_readable(table), "{table}");
        }
        for table in [
            "adf_meta",
            "adf_config",
            "adf_identity",
            "adf_attestations",
            "dbstat",
            "foo",
            "adf_future",
        ] {
            assert!(!is_readable(table), "{table}");
        }
    }
}
