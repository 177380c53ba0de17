//! Other writers of a file a watched [`StoreHandle`](crate::StoreHandle) holds: another process
//! (`adf put`, `adf config set`, `adf tool … sys_set_timer`) or another connection of this
//! process (a guest connection) committing to the same file.
//!
//! Two signals, neither of which this handle's own writes move:
//! - while the worker holds the file open, SQLite's `PRAGMA data_version`, which changes when
//!   another connection commits and never for this connection's own commits; the worker reads
//!   it before and after every job;
//! - while the file is released (closed for idleness), the [`DiskStamp`] of the database and its
//!   `-wal` taken right after the worker's own close: nothing of this handle writes until the
//!   next worker opens, so a different stamp then means someone else wrote (another process
//!   appends frames to the `-wal`, or creates it, and its own close checkpoints into the
//!   database file and removes the `-wal`); the daemon's watcher reopens the file then.
//!   Every reopen after a release counts as a possible change, whatever the stamps say: a write
//!   that lands while the worker closes (after its last `data_version` check, before its stamp)
//!   is in the stamp it leaves, so only the contents can tell.
//!
//! Which files another writer created, changed or deleted is a diff of `adf_files`'
//! `(updated_at, size)` stamps against the files as this handle last knew them (`Watch` keeps
//! each file's path, rowid and a stamp hash across releases: 32 bytes plus the path per file,
//! so a deleted file can still be named). Those are refreshed after every job that wrote or
//! deleted a file, and the rows this connection changed meanwhile (its update hook keeps their
//! rowids, deleted rows included) are left out of a diff, so this handle's own writes and
//! deletes never show as someone else's, also when another writer commits while a job of this
//! handle writes files. Only past 1,024 own file rows between two checks can the two not be
//! told apart: the change is still counted (the daemon re-reads config and timers) but its
//! files are not named. A file renamed by another writer shows as its old path deleted and its
//! new path written.
//!
//! Blind spot: a write that lands while the worker closes, or a released file written within
//! the same `stat` clock tick as this handle's close to the same size with no `-wal` left
//! behind, keeps the released stamp, so the watcher does not reopen the file for it; the next
//! job of the agent (which reopens it) or the next write of any writer shows it.

use std::collections::{BTreeMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::error::Result;
use crate::file::AdfFile;

/// Most changed (written or deleted) paths kept for the daemon between two takes; beyond it
/// they are counted.
pub const MAX_REPORTED_WRITES: usize = 256;

/// `stat` of one file: what another writer's commit or checkpoint moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FileStat {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl FileStat {
    fn of(path: &Path) -> Option<Self> {
        let meta = std::fs::metadata(path).ok()?;
        Some(Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        })
    }
}

/// `stat` of an agent file and its `-wal` (two system calls, no open), kept as a 64-bit
/// digest (one is held per released agent): equal stamps mean, up to the filesystem's
/// timestamp resolution, that nobody wrote in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DiskStamp(u64);

impl DiskStamp {
    /// The stamp of `path` and `path-wal` now (a missing file is part of the stamp).
    pub fn of(path: &Path) -> Self {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        Self(hash_of((FileStat::of(path), FileStat::of(Path::new(&wal)))))
    }

    /// The digest, for a caller that keeps it in an atomic.
    pub fn digest(self) -> u64 {
        self.0
    }
}

/// What a watched handle knows of other writers, read without a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OtherWriters {
    /// How many times another writer's commits were found so far (only grows).
    pub changes: u64,
    /// Whether a worker holds the file open (its `data_version` is the signal); false while
    /// released.
    pub open: bool,
    /// The file's stamp right after this handle last released it (`None` while open).
    pub released: Option<DiskStamp>,
}

/// What another writer did since the last take.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OtherWrites {
    /// [`OtherWriters::changes`] at the take.
    pub changes: u64,
    /// Files another writer created or changed, with their size, in path order.
    pub written: Vec<(String, i64)>,
    /// Files another writer deleted, in path order (a file deleted and then written again
    /// before the take is in `written` only; one written and then deleted, here only).
    pub deleted: Vec<String>,
    /// Changed or deleted files beyond [`MAX_REPORTED_WRITES`], not named.
    pub unreported: u64,
}

