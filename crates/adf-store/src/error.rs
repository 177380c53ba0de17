//! The one error type of the store. Messages name the file and say what to do.

use crate::protection::Protection;
use std::path::PathBuf;

/// What a protection rule guards (spec §4.2, §4.4, §5.17).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProtectedKind {
    /// A row of `adf_files`, by path.
    File,
    /// A key of `adf_meta`.
    Meta,
    /// A dotted path inside the agent config.
    Config,
    /// A row of `adf_timers`.
    Timer,
    /// A `local_*` table with a table-protection level.
    Table,
}

impl std::fmt::Display for ProtectedKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::File => "file",
            Self::Meta => "meta key",
            Self::Config => "config path",
            Self::Timer => "timer",
            Self::Table => "table",
        })
    }
}

/// Everything that can go wrong reading or writing an `.adf` file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Opening an `.adf` path that does not exist.
    #[error("{}: no such file", path.display())]
    FileNotFound {
        /// The path that was asked for.
        path: PathBuf,
    },

    /// Creating an `.adf` file at a path that is already taken; nothing was written.
    #[error("{}: already exists; choose another path or remove it first", path.display())]
    FileExists {
        /// The path that is taken.
        path: PathBuf,
    },

    /// Opening a 0-byte file, which SQLite would silently turn into a new database.
    #[error("{}: the file is empty (0 bytes), so it is not an .adf file", path.display())]
    EmptyFile {
        /// The empty file.
        path: PathBuf,
    },

    /// Opening a file whose header is not SQLite's.
    #[error("{}: not an SQLite database, so not an .adf file ({detail})", path.display())]
    NotSqlite {
        /// The file that was opened.
        path: PathBuf,
        /// Why SQLite refused it, as SQLite or the header check put it.
        detail: String,
    },

    #[error(
        "{}: the file is truncated: its header describes {expected} bytes but only {actual} are present",
        path.display()
    )]
    /// Opening a file shorter than the page count in its SQLite header says (a cut-off copy).
    Truncated {
        /// The truncated file.
        path: PathBuf,
        /// Bytes the header's page size times page count describes.
        expected: u64,
        /// Bytes actually on disk.
        actual: u64,
    },

    /// SQLite reports corruption on open or while the integrity check reads pages.
    #[error("{}: the database is corrupt: {detail}", path.display())]
    Corrupt {
        /// The corrupt file.
        path: PathBuf,
        /// What SQLite or the integrity check found.
        detail: String,
    },

    /// Opening a valid SQLite database that has no `adf_meta` table.
    #[error("{}: an SQLite database but not an ADF file (it has no adf_meta table)", path.display())]
    NotAdf {
        /// The database that was opened.
        path: PathBuf,
    },

    /// Opening a file written by a newer runtime; it is left untouched.
    #[error(
        "{}: storage schema {found} is newer than this runtime supports (schema {supported}); \
         the file was not modified. Open it with a newer adf",
        path.display()
    )]
    NewerSchema {
        /// The file that was opened.
        path: PathBuf,
        /// The storage schema version recorded in the file.
        found: u32,
        /// The newest storage schema this runtime understands.
        supported: u32,
    },

    /// Opening a file older than the oldest schema this runtime can migrate; it is left untouched.
    #[error(
        "{}: storage schema {found} predates the oldest migratable schema ({oldest}) of this runtime \
         (schema {supported}); the file was not modified",
        path.display()
    )]
    SchemaTooOld {
        /// The file that was opened.
        path: PathBuf,
        /// The storage schema version recorded in the file.
        found: u32,
        /// The oldest schema version a migration starts from.
        oldest: u32,
        /// The schema version this runtime writes.
        supported: u32,
    },

    /// A schema migration step failed on open; the file was restored from the pre-migration backup.
    #[error(
        "{}: migration from schema {from} to {to} failed at step {step}: {detail}; the file was restored from its backup",
        path.display()
    )]
    Migration {
        /// The file being migrated.
        path: PathBuf,
        /// The schema version the file had before the migration.
        from: u32,
        /// The schema version the migration aimed for.
        to: u32,
        /// The schema version whose migration step failed.
        step: u32,
        /// The underlying failure of that step.
        detail: String,
    },

    /// A write was attempted on a file opened for inspection only.
    #[error("{}: opened read-only; this operation writes", path.display())]
    ReadOnly {
        /// The file opened read-only.
        path: PathBuf,
    },

    /// The file cannot be written where it is (no write permission on it or on its directory,
    /// where SQLite keeps the `-wal`/`-shm` sidecars of a writer).
    #[error(
        "{}: the file is read-only ({detail}); commands that only read it still work",
        path.display()
    )]
    NotWritable {
        /// The file that cannot be written.
        path: PathBuf,
        /// The operating system's or SQLite's reason.
        detail: String,
    },

    /// A lookup by name (file path, meta key, task id, timer id, table, ...) found no row.
    #[error("{what} not found: {name}")]
    NotFound {
        /// What kind of thing was looked up, e.g. "file" or "task".
        what: &'static str,
        /// The name or id that was asked for.
        name: String,
    },

    /// A write hit a protection rule (read-only file, locked config path, append-only table, ...).
    #[error("{kind} '{target}' is {level}{}", why.map(|why| format!(" ({why})")).unwrap_or_default())]
    Protected {
        /// What kind of thing the rule guards.
        kind: ProtectedKind,
        /// The guarded path, key or id.
        target: String,
        /// The protection level that refused the write.
        level: Protection,
        /// What the level means here, when the level alone does not say (a file the runtime
        /// generates, an increment that does not raise the number).
        why: Option<&'static str>,
    },

    /// An agent (not the owner, not authorized code) tried a change reserved to them,
    /// such as unlocking a locked config path or unprotecting a file.
    #[error("only the owner or authorized code may {action}")]
    RequiresAuthorizedCode {
        /// The refused change, phrased to complete "only the owner ... may".
        action: String,
    },

    /// A caller passed a value the store refuses (bad path, out-of-range number, bad name, ...);
    /// nothing was written.
    #[error("invalid input: {0}")]
    InvalidInput(String),

    /// A config write would break the config's validation rules; nothing was written.
    #[error("config rejected: {}", violations.join("; "))]
    ConfigRejected {
        /// Every rule the proposed config breaks, one message each.
        violations: Vec<String>,
    },

    /// Data already in the file does not parse (bad JSON in a config or audit blob, ...).
    #[error("the file's data is malformed: {0}")]
    Malformed(String),

    /// The [`crate::StoreHandle`] worker thread has exited, so no job can run on it.
    #[error("the store thread has stopped")]
    WorkerGone,

    /// A job on a [`crate::StoreHandle`] panicked: that job failed, its open transaction was
    /// rolled back, and the worker keeps serving the next job.
    #[error("the operation stopped on an internal error ({0}); its changes were rolled back")]
    JobPanicked(String),

    /// The file was closed while idle ([`crate::IdleRelease`]) and the job that needed it
    /// could not reopen it (deleted, replaced or damaged meanwhile).
    #[error(
        "{}: could not reopen the file, which was closed while idle: {detail}",
        path.display()
    )]
    Reopen {
        /// The file that was released while idle.
        path: PathBuf,
        /// Why reopening it failed.
        detail: String,
    },

    /// An SQLite error not mapped to a more specific variant above.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),

    /// A filesystem error (backup copy, sidecar file, directory access, ...).
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl StoreError {
    /// Whether SQLite found the path not to be a database it can open (not a database, or
    /// not openable): the caller named a bad file, rather than the store failing.
    pub fn is_unopenable_database(&self) -> bool {
        matches!(
            self,
            Self::Sqlite(rusqlite::Error::SqliteFailure(failure, _))
                if matches!(
                    failure.code,
                    rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::CannotOpen
                )
        )
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidInput(message.into())
    }

    pub(crate) fn not_found(what: &'static str, name: impl Into<String>) -> Self {
        Self::NotFound {
            what,
            name: name.into(),
        }
    }
}

/// Result alias for store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
