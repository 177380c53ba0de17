//! Helpers shared by the CLI's integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The repository root, found at run time: cargo sets `CARGO_MANIFEST_DIR` for the test
/// process, and a test binary reused from a shared build cache may have been compiled in
/// another checkout, so the compile-time value could point at someone else's tree.
pub fn repo_root() -> std::path::PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir.join("../..")
}

/// A reference runtime fixture, kept in the repository under `testdata/`.
pub fn fixture(name: &str) -> PathBuf {
    repo_root().join("testdata/reference-v0.4.2").join(name)
}
