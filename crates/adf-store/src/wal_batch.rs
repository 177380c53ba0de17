//! The FFI seam that writes a WAL commit's frames with one `pwrite` instead of two per page.
//!
//! SQLite appends each frame of a commit as two writes (the 24-byte frame header, then the
//! page), so a turn's two commits of five pages cost twenty system calls and twenty passes
//! through the kernel's page-cache write path. This module registers a VFS, the default for the
//! process, that is SQLite's own `unix` VFS except for WAL files: their writes are collected
//! in a [`Batch`] while they extend one contiguous run of frames, and the run is written in one
//! call when the page of the frame that carries the commit mark arrives. Every other operation
//! on the WAL file (a read, a sync, a truncate, its size, closing it) writes the run first, so
//! SQLite never observes the file without its own writes.
//!
//! Architecture invariant: a commit's frames are in the file before SQLite's frame writer
//! returns. The only writes held past a commit are frames of a transaction that has not
//! committed yet (a cache spill), which no other connection may read and a crash discards
//! anyway. A frame header carrying the commit mark is held only when it continues a run, i.e.
//! when its page is the very next write (`walWriteOneFrame`); SQLite's checksum rewrite writes
//! lone headers after reading each frame, so its commit header is written at once.
//!
//! Principal types: [`Batch`] (the decisions, plain Rust, unit-tested), `BatchedWal` (the
//! `sqlite3_file` SQLite sees for a WAL file, wrapping the `unix` VFS's own file).

#![allow(unsafe_code)]

use std::ffi::{CStr, c_int, c_void};
use std::ptr;
use std::sync::OnceLock;

use rusqlite::ffi;

/// Bytes of a WAL frame header.
const FRAME_HEADER: usize = 24;
/// Bytes of the WAL file's own header, written at offset 0 when the WAL starts over.
const WAL_HEADER: usize = 32;
/// The most SQLite's `unix` VFS writes in one call (`seekAndWriteFd` masks the length with
/// `0x1ffff`); a longer run would be cut short and reported as a full disk. A commit larger
/// than this goes out in several writes.
const MAX_WRITE: usize = 0x1ffff;
/// Buffer capacity a file keeps between commits: a few frames. A larger commit's buffer is
/// given back, so an agent that once wrote a big transaction does not hold 128 KiB while open.
const KEPT_CAPACITY: usize = 32 << 10;

#[cfg(test)]
thread_local! {
    /// WAL writes this thread sent to the `unix` VFS, for tests that prove a commit's frames
    /// go out as one write.
    static WAL_WRITES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn count_wal_write() {
    #[cfg(test)]
    WAL_WRITES.with(|writes| writes.set(writes.get() + 1));
}

/// What the last write of the held run was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    WalHeader,
    FrameHeader { commit: bool },
    Page,
}

/// What [`Batch::accept`] decided for one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The bytes were added to the run; nothing to write yet.
    Held,
    /// The bytes were added to the run and the run must be written now.
    HeldThenWrite,
    /// The write does not continue the run: write the run (if any), then these bytes as they are.
    WriteRunThenThis,
}

/// The run of WAL bytes held for one file: contiguous, starting at `start`.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    start: i64,
    bytes: Vec<u8>,
    last: Option<Held>,
}

impl Batch {
    fn end(&self) -> i64 {
        self.start + self.bytes.len() as i64
    }

    /// The bytes held and the offset they go to, if any.
    pub(crate) fn run(&self) -> Option<(&[u8], i64)> {
        (!self.bytes.is_empty()).then_some((&self.bytes[..], self.start))
    }