/// The connection's read of who committed: `data_version` and this connection's own
/// `adf_files` row changes (`None` when its update hook was refused).
type Version = (i64, Option<u64>);

/// One file as this handle last knew it.
#[derive(Debug)]
struct KnownFile {
    path: Box<str>,
    rowid: i64,
    /// `hash(updated_at, size)`.
    stamp: u64,
}

#[derive(Debug, Default)]
struct WatchState {
    changes: u64,
    /// Path → size of a file another writer wrote, `None` for one it deleted.
    changed: BTreeMap<String, Option<i64>>,
    unreported: u64,
    /// Every file as this handle last knew it, in path order. `None` until the first open.
    known: Option<Vec<KnownFile>>,
    /// The open connection's last [`Version`]; `None` while released.
    connection: Option<Version>,
    released: Option<DiskStamp>,
}

/// The other-writers state of one handle, shared by its successive workers.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    state: Mutex<WatchState>,
}

fn version(file: &AdfFile) -> Result<Version> {
    let data_version: i64 = file
        .conn
        .prepare_cached("PRAGMA data_version")?
        .query_row([], |row| row.get(0))?;
    Ok((data_version, file.config_cache.files_generation()))
}

fn hash_of(value: impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// One file's change stamp: rowid, path, `updated_at`, size.
struct Stamp {
    rowid: i64,
    path: String,
    updated_at: String,
    size: i64,
}

impl Stamp {
    fn hash(&self) -> u64 {
        hash_of((&self.updated_at, self.size))
    }
}

fn stamps(file: &AdfFile) -> Result<Vec<Stamp>> {
    let mut stmt = file
        .conn
        .prepare_cached("SELECT rowid, path, updated_at, size FROM adf_files")?;
    let rows = stmt.query_map([], |row| {
        Ok(Stamp {
            rowid: row.get(0)?,
            path: row.get(1)?,
            updated_at: row.get(2)?,
            size: row.get(3)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

fn known_of(stamps: &[Stamp]) -> Vec<KnownFile> {
    let mut known: Vec<KnownFile> = stamps
        .iter()
        .map(|stamp| KnownFile {
            path: stamp.path.as_str().into(),
            rowid: stamp.rowid,
            stamp: stamp.hash(),
        })
        .collect();
    known.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    known
}

/// Where `path` is in `known` (sorted by path).
fn find(known: &[KnownFile], path: &str) -> Option<usize> {
    known.binary_search_by(|file| (*file.path).cmp(path)).ok()
}

impl Watch {
    fn lock(&self) -> MutexGuard<'_, WatchState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A worker opened the file. A reopen after an idle release counts as a possible change by
    /// another writer, whatever the disk stamps say: a write that lands while the previous
    /// worker closes (after its last `data_version` check, before the stamp it leaves) moves
    /// no stamp the next open could compare, so only the contents tell. Which files changed is
    /// still decided by their own stamps; the count only makes the daemon re-read config and
    /// timers once.
    pub(crate) fn opened(&self, file: &AdfFile) {
        file.config_cache.track_files_touched();
        // Opening may have written (a migration, the skills registry regenerated): that is this
        // handle's own doing, before its update hook existed, so which files is not known and
        // then nothing is named.
        let report = file.open_report();
        let own = if report.notes.is_empty() && report.migrated_steps.is_empty() {
            Some(HashSet::new())
        } else {
            None
        };
        let mut state = self.lock();
        let reopened = state.released.take().is_some();
        if reopened {
            state.changes += 1;
            record_files(&mut state, file, own.as_ref());
        } else if state.known.is_none() {
            state.known = stamps(file).ok().map(|stamps| known_of(&stamps));
        }
        state.connection = version(file).ok();
    }

    /// Between jobs and at release: counts another writer's commits since the last check and
    /// names the files it changed; files this connection wrote meanwhile become the known ones.
    pub(crate) fn check(&self, file: &AdfFile) {
        let Ok(now) = version(file) else { return };
        let own = file.config_cache.take_files_touched();
        let mut state = self.lock();
        let Some(last) = state.connection.replace(now) else {
            return;
        };
        let external = now.0 != last.0;
        let own_files = now.1.is_none() || now.1 != last.1;
        match (external, own_files) {
            (false, false) => {}
            (false, true) => {
                state.known = stamps(file).ok().map(|stamps| known_of(&stamps));
            }
            (true, false) => {
                state.changes += 1;
                record_files(&mut state, file, Some(&HashSet::new()));
            }
            (true, true) => {
                state.changes += 1;
                record_files(&mut state, file, own.as_ref());
            }
        }
    }

    /// The worker closed the file for idleness; `after` is the stamp taken right after.
    pub(crate) fn released(&self, after: DiskStamp) {
        let mut state = self.lock();
        state.connection = None;
        state.released = Some(after);
    }

    pub(crate) fn snapshot(&self) -> OtherWriters {
        let state = self.lock();
        OtherWriters {
            changes: state.changes,
            open: state.connection.is_some(),
            released: state.released,
        }
    }

    pub(crate) fn take(&self) -> OtherWrites {
        let mut state = self.lock();
        let mut taken = OtherWrites {
            changes: state.changes,
            unreported: std::mem::take(&mut state.unreported),
            ..OtherWrites::default()
        };
        for (path, size) in std::mem::take(&mut state.changed) {
            match size {
                Some(size) => taken.written.push((path, size)),
                None => taken.deleted.push(path),
            }
        }
        taken
    }
}

/// Adds the files whose stamps differ from the known ones, and the known files that are gone,
/// except the rows `own` (this connection's writes and deletes) names, to the report, and makes
/// the current files the known ones. `own` is `None` when this connection's writes are not
/// known: nothing is named then.
fn record_files(state: &mut WatchState, file: &AdfFile, own: Option<&HashSet<i64>>) {
    let Ok(stamps) = stamps(file) else {
        state.known = None;
        return;
    };
    let now = known_of(&stamps);
    if let (Some(known), Some(own)) = (&state.known, own) {
        for stamp in &stamps {
            let unchanged =
                find(known, &stamp.path).is_some_and(|at| known[at].stamp == stamp.hash());
            if !unchanged && !own.contains(&stamp.rowid) {
                report(
                    &mut state.changed,
                    &mut state.unreported,
                    &stamp.path,
                    Some(stamp.size),
                );
            }
        }
        for gone in known {
            if find(&now, &gone.path).is_none() && !own.contains(&gone.rowid) {
                report(&mut state.changed, &mut state.unreported, &gone.path, None);
            }
        }
    }
    state.known = Some(now);
}

/// Keeps `path`'s latest change (`None`: deleted) while fewer than [`MAX_REPORTED_WRITES`]
/// paths are kept, else counts it.
fn report(
    changed: &mut BTreeMap<String, Option<i64>>,
    unreported: &mut u64,
    path: &str,
    size: Option<i64>,
) {
    if let Some(kept) = changed.get_mut(path) {
        *kept = size;
    } else if changed.len() < MAX_REPORTED_WRITES {
        changed.insert(path.to_owned(), size);
    } else {
        *unreported += 1;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use crate::{AdfFile, Caller, CreateOptions, FileWrite, IdleRelease, StoreHandle};

    fn write(file: &mut AdfFile, path: &str, text: &str) {
        file.file_write(Caller::Owner, path, text.as_bytes(), &FileWrite::default())
            .unwrap();
    }

    /// What other writers did, taken inside a job of `handle` (the worker checks around jobs).
    fn taken_in_a_job(handle: &StoreHandle) -> super::OtherWrites {
        handle
            .call({
                let handle = handle.clone();
                move |_| Ok(handle.take_other_writes().unwrap())
            })
            .unwrap()
    }

    fn created(dir: &tempfile::TempDir) -> std::path::PathBuf {
        let path = dir.path().join("a.adf");
        AdfFile::create(&path, &CreateOptions::default())
            .unwrap()
            .close()
            .unwrap();
        path
    }

    #[test]
    fn own_writes_are_not_another_writers_and_anothers_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = created(&dir);
        let handle = StoreHandle::open_watched(&path, IdleRelease::Never).unwrap();
        for round in 0..3 {
            handle
                .call(move |file| {
                    write(file, "own.md", &format!("round {round}"));
                    Ok(())
                })
                .unwrap();
        }
        handle.call(|_| Ok(())).unwrap();
        assert_eq!(handle.other_writers().unwrap().changes, 0);
        assert!(handle.take_other_writes().unwrap().written.is_empty());

        let mut other = AdfFile::open(&path).unwrap();
        write(&mut other, "notes/outside.md", "from another connection");
        // The worker sees it at its next job, before running it.
        let seen = taken_in_a_job(&handle);
        assert_eq!(seen.changes, 1);
        assert_eq!(
            seen.written,
            vec![(
                "notes/outside.md".to_owned(),
                "from another connection".len() as i64
            )]
        );
        drop(other);
        handle.close().unwrap();
    }

    #[test]
    fn another_writers_commit_during_a_job_that_writes_files_is_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let path = created(&dir);
        let handle = StoreHandle::open_watched(&path, IdleRelease::Never).unwrap();
        let outside = path.clone();
        handle
            .call(move |file| {
                write(file, "own/before.md", "ours");
                let mut other = AdfFile::open(&outside).unwrap();
                write(&mut other, "theirs.md", "theirs");
                drop(other);
                write(file, "own/after.md", "ours too");
                Ok(())
            })
            .unwrap();
        // Taken in the next job: the worker's check after a job runs once its reply is sent.
        let seen = taken_in_a_job(&handle);
        assert_eq!(seen.changes, 1);
        assert_eq!(seen.written, vec![("theirs.md".to_owned(), 6)]);
        handle.close().unwrap();
    }

    /// The race at an idle release: another writer commits after the worker's last check and
    /// before the stamp the release leaves (here the stamp is taken after that write, as a
    /// slow close would). The stamps cannot tell; the reopen still counts the change and names
    /// the file.
    #[test]
    fn a_write_during_the_close_is_found_when_the_file_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let path = created(&dir);
        let watch = super::Watch::default();
        let mut ours = AdfFile::open(&path).unwrap();
        watch.opened(&ours);
        write(&mut ours, "own.md", "ours");
        watch.check(&ours);
        let mut other = AdfFile::open(&path).unwrap();
        write(&mut other, "timer-set.md", "outside");
        other.close().unwrap();
        ours.close().unwrap();
        watch.released(super::DiskStamp::of(&path));

        let reopened = AdfFile::open(&path).unwrap();
        watch.opened(&reopened);
        let seen = watch.take();
        assert_eq!(seen.changes, 1);
        assert_eq!(seen.written, vec![("timer-set.md".to_owned(), 7)]);
    }

    fn delete(file: &mut AdfFile, path: &str) {
        file.file_delete_as_owner(path, false).unwrap();
    }

    #[test]
    fn anothers_delete_is_named_and_own_deletes_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = created(&dir);
        let handle = StoreHandle::open_watched(&path, IdleRelease::Never).unwrap();
        handle
            .call(|file| {
                write(file, "own.md", "ours");
                write(file, "docs/theirs.md", "to be deleted outside");
                Ok(())
            })
            .unwrap();
        handle
            .call(|file| {
                delete(file, "own.md");
                Ok(())
            })
            .unwrap();
        let seen = taken_in_a_job(&handle);
        assert_eq!(seen.changes, 0);
        assert!(seen.deleted.is_empty() && seen.written.is_empty());

        let mut other = AdfFile::open(&path).unwrap();
        delete(&mut other, "docs/theirs.md");
        let seen = taken_in_a_job(&handle);
        assert_eq!(seen.changes, 1);
        assert_eq!(seen.deleted, vec!["docs/theirs.md".to_owned()]);
        assert!(seen.written.is_empty());
        // Taken once.
        assert!(taken_in_a_job(&handle).deleted.is_empty());
        drop(other);
        handle.close().unwrap();
    }

    #[test]
    fn anothers_delete_during_a_job_that_deletes_files_is_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let path = created(&dir);
        let handle = StoreHandle::open_watched(&path, IdleRelease::Never).unwrap();
        handle
            .call(|file| {
                for name in ["own/a.md", "own/b.md", "theirs.md"] {
                    write(file, name, "x");
                }
                Ok(())
            })
            .unwrap();
        let outside = path.clone();
        handle
            .call(move |file| {
                delete(file, "own/a.md");
                let mut other = AdfFile::open(&outside).unwrap();
                delete(&mut other, "theirs.md");
                drop(other);
                delete(file, "own/b.md");
                Ok(())
            })
            .unwrap();
        let seen = taken_in_a_job(&handle);
        assert_eq!(seen.changes, 1);
        assert_eq!(seen.deleted, vec!["theirs.md".to_owned()]);
        handle.close().unwrap();
    }

    #[test]
    fn a_file_written_and_deleted_outside_between_takes_is_one_delete() {
        let dir = tempfile::tempdir().unwrap();
        let path = created(&dir);
        let handle = StoreHandle::open_watched(&path, IdleRelease::Never).unwrap();
        handle.call(|_| Ok(())).unwrap();
        let mut other = AdfFile::open(&path).unwrap();
        write(&mut other, "brief.md", "here");
        handle.call(|_| Ok(())).unwrap();
        delete(&mut other, "brief.md");
        write(&mut other, "back.md", "gone");
        handle.call(|_| Ok(())).unwrap();
        delete(&mut other, "back.md");
        write(&mut other, "back.md", "and back");
        let seen = taken_in_a_job(&handle);
        assert_eq!(seen.changes, 3);
        assert_eq!(seen.deleted, vec!["brief.md".to_owned()]);
        assert_eq!(seen.written, vec![("back.md".to_owned(), 8)]);
        drop(other);
        handle.close().unwrap();
    }

    #[test]
    fn a_delete_while_released_is_found_when_the_file_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let path = created(&dir);
        let handle =
            StoreHandle::open_watched(&path, IdleRelease::After(Duration::from_millis(20)))
                .unwrap();
        handle
            .call(|file| {
                write(file, "notes/rm.md", "to go");
                Ok(())
            })
            .unwrap();
        assert!(handle.wait_until_released(Duration::from_secs(5)));
        let stamp = handle.other_writers().unwrap().released.unwrap();

        let mut other = AdfFile::open(&path).unwrap();
        delete(&mut other, "notes/rm.md");
        other.close().unwrap();
        assert_ne!(stamp, super::DiskStamp::of(&path));

        let seen = taken_in_a_job(&handle);
        assert_eq!(seen.changes, 1);
        assert_eq!(seen.deleted, vec!["notes/rm.md".to_owned()]);
        assert!(seen.written.is_empty());
        handle.close().unwrap();
    }

    #[test]
    fn a_write_while_released_is_found_when_the_file_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let path = created(&dir);
        let handle =
            StoreHandle::open_watched(&path, IdleRelease::After(Duration::from_millis(20)))
                .unwrap();
        handle
            .call(|file| {
                write(file, "own.md", "ours");
                Ok(())
            })
            .unwrap();
        assert!(handle.wait_until_released(Duration::from_secs(5)));
        let released = handle.other_writers().unwrap();
        assert!(!released.open);
        let stamp = released.released.unwrap();
        assert_eq!(stamp, super::DiskStamp::of(&path), "nothing wrote since");

        let mut other = AdfFile::open(&path).unwrap();
        write(&mut other, "put.md", "adf put");
        other.close().unwrap();
        assert_ne!(stamp, super::DiskStamp::of(&path));

        let seen = taken_in_a_job(&handle);
        assert_eq!(seen.changes, 1);
        assert_eq!(seen.written, vec![("put.md".to_owned(), 7)]);
        handle.close().unwrap();
    }
}
