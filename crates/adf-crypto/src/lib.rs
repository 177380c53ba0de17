//! ADF identity cryptography (placeholder; see issue 3).
