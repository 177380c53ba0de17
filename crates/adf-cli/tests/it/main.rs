//! All integration tests of this crate in one binary: one link instead of one per file,
//! which keeps the build cache and CI time small. Each module is one former test file.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test or bench crate: its shared modules are private to it, and docs are for library users.
#![allow(unreachable_pub, missing_docs)]

mod adapter_commands;
mod bad_input;
mod chat;
mod code_commands;
mod common;
mod conform;
mod cross_home;
mod daemon_clients;
mod egress;
mod file_commands;
mod hermetic_home;
mod identity_commands;
mod lan;
mod mcp_commands;
mod package_commands;
mod review_cli;
mod studio_cli;
mod tool_commands;
