//! The machine-wide record of daemons: rule 2 across runtime homes and users.
//!
//! `$ADF_HOME/daemon.json` tells only processes of the same home where a daemon's control API
//! listens. Every daemon therefore also publishes one file of its own, `adf-daemon.<pid>.<nonce>.json`
//! (its pid, the pid's start time and its control API addresses), in a directory every user
//! of this machine reads: `/run/adf/daemons` when this daemon may write there, otherwise the
//! system temp directory itself (`/tmp` on Unix, a fixed path, not `$TMPDIR`, so every user
//! agrees on it). Every policy reads both ([`machine_wide`]).
//!
//! Why this holds against other users:
//! - removal: a record lives only in a directory whose every component is owned by root or by
//!   the daemon's user and, when others may write to it, is sticky — so no other user can
//!   remove or rename it ([`publish`] checks the chain and refuses any other directory). A
//!   shared sub-directory such as `/tmp/adf-daemons` would belong to whichever user made it
//!   first, who could then delete everyone's records; that is why the fallback is `/tmp`
//!   itself.
//! - takeover: each daemon has its own file, created exclusively under a fresh name and made
//!   visible by a hard link (no reader sees it half written; nothing is overwritten), and
//!   written `0644` by its owner: nobody else can change what it says.
//! - spoofing: a record someone else writes can only add addresses to refuse; it cannot take
//!   one away. A record whose pid is not running (or runs a process started at another time:
//!   the pid was reused) is ignored, and the reader deletes such a record when it is its own
//!   user's.
//! - reading: a record is opened without following links and without blocking (a FIFO planted
//!   under a record name is skipped, not waited on), and only up to [`MAX_RECORD_BYTES`].
//!
//! Where the system cannot tell whether a pid is running (not Linux, or a record written in
//! another pid namespace), a record counts as live: a stale one refuses a dead port, which
//! costs nothing.

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::control::RecordError;

/// The preferred directory: the machine's runtime directory.
pub const RUN_DIR: &str = "/run/adf/daemons";

/// Every record file's name starts with this.
pub const RECORD_PREFIX: &str = "adf-daemon.";

/// A larger file under a record name is not a record.
pub const MAX_RECORD_BYTES: u64 = 16 * 1024;

/// The directories daemons publish their records in, the preferred first. Every reader scans
/// all of them.
pub fn machine_dirs() -> Vec<PathBuf> {
    if cfg!(unix) {
        vec![PathBuf::from(RUN_DIR), PathBuf::from("/tmp")]
    } else {
        vec![std::env::temp_dir()]
    }
}

/// One daemon's record, as published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineEntry {
    /// The daemon's process id.
    pub pid: u32,
    /// The process's start time in clock ticks since boot (Linux `/proc/<pid>/stat` field 22),
    /// so that a reused pid does not keep a dead daemon's record alive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<u64>,
    /// The pid namespace the pid belongs to (Linux `/proc/self/ns/pid`): a reader in another
    /// namespace (a container sharing this machine's loopback and `/tmp`) cannot judge it and
    /// counts the record as live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_namespace: Option<String>,
    /// Where its control API listens.
    pub addrs: Vec<SocketAddr>,
}

/// This process's published record: removed when dropped.
#[derive(Debug)]
pub struct MachineRecord {
    path: PathBuf,
}

impl MachineRecord {
    /// The record file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for MachineRecord {
    fn drop(&mut self) {
        // A record that cannot be removed is stale once this process exits, and ignored.
        let _ignored = std::fs::remove_file(&self.path);
    }
}

/// Publishes this process's control API `addrs` in the first of `dirs` that is safe and
/// writable ([`RUN_DIR`] is created when this process may create it). `Err` lists why each
/// directory was refused.
pub fn publish(dirs: &[PathBuf], addrs: &[SocketAddr]) -> Result<MachineRecord, RecordError> {
    let entry = MachineEntry {
        pid: std::process::id(),
        started: start_time(std::process::id()),
        pid_namespace: pid_namespace(),
        addrs: addrs.to_vec(),
    };
    let mut refused = Vec::new();
    for dir in dirs {
        match publish_in(dir, &entry) {
            Ok(record) => return Ok(record),
            Err(why) => refused.push(format!("{}: {why}", dir.display())),
        }
    }
    Err(RecordError::Io {
        action: "publishing the machine-wide daemon record in",
        path: refused.join("; "),
        source: std::io::Error::other("no safe, writable directory"),
    })
}

