//! All integration tests of this crate in one binary: one link instead of one per file,
//! which keeps the build cache and CI time small. Each module is one former test file.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test or bench crate: its shared modules are private to it, and docs are for library users.
#![allow(unreachable_pub, missing_docs)]

mod code;
mod common;
mod declarations;
mod executor;
mod fetch;
mod identity;
mod ingress;
mod loops_states;
mod middleware;
mod panics;
mod pipeline;
mod prompt;
mod prompt_config;
mod tools_config;
mod tools_create_adf;
mod tools_db;
mod tools_files;
mod tools_messages;
mod tools_meta;
mod tools_state;
mod tools_timers;
mod transport;
mod triggers;
mod unsupported_tools;