    /// Forgets the run once it was written (or its write failed, which SQLite was told).
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.last = None;
        if self.bytes.capacity() > 2 * KEPT_CAPACITY {
            self.bytes.shrink_to(KEPT_CAPACITY);
        }
    }

    fn hold(&mut self, bytes: &[u8], offset: i64, what: Held) {
        if self.bytes.is_empty() {
            self.start = offset;
        }
        self.bytes.extend_from_slice(bytes);
        self.last = Some(what);
    }

    /// Decides what to do with SQLite's write of `bytes` at `offset` in the WAL file.
    pub(crate) fn accept(&mut self, bytes: &[u8], offset: i64) -> Decision {
        let continues = !self.bytes.is_empty()
            && offset == self.end()
            && self.bytes.len() + bytes.len() <= MAX_WRITE;
        match (self.last, bytes.len()) {
            (Some(Held::FrameHeader { commit }), len) if continues && is_page_size(len) => {
                self.hold(bytes, offset, Held::Page);
                if commit {
                    Decision::HeldThenWrite
                } else {
                    Decision::Held
                }
            }
            (Some(Held::Page | Held::WalHeader), FRAME_HEADER) if continues => {
                let commit = carries_commit_mark(bytes);
                self.hold(bytes, offset, Held::FrameHeader { commit });
                Decision::Held
            }
            // A run starts with the WAL's own header or with a frame header that is not a
            // commit's: a lone commit header may be the last write SQLite makes (its checksum
            // rewrite), and holding it would leave the commit out of the file.
            (None, FRAME_HEADER) if !carries_commit_mark(bytes) => {
                self.hold(bytes, offset, Held::FrameHeader { commit: false });
                Decision::Held
            }
            (None, WAL_HEADER) if offset == 0 => {
                self.hold(bytes, offset, Held::WalHeader);
                Decision::Held
            }
            _ => Decision::WriteRunThenThis,
        }
    }
}

/// Page sizes SQLite allows: powers of two from 512 to 65,536.
fn is_page_size(len: usize) -> bool {
    len.is_power_of_two() && (512..=65_536).contains(&len)
}

/// Bytes 4–7 of a frame header: the database size in pages after a commit, zero otherwise.
fn carries_commit_mark(header: &[u8]) -> bool {
    header.get(4..8).is_some_and(|size| size != [0, 0, 0, 0])
}

/// The `sqlite3_file` SQLite holds for a WAL file: ours first, the `unix` VFS's file after it
/// in the same allocation (`REAL_OFFSET`).
#[repr(C)]
struct BatchedWal {
    base: ffi::sqlite3_file,
    real: *mut ffi::sqlite3_file,
    batch: *mut Batch,
}

/// Where the `unix` VFS's file starts inside ours, aligned for any C struct.
const REAL_OFFSET: usize = std::mem::size_of::<BatchedWal>().next_multiple_of(16);

static REGISTERED: OnceLock<bool> = OnceLock::new();

/// Registers the batching VFS as the process default, once, before connections open. Returns
/// false (and registers nothing) when the default VFS is not SQLite's `unix`, whose other
/// methods are known not to look at the VFS pointer they are given.
pub(crate) fn ensure_registered() -> bool {
    *REGISTERED.get_or_init(|| {
        // SAFETY: `sqlite3_vfs_find` returns SQLite's static VFS object (or null); the copy
        // shares its function pointers, which for `unix` ignore the VFS argument (checked in
        // SQLite's source: every one but xOpen marks it unused), and xOpen is ours, which
        // calls the original with the original VFS kept in `pAppData`. The copy is leaked:
        // SQLite keeps a pointer to it for the life of the process.
        unsafe {
            let real = ffi::sqlite3_vfs_find(ptr::null());
            if real.is_null() || (*real).zName.is_null() {
                return false;
            }
            if CStr::from_ptr((*real).zName) != c"unix" || (*real).xOpen.is_none() {
                return false;
            }
            let Ok(size) = c_int::try_from(REAL_OFFSET + (*real).szOsFile as usize) else {
                return false;
            };
            let mut vfs = *real;
            vfs.zName = c"adf-wal-batch".as_ptr();
            vfs.szOsFile = size;
            vfs.pNext = ptr::null_mut();
            vfs.pAppData = real.cast::<c_void>();
            vfs.xOpen = Some(open);
            let vfs = Box::leak(Box::new(vfs));
            ffi::sqlite3_vfs_register(vfs, 1) == ffi::SQLITE_OK
        }
    })
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: Some(shm_map),
    xShmLock: Some(shm_lock),
    xShmBarrier: Some(shm_barrier),
    xShmUnmap: Some(shm_unmap),
    xFetch: Some(fetch),
    xUnfetch: Some(unfetch),
};

