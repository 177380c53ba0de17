//! The FFI seam that makes sqlite-vec's `vec0` virtual tables available on every connection
//! (spec §3.4). With `wal_batch.rs`, one of the crate's two `unsafe` seams.

#![allow(unsafe_code)]

use std::sync::OnceLock;

static REGISTERED: OnceLock<bool> = OnceLock::new();

/// Registers sqlite-vec as an SQLite auto-extension once per process, before any connection
/// opens. Returns whether the extension is available.
pub(crate) fn ensure_registered() -> bool {
    *REGISTERED.get_or_init(|| {
        // SAFETY: sqlite-vec declares its entry point as `fn()` for portability; its real
        // signature is the standard extension entry point `RawAutoExtension` expects. Both are
        // plain C function pointers of the same size, so the transmute only restores the type.
        // Registration happens once, before connections are opened.
        unsafe {
            let entry: rusqlite::auto_extension::RawAutoExtension =
                std::mem::transmute(sqlite_vec::sqlite3_vec_init as *const ());
            rusqlite::auto_extension::register_auto_extension(entry).is_ok()
        }
    })
}
