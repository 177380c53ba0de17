//! All integration tests of this crate in one binary: one link instead of one per file,
//! which keeps the build cache and CI time small. Each module is one former test file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod providers;