/// SQLite opens a file: WAL files get the batching wrapper, every other file is the `unix`
/// VFS's own, opened in place (our `szOsFile` is larger than it needs).
unsafe extern "C" fn open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY (whole function): SQLite passes our VFS (whose `pAppData` is the `unix` VFS, set
    // at registration) and `file`, an allocation of our `szOsFile` bytes, suitably aligned.
    unsafe {
        let real_vfs = (*vfs).pAppData.cast::<ffi::sqlite3_vfs>();
        let Some(real_open) = (*real_vfs).xOpen else {
            return ffi::SQLITE_ERROR;
        };
        if flags & ffi::SQLITE_OPEN_WAL == 0 {
            return real_open(real_vfs, name, file, flags, out_flags);
        }
        (*file).pMethods = ptr::null();
        let real = file
            .cast::<u8>()
            .add(REAL_OFFSET)
            .cast::<ffi::sqlite3_file>();
        (*real).pMethods = ptr::null();
        let rc = real_open(real_vfs, name, real, flags, out_flags);
        if rc != ffi::SQLITE_OK || (*real).pMethods.is_null() {
            // SQLite closes only files whose methods are set; ours are not, so a half-open
            // `unix` file is closed here.
            if let Some(close_real) = (*real).pMethods.as_ref().and_then(|m| m.xClose) {
                close_real(real);
            }
            return if rc == ffi::SQLITE_OK {
                ffi::SQLITE_CANTOPEN
            } else {
                rc
            };
        }
        ptr::write(
            file.cast::<BatchedWal>(),
            BatchedWal {
                base: ffi::sqlite3_file { pMethods: &METHODS },
                real,
                batch: Box::into_raw(Box::default()),
            },
        );
        rc
    }
}

/// The wrapper's parts: its batch, the `unix` file and that file's methods.
///
/// # Safety
/// `file` must be a `BatchedWal` initialised by [`open`] and not yet closed, used by one
/// thread at a time (SQLite's contract for a connection's files).
unsafe fn parts<'a>(
    file: *mut ffi::sqlite3_file,
) -> (
    &'a mut Batch,
    *mut ffi::sqlite3_file,
    &'a ffi::sqlite3_io_methods,
) {
    // SAFETY: per the function's contract; the `unix` file's methods outlive it.
    unsafe {
        let wrapper = file.cast::<BatchedWal>();
        let real = (*wrapper).real;
        (&mut *(*wrapper).batch, real, &*(*real).pMethods)
    }
}

/// Writes the held run, if any, with one call to the `unix` VFS.
///
/// # Safety
/// `real` and `methods` come from [`parts`] of the same file.
unsafe fn write_run(
    batch: &mut Batch,
    real: *mut ffi::sqlite3_file,
    methods: &ffi::sqlite3_io_methods,
) -> c_int {
    let Some((bytes, offset)) = batch.run() else {
        return ffi::SQLITE_OK;
    };
    let Some(real_write) = methods.xWrite else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    let Ok(len) = c_int::try_from(bytes.len()) else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    count_wal_write();
    // SAFETY: `bytes` lives until the call returns; `real` is an open `unix` file.
    let rc = unsafe { real_write(real, bytes.as_ptr().cast::<c_void>(), len, offset) };
    batch.clear();
    rc
}

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: SQLite calls this on a file our `open` initialised, with `amount` readable bytes
    // at `data`.
    unsafe {
        let (batch, real, methods) = parts(file);
        let Ok(len) = usize::try_from(amount) else {
            return ffi::SQLITE_IOERR_WRITE;
        };
        let bytes = std::slice::from_raw_parts(data.cast::<u8>(), len);
        match batch.accept(bytes, offset) {
            Decision::Held => ffi::SQLITE_OK,
            Decision::HeldThenWrite => write_run(batch, real, methods),
            Decision::WriteRunThenThis => {
                let rc = write_run(batch, real, methods);
                if rc != ffi::SQLITE_OK {
                    return rc;
                }
                let Some(real_write) = methods.xWrite else {
                    return ffi::SQLITE_IOERR_WRITE;
                };
                count_wal_write();
                real_write(real, data, amount, offset)
            }
        }
    }
}

