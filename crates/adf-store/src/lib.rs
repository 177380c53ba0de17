//! `adf-store` owns the `.adf` file: an SQLite database at storage schema 32.
//!
//! Principal types:
//! - [`AdfFile`]: one open file with its single writer connection. Creating, opening (with
//!   migration from any schema ≥ 3), inspecting read-only and closing cleanly live here.
//! - [`StoreHandle`]: the same file owned by a dedicated thread and reached through a channel,
//!   so async code can share it; optionally closed while idle and reopened by the next job
//!   ([`IdleRelease`]).
//! - [`Caller`]: who is asking (agent, authorized code, owner); every write applies the
//!   protection rules of spec §4.2, §4.3, §4.4 for that caller in this crate and nowhere else.
//! - [`Protection`]: a protection level, typed; [`protection::decide`] is the one place that
//!   says whom it binds, [`protection::config_lock`] which config lock covers a change.
//! - [`RunSavepoint`] and [`AdfFile::begin_held_transaction`]: transactions other crates hold
//!   across calls and awaits, without naming `BEGIN`/`SAVEPOINT`/`COMMIT`.
//! - [`StoreError`]: the one error type.
//!
//! Only this crate runs SQL: no other crate reaches the connection (`AdfFile::connection` exists
//! for this crate's own tests only, behind the `self-test-sql` feature) or holds SQL text, its
//! tests included (the `closed_api` test); their fixtures and whole-table reads go through
//! `test_support` (the `test-support` feature).

mod access;
pub mod audit;
pub mod check;
mod checkpointer;
pub mod config;
pub mod config_depth;
pub mod config_write;
pub mod daemon_reads;
pub mod defaults;
pub mod error;
mod file;
mod files;
pub mod fork;
pub mod glob;
mod handle;
mod held;
pub mod identity;
pub mod inspection;
pub mod messages;
pub mod meta;
pub mod migrate;
pub mod mime;
pub mod other_writers;
pub mod owner_ops;
mod page_image;
pub mod protection;
pub mod schema;
pub mod skills;
pub mod sql;
pub mod tables;
pub mod tasks;
#[cfg(feature = "test-support")]
pub mod test_support;
pub mod time;
pub mod timers;
pub mod transcript;
pub mod unsupported;
mod vec_ext;
pub mod views;
mod wal_batch;

/// Registers this crate's SQLite extensions (`vec0`) and the VFS that batches WAL writes, once
/// per process, before a connection to an agent file opens.
pub(crate) fn prepare_sqlite() {
    vec_ext::ensure_registered();
    wal_batch::ensure_registered();
}

pub use access::{Caller, WriteOutcome};
pub use config::{ConfigAction, Violation};
pub use error::{ProtectedKind, Result, StoreError};
pub use file::{AdfFile, CreateOptions, OpenMode, OpenReport, sidecar};
pub use files::{FileEntry, FileInfo, FileWrite};
pub use fork::ForkOptions;
pub use handle::{IdleRelease, Lease, QueueWatch, StoreHandle};
pub use held::RunSavepoint;
pub use identity::IdentityWrite;
pub use meta::MetaEntry;
pub use protection::{FileProtection, MetaProtection, Protection};
pub use tables::{
    AttestationRow, HeldLog, IdentityRow, LoopRow, NewLog, NewLoopRow, TaskRow, TimerRow,
    log_trim_step,
};
