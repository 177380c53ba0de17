//! All integration tests of this crate in one binary: one link instead of one per file,
//! which keeps the build cache and CI time small. Each module is one former test file.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test or bench crate: its shared modules are private to it, and docs are for library users.
#![allow(unreachable_pub, missing_docs)]

mod bad_input;
mod closed_api;
mod common;
mod config_rules;
mod create;
mod fork;
mod handle;
mod identity;
mod migrate;
mod open;
mod owner_views;
mod protection;
mod row_keys;
mod test_support;
mod turn_path;
mod unsupported;