/// Forwards one method to the `unix` file, writing the held run first when `write_first`.
macro_rules! forward {
    ($name:ident, $method:ident, write_first = $write_first:expr, ( $( $arg:ident : $ty:ty ),* ), missing = $missing:expr) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            // SAFETY: SQLite calls this on a file our `open` initialised.
            unsafe {
                let (batch, real, methods) = parts(file);
                if $write_first {
                    let rc = write_run(batch, real, methods);
                    if rc != ffi::SQLITE_OK {
                        return rc;
                    }
                }
                match methods.$method {
                    Some(method) => method(real $(, $arg)*),
                    None => $missing,
                }
            }
        }
    };
}

forward!(read, xRead, write_first = true, (buffer: *mut c_void, amount: c_int, offset: ffi::sqlite3_int64), missing = ffi::SQLITE_IOERR_READ);
forward!(truncate, xTruncate, write_first = true, (size: ffi::sqlite3_int64), missing = ffi::SQLITE_IOERR_TRUNCATE);
forward!(sync, xSync, write_first = true, (flags: c_int), missing = ffi::SQLITE_IOERR_FSYNC);
forward!(file_size, xFileSize, write_first = true, (size: *mut ffi::sqlite3_int64), missing = ffi::SQLITE_IOERR_FSTAT);
forward!(lock, xLock, write_first = true, (level: c_int), missing = ffi::SQLITE_IOERR_LOCK);
forward!(unlock, xUnlock, write_first = true, (level: c_int), missing = ffi::SQLITE_IOERR_UNLOCK);
forward!(check_reserved_lock, xCheckReservedLock, write_first = true, (out: *mut c_int), missing = ffi::SQLITE_IOERR_CHECKRESERVEDLOCK);
forward!(file_control, xFileControl, write_first = true, (op: c_int, arg: *mut c_void), missing = ffi::SQLITE_NOTFOUND);
forward!(
    sector_size,
    xSectorSize,
    write_first = false,
    (),
    missing = 4096
);
forward!(
    device_characteristics,
    xDeviceCharacteristics,
    write_first = false,
    (),
    missing = 0
);
forward!(shm_map, xShmMap, write_first = false, (region: c_int, size: c_int, extend: c_int, out: *mut *mut c_void), missing = ffi::SQLITE_IOERR_SHMMAP);
forward!(shm_lock, xShmLock, write_first = false, (offset: c_int, n: c_int, flags: c_int), missing = ffi::SQLITE_IOERR_SHMLOCK);
forward!(shm_unmap, xShmUnmap, write_first = false, (delete: c_int), missing = ffi::SQLITE_OK);
forward!(fetch, xFetch, write_first = true, (offset: ffi::sqlite3_int64, amount: c_int, out: *mut *mut c_void), missing = ffi::SQLITE_OK);
forward!(unfetch, xUnfetch, write_first = false, (offset: ffi::sqlite3_int64, page: *mut c_void), missing = ffi::SQLITE_OK);

