//! `adf_audit`: brotli-compressed JSON snapshots of data the runtime removes (§13.3).

use std::io::Read as _;

use rusqlite::{Connection, params};
use serde::Serialize;
use serde_json::Value;

use crate::error::{Result, StoreError};
use crate::file::AdfFile;
use crate::time;

/// One audit row without its blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditInfo {
    /// Row id assigned by SQLite.
    pub id: i64,
    /// What was removed: `loop:<name>` for transcript rows, `file` for a deleted file.
    pub source: String,
    /// First transcript `seq` in the snapshot, for loop snapshots.
    pub start_seq: Option<i64>,
    /// Last transcript `seq` in the snapshot, for loop snapshots.
    pub end_seq: Option<i64>,
    /// What the snapshot refers to besides a seq range, e.g. the deleted file's path.
    pub r#ref: Option<String>,
    /// How many records the snapshot holds.
    pub entry_count: i64,
    /// Size of the uncompressed snapshot JSON, in UTF-8 bytes.
    pub size_bytes: i64,
    /// When the snapshot was taken, in Unix milliseconds.
    pub created_at: i64,
}

/// Brotli quality of audit snapshots. They are written on hot paths (file deletes, clears,
/// compaction) and read rarely; the spec fixes only the format (brotli-compressed JSON,
/// AUD-08), and any quality decodes the same. An owner clear of 50 turns is the slowest turn
/// an agent has (the 1-agent bench's p99), and its compression was most of it: quality 0 (the
/// one-pass fast compressor, a hash table a quarter the size of quality 1's, no command
/// buffers) took 1.42 M instructions against 1.81 M for quality 1 (the `brotli` crate's
/// encoder, before `mbrotli` took 0.43 M for it) and cut the clear's turn
/// from 0.86–1.0 ms to 0.58–0.69 ms in the same minutes; its output is about a fifth larger
/// (9.3 KB against 7.7 KB for 71 KB of rows). BENCHMARKS.md, issue 17 "Fifth pass".
const AUDIT_BROTLI_QUALITY: mbrotli::Quality = mbrotli::Quality::Q0;

/// Compresses JSON with brotli at a quality that favours speed (see the constant).
pub fn compress_json(value: &Value) -> Result<(Vec<u8>, usize)> {
    compress_text(value.to_string().as_bytes())
}

/// The brotli window for a snapshot of `len` bytes: no larger than the text (the encoder
/// clears its whole ring buffer per stream, and a 4 MiB window for a few kilobytes of rows was
/// most of the work), between 2^10 and 2^22.
fn window_bits_for(len: usize) -> u8 {
    // At most 22, so the narrowing keeps the value.
    len.max(1 << 10)
        .next_power_of_two()
        .trailing_zeros()
        .min(22) as u8
}

/// [`compress_json`] of JSON already serialized (UTF-8).
///
/// The encoder is `mbrotli`'s, a port of Google's that writes the same bytes as the `brotli`
/// crate's for these settings in under half the time (BENCHMARKS.md, issue 17 "Seventh pass");
/// `brotli` still decodes.
pub(crate) fn compress_text(text: &[u8]) -> Result<(Vec<u8>, usize)> {
    let unusable = |e: &dyn std::fmt::Display| {
        StoreError::Io(std::io::Error::other(format!("brotli encoder: {e}")))
    };
    let window =
        mbrotli::Window::standard(window_bits_for(text.len())).map_err(|e| unusable(&e))?;
    let config = mbrotli::EncoderConfig::default()
        .with_quality(AUDIT_BROTLI_QUALITY)
        .with_window(window);
    let mut encoder = mbrotli::Compressor::new(config).map_err(|e| unusable(&e))?;
    let out = encoder.compress(text).map_err(|e| unusable(&e))?;
    Ok((out, text.len()))
}

/// Decompresses an audit blob back into JSON.
pub fn decompress_json(data: &[u8]) -> Result<Value> {
    let mut text = Vec::new();
    brotli::Decompressor::new(data, 4096).read_to_end(&mut text)?;
    serde_json::from_slice(&text)
        .map_err(|e| StoreError::Malformed(format!("audit blob is not JSON: {e}")))
}

/// Inserts a snapshot row. `size_bytes` is the UTF-8 length of the JSON (Appendix B #15).
pub(crate) fn insert_snapshot(
    conn: &Connection,
    source: &str,
    seq_range: Option<(i64, i64)>,
    reference: Option<&str>,
    entry_count: i64,
    snapshot: &Value,
) -> Result<i64> {
    insert_snapshot_text(
        conn,
        source,
        seq_range,
        reference,
        entry_count,
        snapshot.to_string().as_bytes(),
    )
}

