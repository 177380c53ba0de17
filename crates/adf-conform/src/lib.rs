//! The ADF conformance kit (`adf conform`): judges an ADF file, a daemon or a mesh peer that
//! any runtime produced against the checklist (`docs/spec/conformance-checklist.md`).
//!
//! Checks are data: each subject has a table of rows (name, checklist IDs, section, what it
//! requires, a judge), so adding a requirement is adding a row. Every row yields exactly one
//! [`CheckResult`]; a [`Report`] renders as a human summary, a stable JSON document
//! ([`REPORT_SCHEMA`], documented in `docs/conformance.md`) or JUnit XML.

pub mod daemon;
pub mod file;
pub mod mesh;
mod report;

pub use report::{CheckResult, Outcome, REPORT_SCHEMA, Report, Status};

/// Why the kit could not judge its subject at all (individual failures are results, not errors).
#[derive(Debug, thiserror::Error)]
pub enum ConformError {
    /// The file could not be read as an SQLite database.
    #[error("cannot read {path}: {detail}")]
    Unreadable {
        /// The file given.
        path: String,
        /// What went wrong.
        detail: String,
    },
    /// The URL given is not an http(s) URL.
    #[error("{0}")]
    BadUrl(String),
    /// A part of the kit this version does not have.
    #[error("{0} is not supported yet")]
    NotSupported(&'static str),
    /// Local I/O (copying a file with a hot WAL to a private place).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Building the HTTP client.
    #[error("{0}")]
    Client(String),
}
