//! Times the write pattern of a turn's WAL frames on this machine's file system, as SQLite
//! writes them (a 24-byte frame header, then a 4 KiB page: two calls a frame) against one
//! call a commit (what `wal_batch.rs` does): `cargo run --release -p adf-store --example
//! wal_write_pattern`. Two commits of five frames make one "turn"; the file is reused from its
//! start every 1,000 frames, as a WAL that starts over is.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::os::unix::fs::FileExt;
use std::time::Instant;

const FRAME_HEADER: usize = 24;
const PAGE: usize = 4096;
const FRAME: usize = FRAME_HEADER + PAGE;
const FRAMES_PER_COMMIT: usize = 5;
const TURNS: usize = 20_000;

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = std::fs::File::create(dir.path().join("pattern-wal")).expect("create");
    let header = [1u8; FRAME_HEADER];
    let page = [7u8; PAGE];
    let commit: Vec<u8> = (0..FRAMES_PER_COMMIT)
        .flat_map(|_| header.iter().chain(page.iter()).copied())
        .collect();
    for round in 0..2 {
        for one_call_a_commit in [false, true] {
            let mut offset = 32u64;
            let start = Instant::now();
            for _ in 0..TURNS * 2 {
                if one_call_a_commit {
                    file.write_all_at(&commit, offset).expect("write");
                } else {
                    for frame in 0..FRAMES_PER_COMMIT {
                        let at = offset + (frame * FRAME) as u64;
                        file.write_all_at(&header, at).expect("write");
                        file.write_all_at(&page, at + FRAME_HEADER as u64)
                            .expect("write");
                    }
                }
                offset += (FRAMES_PER_COMMIT * FRAME) as u64;
                if offset > 32 + 1000 * FRAME as u64 {
                    offset = 32;
                }
            }
            println!(
                "round {round}: {}: {:.1} µs a turn (two commits of {FRAMES_PER_COMMIT} frames)",
                if one_call_a_commit {
                    "one call a commit"
                } else {
                    "two calls a frame"
                },
                start.elapsed().as_secs_f64() * 1e6 / TURNS as f64
            );
        }
    }
}