/// [`insert_snapshot`] of JSON already serialized (UTF-8).
pub(crate) fn insert_snapshot_text(
    conn: &Connection,
    source: &str,
    seq_range: Option<(i64, i64)>,
    reference: Option<&str>,
    entry_count: i64,
    snapshot: &[u8],
) -> Result<i64> {
    let (data, size) = compress_text(snapshot)?;
    conn.prepare_cached(
        "INSERT INTO adf_audit (source, start_seq, end_seq, ref, entry_count, size_bytes, data, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
            source,
            seq_range.map(|r| r.0),
            seq_range.map(|r| r.1),
            reference,
            entry_count,
            size as i64,
            data,
            time::now_ms()
        ],
    )?;
    Ok(conn.last_insert_rowid())
}

impl AdfFile {
    /// Whether auditing of `kind` (`loop`, `inbox`, `outbox`, `files`) is on. `context.audit`
    /// wins when present, else top-level `audit`, else nothing is audited (§5.19; not merged).
    pub fn audit_enabled(&self, kind: &str) -> Result<bool> {
        // The cached parse (checked against `data_version`): a full parse of the config text
        // here was a fifth of an owner clear.
        let config = self.config_shared()?;
        let section = config
            .pointer("/context/audit")
            .or_else(|| config.get("audit"));
        Ok(section
            .and_then(|s| s.get(kind))
            .and_then(Value::as_bool)
            .unwrap_or(false))
    }

    /// Audit rows, newest first.
    pub fn audit_list(&self) -> Result<Vec<AuditInfo>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, source, start_seq, end_seq, ref, entry_count, size_bytes, created_at
             FROM adf_audit ORDER BY id DESC",
        )?;
        let rows = stmt.query_map([], |row| {
            Ok(AuditInfo {
                id: row.get(0)?,
                source: row.get(1)?,
                start_seq: row.get(2)?,
                end_seq: row.get(3)?,
                r#ref: row.get(4)?,
                entry_count: row.get(5)?,
                size_bytes: row.get(6)?,
                created_at: row.get(7)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The decompressed JSON of one audit row.
    pub fn audit_data(&self, id: i64) -> Result<Value> {
        let data: Vec<u8> = self
            .conn
            .query_row("SELECT data FROM adf_audit WHERE id = ?1", [id], |row| {
                row.get(0)
            })
            .map_err(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => {
                    StoreError::not_found("audit row", id.to_string())
                }
                other => other.into(),
            })?;
        decompress_json(&data)
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use std::io::Write as _;

    use super::*;

    /// Snapshot-shaped JSON: a loop's rows with replies of ~90 words, as an owner clear writes.
    fn snapshot_text(rows: usize) -> Vec<u8> {
        let words = [
            "the", "agent", "reply", "tokens", "stream", "loop", "owner", "file", "of",
        ];
        let mut state: u64 = 7;
        let rows: Vec<Value> = (0..rows)
            .map(|seq| {
                let text: Vec<&str> = (0..90)
                    .map(|_| {
                        state = state
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1);
                        words[(state >> 33) as usize % words.len()]
                    })
                    .collect();
                serde_json::json!({
                    "seq": seq,
                    "role": if seq % 2 == 0 { "user" } else { "assistant" },
                    "content_json": [{ "type": "text", "text": text.join(" ") }],
                    "created_at": 1_764_800_000_000_i64 + seq as i64,
                })
            })
            .collect();
        Value::Array(rows).to_string().into_bytes()
    }

    #[test]
    fn sto_48_aud_08_snapshots_decode_to_their_json_and_keep_the_bytes_of_the_previous_encoder() {
        for rows in [0, 1, 7, 101, 400] {
            let text = snapshot_text(rows);
            let (blob, size) = compress_text(&text).expect("compress");
            assert_eq!(size, text.len());
            let mut decoded = Vec::new();
            brotli::Decompressor::new(&blob[..], 4096)
                .read_to_end(&mut decoded)
                .expect("a brotli stream");
            assert_eq!(decoded, text, "{rows} rows");
            // The blobs earlier builds wrote for the same text (the `brotli` crate's streaming
            // encoder, same quality and window): files written before and after compare equal.
            let window_bits = u32::from(window_bits_for(text.len()));
            let mut previous = Vec::new();
            {
                let mut writer = brotli::CompressorWriter::new(&mut previous, 4096, 0, window_bits);
                writer.write_all(&text).expect("compress");
            }
            assert_eq!(blob, previous, "{rows} rows");
        }
    }
}
