//! The conformance kit's integration tests, one binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(unreachable_pub, missing_docs)]

mod daemon_checks;
mod file_checks;
