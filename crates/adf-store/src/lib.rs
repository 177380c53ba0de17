//! `adf-store` owns the `.adf` file: an SQLite database at storage schema 32.
//!
//! Principal types:
//! - [`AdfFile`]: one open file with its single writer connection. Creating, opening (with
//!   migration from any schema ≥ 3), inspecting read-only and closing cleanly live here.
//! - [`StoreHandle`]: the same file owned by a dedicated thread and reached through a channel,
//!   so async code can share it.
//! - [`Caller`]: who is asking (agent, authorized code, owner); every write applies the
//!   protection rules of spec §4.2, §4.3, §4.4 for that caller in this crate and nowhere else.
//! - [`StoreError`]: the one error type.
//!
//! Only this crate writes SQL against `adf_` tables.

pub mod defaults;
pub mod error;
mod migrate;
pub mod schema;

pub use error::{ProtectedKind, Result, StoreError};
