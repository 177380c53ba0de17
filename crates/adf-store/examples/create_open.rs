//! Creates and opens files in a loop, for profiling with callgrind or perf:
//! `cargo run --release -p adf-store --example create_open -- 200`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use adf_store::{AdfFile, CreateOptions};

fn main() {
    let count: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    let mode = std::env::args().nth(2).unwrap_or_else(|| "both".to_owned());
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("existing.adf");
    AdfFile::create(&existing, &CreateOptions::default())
        .unwrap()
        .close()
        .unwrap();
    for i in 0..count {
        if mode != "open" {
            let path = dir.path().join(format!("a{i}.adf"));
            AdfFile::create(&path, &CreateOptions::default())
                .unwrap()
                .close()
                .unwrap();
        }
        if mode != "create" {
            AdfFile::open(&existing).unwrap().close().unwrap();
        }
    }
}