fn publish_in(dir: &Path, entry: &MachineEntry) -> Result<MachineRecord, String> {
    if dir == Path::new(RUN_DIR) {
        prepare_run_dir(dir);
    }
    let text = serde_json::to_vec(entry).map_err(|e| e.to_string())?;
    static NONCE: AtomicU64 = AtomicU64::new(0);
    for _attempt in 0..16 {
        let nonce = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default()
            ^ NONCE.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        let name = format!("{RECORD_PREFIX}{}.{nonce:016x}.json", entry.pid);
        let staging = dir.join(format!(".{name}.tmp"));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o644);
        let mut file = match options.open(&staging) {
            Ok(file) => file,
            // Someone holds this name (by chance or on purpose): take another.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e.to_string()),
        };
        let path = dir.join(&name);
        let published = (|| {
            let owner = owner_of(&file.metadata()?);
            safe_dir(dir, owner).map_err(std::io::Error::other)?;
            file.write_all(&text)?;
            file.sync_all()?;
            // A link never replaces an existing file: the record appears whole or not at all.
            std::fs::hard_link(&staging, &path)
        })();
        let _ignored = std::fs::remove_file(&staging);
        match published {
            Ok(()) => return Ok(MachineRecord { path }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err("no free record name after 16 attempts".to_owned())
}

/// Creates [`RUN_DIR`] sticky and writable by every user, when this process may (root);
/// otherwise it is used only if the system provides it.
fn prepare_run_dir(dir: &Path) {
    if dir.exists() {
        return;
    }
    let Some(parent) = dir.parent() else {
        return;
    };
    if std::fs::create_dir_all(parent).is_err() || std::fs::create_dir(dir).is_err() {
        return;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let _ignored = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777));
    }
}

#[cfg(unix)]
fn owner_of(meta: &std::fs::Metadata) -> u32 {
    std::os::unix::fs::MetadataExt::uid(meta)
}

#[cfg(not(unix))]
fn owner_of(_meta: &std::fs::Metadata) -> u32 {
    0
}

/// Whether no user but root and `owner` can remove or rename a file in `dir`: every
/// component from `dir` up to `/` is a real directory (not a link) owned by root or `owner`,
/// and sticky where group or others may write.
#[cfg(unix)]
pub fn safe_dir(dir: &Path, owner: u32) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    let dir = std::path::absolute(dir).map_err(|e| e.to_string())?;
    for component in dir.ancestors() {
        let meta = std::fs::symlink_metadata(component)
            .map_err(|e| format!("{}: {e}", component.display()))?;
        if !meta.is_dir() {
            return Err(format!("{} is not a directory", component.display()));
        }
        if meta.uid() != 0 && meta.uid() != owner {
            return Err(format!(
                "{} belongs to another user (uid {}), who could remove the record",
                component.display(),
                meta.uid()
            ));
        }
        let others_write = meta.mode() & 0o022 != 0;
        let sticky = meta.mode() & 0o1000 != 0;
        if others_write && !sticky {
            return Err(format!(
                "{} is writable by other users and not sticky: they could remove the record",
                component.display()
            ));
        }
    }
    Ok(())
}

/// Not Unix: no ownership to check.
#[cfg(not(unix))]
pub fn safe_dir(_dir: &Path, _owner: u32) -> Result<(), String> {
    Ok(())
}

/// A record file found in a directory.
#[derive(Debug, Clone)]
pub struct Found {
    /// The record file.
    pub path: PathBuf,
    /// The user who owns it.
    pub owner: u32,
    /// What it says.
    pub entry: MachineEntry,
}

/// Every well-formed record in `dir`, live or not. Anything else under a record name (not a
/// regular file, a link, too large, not a record) is skipped.
pub fn scan(dir: &Path) -> Vec<Found> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with(RECORD_PREFIX) && name.ends_with(".json")
        })
        .filter_map(|entry| read_one(&entry.path()))
        .collect()
}

