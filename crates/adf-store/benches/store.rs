//! Create, open and migrate timings (BENCHMARKS.md). Run with
//! `cargo bench -p adf-store --bench store`.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test or bench crate: its shared modules are private to it, and docs are for library users.
#![allow(unreachable_pub, missing_docs)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use adf_store::{AdfFile, CreateOptions};
use criterion::{Criterion, criterion_group, criterion_main};

fn fixture(name: &str) -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .join("../../testdata/reference-v0.4.2")
        .join(name)
}

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let counter = AtomicUsize::new(0);
    let fresh = || {
        dir.path()
            .join(format!("a{}.adf", counter.fetch_add(1, Ordering::Relaxed)))
    };

    c.bench_function("create (new file, closed cleanly)", |b| {
        b.iter(|| {
            let path = fresh();
            AdfFile::create(&path, &CreateOptions::default())
                .unwrap()
                .close()
                .unwrap();
            std::fs::remove_file(path).unwrap();
        })
    });

    let existing = fresh();
    AdfFile::create(&existing, &CreateOptions::default())
        .unwrap()
        .close()
        .unwrap();
    // Open alone: the clean close that prepares the next iteration is not timed.
    let open_only = |path: PathBuf| {
        move |b: &mut criterion::Bencher<'_>| {
            b.iter_custom(|iters| {
                let mut total = std::time::Duration::ZERO;
                for _ in 0..iters {
                    let start = std::time::Instant::now();
                    let file = AdfFile::open(&path).unwrap();
                    total += start.elapsed();
                    file.close().unwrap();
                }
                total
            })
        }
    };
    c.bench_function("open (clean close)", open_only(existing.clone()));
    c.bench_function("open + close (clean close)", |b| {
        b.iter(|| AdfFile::open(&existing).unwrap().close().unwrap())
    });

    let populated = fresh();
    std::fs::copy(fixture("populated-runtime.adf"), &populated).unwrap();
    AdfFile::open(&populated).unwrap().close().unwrap();
    c.bench_function(
        "open populated fixture (clean close)",
        open_only(populated.clone()),
    );

    c.bench_function("open with migration 28 -> 32 (populated fixture)", |b| {
        b.iter_batched(
            || {
                let path = fresh();
                std::fs::copy(fixture("populated-runtime.adf"), &path).unwrap();
                path
            },
            |path| {
                let file = AdfFile::open(&path).unwrap();
                assert_eq!(file.open_report().migrated_steps.len(), 4);
                file.close().unwrap();
                std::fs::remove_file(path).unwrap();
            },
            criterion::BatchSize::PerIteration,
        )
    });
}

criterion_group! {
    name = store;
    config = Criterion::default().sample_size(50);
    targets = benches
}
criterion_main!(store);
