//! The one error type of the store. Messages name the file and say what to do.

use std::path::PathBuf;

/// What a protection rule guards (spec §4.2, §4.4, §5.17).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProtectedKind {
    File,
    Meta,
    Config,
    Timer,
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
    #[error("{}: no such file", path.display())]
    FileNotFound { path: PathBuf },

    #[error("{}: already exists; choose another path or remove it first", path.display())]
    FileExists { path: PathBuf },

    #[error("{}: the file is empty (0 bytes), so it is not an .adf file", path.display())]
    EmptyFile { path: PathBuf },

    #[error("{}: not an SQLite database, so not an .adf file ({detail})", path.display())]
    NotSqlite { path: PathBuf, detail: String },

    #[error(
        "{}: the file is truncated: its header describes {expected} bytes but only {actual} are present",
        path.display()
    )]
    Truncated {
        path: PathBuf,
        expected: u64,
        actual: u64,
    },

    #[error("{}: the database is corrupt: {detail}", path.display())]
    Corrupt { path: PathBuf, detail: String },

    #[error("{}: an SQLite database but not an ADF file (it has no adf_meta table)", path.display())]
    NotAdf { path: PathBuf },

    #[error(
        "{}: storage schema {found} is newer than this runtime supports (schema {supported}); \
         the file was not modified. Open it with a newer adf",
        path.display()
    )]
    NewerSchema {
        path: PathBuf,
        found: u32,
        supported: u32,
    },

    #[error(
        "{}: storage schema {found} predates the oldest migratable schema ({oldest}) of this runtime \
         (schema {supported}); the file was not modified",
        path.display()
    )]
    SchemaTooOld {
        path: PathBuf,
        found: u32,
        oldest: u32,
        supported: u32,
    },

    #[error(
        "{}: migration from schema {from} to {to} failed at step {step}: {detail}; the file was restored from its backup",
        path.display()
    )]
    Migration {
        path: PathBuf,
        from: u32,
        to: u32,
        step: u32,
        detail: String,
    },

    #[error("{}: opened read-only; this operation writes", path.display())]
    ReadOnly { path: PathBuf },

    /// The file cannot be written where it is (no write permission on it or on its directory,
    /// where SQLite keeps the `-wal`/`-shm` sidecars of a writer).
    #[error(
        "{}: the file is read-only ({detail}); commands that only read it still work",
        path.display()
    )]
    NotWritable { path: PathBuf, detail: String },

    #[error("{what} not found: {name}")]
    NotFound { what: &'static str, name: String },

    #[error("{kind} '{target}' is {level}")]
    Protected {
        kind: ProtectedKind,
        target: String,
        level: String,
    },

    #[error("only the owner or authorized code may {action}")]
    RequiresAuthorizedCode { action: String },

    #[error("invalid input: {0}")]
    InvalidInput(String),

    #[error("config rejected: {}", violations.join("; "))]
    ConfigRejected { violations: Vec<String> },

    #[error("the file's data is malformed: {0}")]
    Malformed(String),

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
    Reopen { path: PathBuf, detail: String },

    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),

    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl StoreError {
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
