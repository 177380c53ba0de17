//! All integration tests of this crate in one binary: one link instead of one per file,
//! which keeps the build cache and CI time small. Each module is one former test file.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test or bench crate: its shared modules are private to it, and docs are for library users.
#![allow(unreachable_pub, missing_docs)]

mod adapters;
mod api_gaps;
mod api_ops;
mod chat;
mod common;
mod connections;
mod daemon;
mod fetch_guard;
mod frontdoor;
mod fuzz_api;
mod hil;
mod liveness;
mod liveness_code;
mod loops_daemon;
mod mcp;
mod messaging;
mod other_writers;
mod replay;
mod review;
mod serving;
mod shell_bounds;
mod streams;
mod studio_api;
mod studio_browser;
mod taps;
mod timers;
mod trigger_sources;
mod triggers;
mod whatsapp;