fn read_one(path: &Path) -> Option<Found> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        &mut options,
        libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
    );
    let file = options.open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_RECORD_BYTES {
        return None;
    }
    let mut text = Vec::new();
    file.take(MAX_RECORD_BYTES + 1)
        .read_to_end(&mut text)
        .ok()?;
    let entry: MachineEntry = serde_json::from_slice(&text).ok()?;
    Some(Found {
        path: path.to_path_buf(),
        owner: owner_of(&meta),
        entry,
    })
}

/// Whether the daemon a record names still runs: its pid exists and, when the record says
/// when it started, started then.
pub fn is_live(entry: &MachineEntry) -> bool {
    if !cfg!(target_os = "linux") {
        return true;
    }
    if entry.pid_namespace.is_some() && entry.pid_namespace != pid_namespace() {
        return true;
    }
    match (start_time(entry.pid), entry.started) {
        (None, _) => false,
        (Some(now), Some(then)) => now == then,
        (Some(_), None) => true,
    }
}

/// The start time of process `pid` (Linux: `/proc/<pid>/stat` field 22); `None` when it does
/// not run or the system does not say. A process that exited and waits for its parent to reap
/// it (a zombie, state `Z` or `X`) does not run: it holds no socket any more, and its port
/// may already be someone else's.
pub fn start_time(pid: u32) -> Option<u64> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    if matches!(fields.next()?, "Z" | "X" | "x") {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// This process's pid namespace (Linux), e.g. `pid:[4026531836]`.
pub fn pid_namespace() -> Option<String> {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .map(|link| link.to_string_lossy().into_owned())
}

/// The control API addresses of every live daemon recorded in `dirs`. Records of dead
/// daemons that belong to this process's user are deleted on the way.
pub fn live_in(dirs: &[PathBuf]) -> Vec<SocketAddr> {
    let me = this_user();
    let mut addrs = Vec::new();
    for found in dirs.iter().flat_map(|dir| scan(dir)) {
        if is_live(&found.entry) {
            addrs.extend_from_slice(&found.entry.addrs);
        } else if Some(found.owner) == me {
            let _ignored = std::fs::remove_file(&found.path);
        }
    }
    addrs
}

/// The uid this process runs as (owner of `/proc/self`); `None` where the system does not say.
fn this_user() -> Option<u32> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    std::fs::metadata("/proc/self")
        .ok()
        .map(|meta| owner_of(&meta))
}

/// The control API addresses of every live daemon on this machine ([`machine_dirs`]), for a
/// check on a hot path: a directory is listed again only when it changed (or changed so
/// recently that a second change within the file system's timestamp granularity could hide),
/// and each cached record's pid is checked on every call.
pub fn machine_wide() -> Vec<SocketAddr> {
    type Stamp = (Option<SystemTime>, u64);
    static CACHE: Mutex<Vec<(PathBuf, Stamp, Vec<Found>)>> = Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    let mut addrs = Vec::new();
    for dir in machine_dirs() {
        let Ok(meta) = std::fs::metadata(&dir) else {
            cache.retain(|(cached, _, _)| *cached != dir);
            continue;
        };
        let modified = meta.modified().ok();
        let stamp: Stamp = (modified, inode(&meta));
        let settled = modified
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .is_some_and(|age| age > Duration::from_secs(2));
        let cached = cache
            .iter()
            .find(|(cached, seen, _)| *cached == dir && *seen == stamp && settled)
            .map(|(_, _, found)| found.clone());
        let found = match cached {
            Some(found) => found,
            None => {
                let me = this_user();
                let found: Vec<Found> = scan(&dir)
                    .into_iter()
                    .filter(|found| {
                        let live = is_live(&found.entry);
                        if !live && Some(found.owner) == me {
                            let _ignored = std::fs::remove_file(&found.path);
                        }
                        live
                    })
                    .collect();
                cache.retain(|(cached, _, _)| *cached != dir);
                cache.push((dir.clone(), stamp, found.clone()));
                found
            }
        };
        addrs.extend(
            found
                .iter()
                .filter(|found| is_live(&found.entry))
                .flat_map(|found| found.entry.addrs.iter().copied()),
        );
    }
    addrs
}

#[cfg(unix)]
fn inode(meta: &std::fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(meta)
}

#[cfg(not(unix))]
fn inode(_meta: &std::fs::Metadata) -> u64 {
    0
}