unsafe extern "C" fn shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: SQLite calls this on a file our `open` initialised.
    unsafe {
        let (_, real, methods) = parts(file);
        if let Some(barrier) = methods.xShmBarrier {
            barrier(real);
        }
    }
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite closes each file our `open` initialised exactly once; the batch was boxed
    // there and is freed here, after which SQLite never touches the file again.
    unsafe {
        let (batch, real, methods) = parts(file);
        let written = write_run(batch, real, methods);
        let closed = methods
            .xClose
            .map_or(ffi::SQLITE_OK, |close_real| close_real(real));
        let wrapper = file.cast::<BatchedWal>();
        drop(Box::from_raw((*wrapper).batch));
        (*wrapper).batch = ptr::null_mut();
        (*file).pMethods = ptr::null();
        if written != ffi::SQLITE_OK {
            written
        } else {
            closed
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use rusqlite::{Connection, OpenFlags};

    fn wal_writes() -> u64 {
        WAL_WRITES.with(std::cell::Cell::get)
    }

    /// Copies the database and its WAL as a crash would leave them (the `-shm` is rebuilt from
    /// the WAL) and reads the copy with SQLite's plain `unix` VFS.
    fn read_crashed_copy(db: &std::path::Path, into: &std::path::Path) -> (i64, i64, String) {
        let copy = into.join("copy.db");
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(crate::sidecar(&copy, suffix));
        }
        std::fs::copy(db, &copy).expect("copy db");
        std::fs::copy(crate::sidecar(db, "-wal"), crate::sidecar(&copy, "-wal")).expect("copy wal");
        let conn =
            Connection::open_with_flags_and_vfs(&copy, OpenFlags::SQLITE_OPEN_READ_WRITE, c"unix")
                .expect("open copy");
        let (rows, bytes) = conn
            .query_row(
                "SELECT count(*), coalesce(sum(length(v)), 0) FROM t",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("count");
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .expect("integrity_check");
        (rows, bytes, check)
    }

    #[test]
    fn sto_02_every_commit_is_in_the_wal_file_when_sqlite_returns_and_reads_back_without_the_seam()
    {
        assert!(
            ensure_registered(),
            "the default VFS here is SQLite's unix VFS"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("batched.db");
        let conn = Connection::open(&db).expect("open");
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA cache_size=10; PRAGMA cache_spill=10; PRAGMA wal_autocheckpoint=0;
             CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);",
        )
        .expect("schema");
        let crash = tempfile::tempdir().expect("tempdir");
        let (mut rows, mut bytes) = (0i64, 0i64);
        // Small commits, commits of a few pages, and transactions large enough to spill the
        // cache and then dirty spilled pages again (SQLite's checksum rewrite path).
        for (round, (inserts, size, rewrite)) in [
            (1, 100, false),
            (5, 3000, false),
            (200, 3000, true),
            (1, 50, false),
            (400, 1000, true),
        ]
        .into_iter()
        .cycle()
        .take(15)
        .enumerate()
        {
            let tx = conn.unchecked_transaction().expect("begin");
            for _ in 0..inserts {
                tx.execute("INSERT INTO t(v) VALUES (zeroblob(?1))", [size])
                    .expect("insert");
            }
            if rewrite {
                // Rows of this transaction, spilled already: their pages are written again.
                tx.execute(
                    "UPDATE t SET v = randomblob(length(v)) WHERE id > ?1 AND id % 3 = ?2",
                    [rows, round as i64 % 3],
                )
                .expect("rewrite");
            }
            tx.commit().expect("commit");
            rows += inserts;
            bytes += inserts * size;
            let (seen_rows, seen_bytes, check) = read_crashed_copy(&db, crash.path());
            assert_eq!(
                (seen_rows, seen_bytes),
                (rows, bytes),
                "after commit {round}"
            );
            assert_eq!(check, "ok");
        }
    }

    #[test]
    fn sto_02_a_commit_of_several_pages_is_one_wal_write() {
        assert!(ensure_registered());
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = Connection::open(dir.path().join("count.db")).expect("open");
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);
             CREATE INDEX t_v ON t(v); INSERT INTO t(v) VALUES (zeroblob(10));",
        )
        .expect("schema");
        let before = wal_writes();
        // Three rows of 3 KB: the table's pages, an overflow page, the index: several frames.
        conn.execute_batch(
            "BEGIN; INSERT INTO t(v) VALUES (randomblob(3000)), (randomblob(3000)), (randomblob(3000)); COMMIT;",
        )
        .expect("insert");
        let frames: i64 = conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))
            .expect("frames");
        assert!(frames >= 4, "the commits wrote {frames} frames");
        assert_eq!(
            wal_writes() - before,
            1,
            "one write for the commit's frames"
        );
    }

    fn header(page: u32, commit_size: u32) -> Vec<u8> {
        let mut h = vec![0u8; FRAME_HEADER];
        h[0..4].copy_from_slice(&page.to_be_bytes());
        h[4..8].copy_from_slice(&commit_size.to_be_bytes());
        h
    }

    const PAGE: usize = 4096;
    const FRAME: i64 = (FRAME_HEADER + PAGE) as i64;

    fn frame_offset(frame: i64) -> i64 {
        WAL_HEADER as i64 + (frame - 1) * FRAME
    }

    #[test]
    fn a_commits_frames_are_held_until_its_commit_page_then_written_as_one_run() {
        let mut batch = Batch::default();
        let page = vec![7u8; PAGE];
        let mut decisions = Vec::new();
        for frame in 1..=5 {
            let commit = if frame == 5 { 9 } else { 0 };
            decisions.push(batch.accept(&header(frame as u32, commit), frame_offset(frame)));
            decisions.push(batch.accept(&page, frame_offset(frame) + FRAME_HEADER as i64));
        }
        let last = decisions.pop();
        assert_eq!(last, Some(Decision::HeldThenWrite));
        assert!(
            decisions.iter().all(|d| *d == Decision::Held),
            "{decisions:?}"
        );
        let (bytes, start) = batch.run().expect("a run");
        assert_eq!(start, frame_offset(1));
        assert_eq!(bytes.len(), 5 * FRAME as usize);
        batch.clear();
        assert!(batch.run().is_none());
    }

    #[test]
    fn the_wal_header_starts_a_run_that_the_first_frame_continues() {
        let mut batch = Batch::default();
        assert_eq!(batch.accept(&[1u8; WAL_HEADER], 0), Decision::Held);
        assert_eq!(
            batch.accept(&header(2, 3), WAL_HEADER as i64),
            Decision::Held
        );
        assert_eq!(
            batch.accept(&[0u8; PAGE], (WAL_HEADER + FRAME_HEADER) as i64),
            Decision::HeldThenWrite
        );
        assert_eq!(
            batch.run().map(|(b, s)| (b.len(), s)),
            Some((WAL_HEADER + FRAME as usize, 0))
        );
    }

    #[test]
    fn a_lone_commit_header_is_never_held() {
        // SQLite's checksum rewrite: read a frame, write its header; the last one is the
        // commit's, and no write follows it.
        let mut batch = Batch::default();
        assert_eq!(batch.accept(&header(4, 0), frame_offset(3)), Decision::Held);
        // The read of the next frame writes the run (the caller's job); here: cleared.
        batch.clear();
        assert_eq!(
            batch.accept(&header(5, 12), frame_offset(4)),
            Decision::WriteRunThenThis
        );
        assert!(batch.run().is_none());
        // A one-frame commit is written as SQLite wrote it, header then page.
        assert_eq!(
            batch.accept(&[0u8; PAGE], frame_offset(4) + FRAME_HEADER as i64),
            Decision::WriteRunThenThis
        );
    }

    #[test]
    fn a_write_elsewhere_writes_the_run_first() {
        let mut batch = Batch::default();
        assert_eq!(batch.accept(&header(1, 0), frame_offset(1)), Decision::Held);
        assert_eq!(
            batch.accept(&[0u8; PAGE], frame_offset(1) + 24),
            Decision::Held
        );
        // An in-place overwrite of an earlier frame's page (a spilled page dirtied again).
        assert_eq!(
            batch.accept(&[1u8; PAGE], frame_offset(1) + 24),
            Decision::WriteRunThenThis
        );
        // A page that does not follow a header.
        let mut batch = Batch::default();
        assert_eq!(
            batch.accept(&[0u8; PAGE], frame_offset(1) + 24),
            Decision::WriteRunThenThis
        );
        // Odd sizes (a sync point splitting a frame under synchronous=FULL).
        assert_eq!(batch.accept(&[0u8; 100], 32), Decision::WriteRunThenThis);
    }

    #[test]
    fn a_run_never_grows_past_one_write_of_the_unix_vfs() {
        let mut batch = Batch::default();
        let page = vec![0u8; PAGE];
        let mut frame = 1;
        let mut longest = 0;
        let mut written_runs = 0;
        while frame < 100 {
            let header_offset = frame_offset(frame);
            for (bytes, offset) in [
                (header(frame as u32, 0), header_offset),
                (page.clone(), header_offset + FRAME_HEADER as i64),
            ] {
                longest = longest.max(batch.run().map_or(0, |(b, _)| b.len()));
                match batch.accept(&bytes, offset) {
                    Decision::Held => {}
                    Decision::HeldThenWrite => unreachable!("no commit mark here"),
                    Decision::WriteRunThenThis => {
                        written_runs += 1;
                        batch.clear();
                        // The caller writes these bytes alone; a header starts the next run.
                        if bytes.len() == FRAME_HEADER {
                            assert_eq!(batch.accept(&bytes, offset), Decision::Held);
                        }
                    }
                }
            }
            frame += 1;
        }
        assert!(longest <= MAX_WRITE, "a run of {longest} bytes");
        batch.clear();
        assert!(
            batch.bytes.capacity() <= KEPT_CAPACITY,
            "a long run's buffer is given back"
        );
        assert!(written_runs >= 3, "99 frames of 4 KiB take several runs");
    }
}
