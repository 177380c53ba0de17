//! Timestamps in the two encodings of spec §0.2.

/// Now as ISO-8601 UTC with milliseconds, the form TEXT timestamp columns hold.
pub fn now_iso() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// Now as Unix epoch milliseconds, the form INTEGER timestamp columns hold.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
