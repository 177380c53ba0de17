//! adf-compute against real programs: python3, sh and coreutils under a real bubblewrap
//! sandbox, the host target under prlimit, files through a real `.adf` file.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test crate: its shared modules are private to it, and docs are for library users.
#![allow(unreachable_pub, missing_docs)]

mod common;
mod exec;
mod pip;
mod targets;
mod transfer;
