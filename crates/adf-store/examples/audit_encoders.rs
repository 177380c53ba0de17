//! Times the two brotli encoders the project has on a snapshot-shaped text (a 50-turn loop's
//! rows, ~71 KB) at the audit's settings (quality 0, window fitted): the `brotli` crate's
//! streaming writer, which audit snapshots used before, and `mbrotli`, which they use now:
//! `cargo run --release -p adf-store --example audit_encoders`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::Write as _;
use std::time::Instant;

const RUNS: u32 = 300;

/// 101 rows of ~92 words each, as the bench's mirror replies and the user turns make them.
fn snapshot_text() -> Vec<u8> {
    let words = [
        "the", "agent", "replies", "with", "a", "longer", "text", "about", "tokens", "and",
        "stream", "deltas", "mirror", "provider", "bench", "clear", "loop", "owner", "runtime",
        "file",
    ];
    let mut state: u64 = 1;
    let rows: Vec<serde_json::Value> = (0..101)
        .map(|seq| {
            let text: Vec<&str> = (0..92)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    words[(state >> 33) as usize % words.len()]
                })
                .collect();
            serde_json::json!({
                "seq": seq,
                "role": if seq % 2 == 0 { "user" } else { "assistant" },
                "content_json": [{ "type": "text", "text": text.join(" ") }],
                "created_at": 1_764_800_000_000_i64 + seq,
                "model": "bench",
                "tokens": { "input": 1200, "output": 120 },
            })
        })
        .collect();
    serde_json::Value::Array(rows).to_string().into_bytes()
}

fn main() {
    let text = snapshot_text();
    let bits = text
        .len()
        .max(1 << 10)
        .next_power_of_two()
        .trailing_zeros()
        .min(22);
    println!("snapshot of {} bytes, window 2^{bits}", text.len());
    for round in 0..2 {
        let start = Instant::now();
        let mut size = 0;
        for _ in 0..RUNS {
            let mut out = Vec::new();
            {
                let mut writer = brotli::CompressorWriter::new(&mut out, 4096, 0, bits);
                writer.write_all(&text).expect("compress");
            }
            size = out.len();
        }
        let brotli_us = start.elapsed().as_secs_f64() * 1e6 / f64::from(RUNS);
        let config = mbrotli::EncoderConfig::default()
            .with_quality(mbrotli::Quality::Q0)
            .with_window(mbrotli::Window::standard(bits as u8).expect("window"));
        let start = Instant::now();
        let mut mbrotli_size = 0;
        for _ in 0..RUNS {
            let mut encoder = mbrotli::Compressor::new(config).expect("encoder");
            mbrotli_size = encoder.compress(&text).expect("compress").len();
        }
        let mbrotli_us = start.elapsed().as_secs_f64() * 1e6 / f64::from(RUNS);
        println!(
            "round {round}: brotli crate {brotli_us:.0} µs ({size} B), mbrotli {mbrotli_us:.0} µs ({mbrotli_size} B)"
        );
    }
}
