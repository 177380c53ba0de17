//! Rule 2's registry: the control APIs no agent may reach.
//!
//! Three sources, all consulted by every [`crate::Policy`] ([`known`]):
//! - the addresses this process serves its control API on ([`protect_control_api`], or
//!   [`register`] while its [`Registration`] lives);
//! - the machine-wide record ([`crate::machine`]): every daemon of every runtime home and
//!   every user on this machine publishes its control API there, so an agent of one install
//!   never reaches another install's daemon;
//! - the record daemons keep in the runtime home (`$ADF_HOME/daemon.json`, [`write_record`]
//!   at bind, [`remove_record`] on clean shutdown), which every other process that runs agent
//!   code (`adf code`, `adf run`, `adf tool`, `adf chat`) reads into its policy
//!   ([`read_record`]) — so the control API is out of reach there too.
//!
//! A daemon does all three at once with [`register`].
//!
//! A closed control port does not stay closed: the kernel hands it to the next listener that
//! asks for any free port, and that listener is no control API. So a daemon that stops
//! ([`Registration::release`]) takes its addresses out of all three, this process's registry
//! too (a test process runs hundreds of daemons one after another, and a port refused for the
//! life of the process left a later test's own server unreachable now and then). A record
//! left behind by a daemon that died is ignored once its pid is gone (machine-wide) or
//! refuses a port that may be reused (the home's; rare, and only for that home).
//!
//! A control API bound to `0.0.0.0`/`::` is reached through every address of this machine, so
//! each of them is refused on its port.

use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::rules::{canonical, is_this_machine};

/// File name of the record in the runtime home.
pub const RECORD_FILE: &str = "daemon.json";

/// Control API addresses of this process, protected for the life of the process.
static IN_PROCESS: Mutex<Vec<SocketAddr>> = Mutex::new(Vec::new());

/// Control API addresses of this process's [`Registration`]s, one entry per registration
/// (two daemons of one process may have held the same address one after the other); each
/// leaves when its registration is released or dropped.
static REGISTERED: Mutex<Vec<SocketAddr>> = Mutex::new(Vec::new());

/// Registers an address this process serves its control API on: from now on no policy
/// allows it (on any loopback, unspecified or local spelling of its port). For the life of
/// the process; a daemon that stops uses [`register`] instead.
pub fn protect_control_api(addr: SocketAddr) {
    let mut apis = IN_PROCESS.lock().unwrap_or_else(PoisonError::into_inner);
    if !apis.contains(&addr) {
        apis.push(addr);
    }
}

/// The control APIs this process registered and has not released.
pub fn in_process() -> Vec<SocketAddr> {
    let mut apis = IN_PROCESS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    apis.extend(
        REGISTERED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .copied(),
    );
    apis
}

/// Every control API rule 2 refuses: `extra` (a runtime home's record, read by the caller),
/// this process's and every live daemon's on this machine.
pub fn known(extra: &[SocketAddr]) -> Vec<SocketAddr> {
    let mut apis = in_process();
    apis.extend(crate::machine::machine_wide());
    apis.extend_from_slice(extra);
    apis
}

/// A daemon's registration of its control API: this process's registry, the runtime home's
/// record and the machine-wide record. Releasing or dropping it removes all three: keep it
/// exactly as long as the listener accepts (the daemon holds it in the task that accepts).
#[derive(Debug)]
pub struct Registration {
    home_record: PathBuf,
    machine: Option<crate::machine::MachineRecord>,
    addrs: Vec<SocketAddr>,
    released: bool,
}

impl Registration {
    /// The machine-wide record file, when it could be published.
    pub fn machine_record(&self) -> Option<&Path> {
        self.machine.as_ref().map(|record| record.path())
    }

    /// The control API stopped listening: removes both records and its addresses from this
    /// process's registry (the kernel may give the port to anyone now, and that listener is
    /// no control API). Dropping the registration does the same.
    pub fn release(mut self) {
        self.remove();
    }

    fn remove(&mut self) {
        if std::mem::replace(&mut self.released, true) {
            return;
        }
        let mut registered = REGISTERED.lock().unwrap_or_else(PoisonError::into_inner);
        for addr in &self.addrs {
            if let Some(at) = registered.iter().position(|held| held == addr) {
                registered.swap_remove(at);
            }
        }
        drop(registered);
        self.machine = None;
        if let Err(error) = remove_record(&self.home_record) {
            tracing::warn!(%error, "cannot remove the control API record (a stale one is harmless)");
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Registers `addrs`, every address this process serves its control API on (and nothing
/// else: a listener that serves only agent content is not a control API and stays
/// reachable), with all three sources of rule 2. A record that cannot be written is reported
/// (the daemon's own agents stay covered by the in-process registry).
pub fn register(home_record: &Path, addrs: &[SocketAddr]) -> Registration {
    REGISTERED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend_from_slice(addrs);
    if let Err(error) = write_record(home_record, addrs) {
        tracing::warn!(%error, "cannot record the control API address in the runtime home; `adf code`, `adf tool` and `adf run` of this home rely on the machine-wide record");
    }
    let machine = match crate::machine::publish(&crate::machine::machine_dirs(), addrs) {
        Ok(record) => Some(record),
        Err(error) => {
            tracing::warn!(%error, "cannot publish the control API in the machine-wide daemon record; agents of other runtime homes on this machine will not know to refuse it");
            None
        }
    };
    Registration {
        home_record: home_record.to_path_buf(),
        machine,
        addrs: addrs.to_vec(),
        released: false,
    }
}

/// Whether a connection to `ip:port` may reach one of `apis`: the API's own address, or any
/// address of this machine on an API's port (a loopback bind is reached through every loopback
/// spelling, an unspecified bind through every local address; refusing the few local
/// spellings that would not reach a specific bind costs nothing).
pub fn reaches(apis: &[SocketAddr], ip: IpAddr, port: u16) -> bool {
    let ip = canonical(ip);
    let on_port: Vec<IpAddr> = apis
        .iter()
        .filter(|api| api.port() == port)
        .map(|api| canonical(api.ip()))
        .collect();
    !on_port.is_empty() && (on_port.contains(&ip) || is_this_machine(ip))
}

/// What went wrong with the record.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The record file could not be read, written or removed, or its directory created.
    #[error("{action} {path}: {source}")]
    Io {
        /// The operation that failed, e.g. "reading" or "writing".
        action: &'static str,
        /// The record file, or its directory.
        path: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The record file exists but does not parse as a daemon record (or could not be encoded).
    #[error("{path} is not a daemon record: {detail}")]
    Malformed {
        /// The record file.
        path: String,
        /// The JSON error.
        detail: String,
    },
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    daemons: Vec<Entry>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    pid: u32,
    addrs: Vec<SocketAddr>,
}

/// The control API addresses recorded at `path`; none when there is no record.
pub fn read_record(path: &Path) -> Result<Vec<SocketAddr>, RecordError> {
    Ok(load(path)?
        .daemons
        .into_iter()
        .flat_map(|entry| entry.addrs)
        .collect())
}

/// The control API addresses recorded at `path`, for a check on a hot path (every model
/// request, every fetch): the record is read again only when the file changed — its inode
/// ([`write_record`] replaces it by a rename, so every write is a new one), modification time
/// or length — so an unchanged record costs one `stat`. An unreadable record is reported and
/// counts as empty: the in-process registry still holds.
pub fn recorded(path: &Path) -> Vec<SocketAddr> {
    type Stamp = (Option<std::time::SystemTime>, u64, u64);
    static CACHE: Mutex<Vec<(PathBuf, Stamp, Vec<SocketAddr>)>> = Mutex::new(Vec::new());
    let stamp: Stamp = match std::fs::metadata(path) {
        Ok(meta) => (meta.modified().ok(), meta.len(), inode(&meta)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(_) => (None, u64::MAX, 0),
    };
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    if stamp.0.is_some()
        && let Some((_, _, addrs)) = cache
            .iter()
            .find(|(p, seen, _)| p == path && *seen == stamp)
    {
        return addrs.clone();
    }
    let addrs = read_record(path).unwrap_or_else(|error| {
        tracing::warn!(%error, "cannot read the daemon record; rule 2 covers this process's control API only");
        Vec::new()
    });
    cache.retain(|(p, _, _)| p != path);
    cache.push((path.to_path_buf(), stamp, addrs.clone()));
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

/// Records that this process serves its control API on `addrs` (replacing what it recorded
/// before; other daemons' entries stay). Written atomically at mode 0600.
pub fn write_record(path: &Path, addrs: &[SocketAddr]) -> Result<(), RecordError> {
    let mut record = load(path).unwrap_or_default();
    let pid = std::process::id();
    record.daemons.retain(|entry| entry.pid != pid);
    record.daemons.push(Entry {
        pid,
        addrs: addrs.to_vec(),
    });
    store(path, &record)
}

/// Removes this process's entry (the file when no entry is left). A missing record is fine.
pub fn remove_record(path: &Path) -> Result<(), RecordError> {
    let mut record = match load(path) {
        Ok(record) => record,
        // Nothing of ours can be recovered from a damaged record; it is left for the owner.
        Err(RecordError::Malformed { .. }) => return Ok(()),
        Err(error) => return Err(error),
    };
    let pid = std::process::id();
    record.daemons.retain(|entry| entry.pid != pid);
    if record.daemons.is_empty() {
        return match std::fs::remove_file(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(io_error("removing", path, source)),
        };
    }
    store(path, &record)
}

fn io_error(action: &'static str, path: &Path, source: std::io::Error) -> RecordError {
    RecordError::Io {
        action,
        path: path.display().to_string(),
        source,
    }
}

fn load(path: &Path) -> Result<Record, RecordError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Record::default()),
        Err(source) => return Err(io_error("reading", path, source)),
    };
    serde_json::from_str(&text).map_err(|e| RecordError::Malformed {
        path: path.display().to_string(),
        detail: e.to_string(),
    })
}

fn store(path: &Path, record: &Record) -> Result<(), RecordError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| io_error("creating", dir, e))?;
    let temporary = path.with_extension(format!("json.tmp-{}", std::process::id()));
    let text = serde_json::to_vec_pretty(record).map_err(|e| RecordError::Malformed {
        path: path.display().to_string(),
        detail: e.to_string(),
    })?;
    let written = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&temporary)?;
        file.write_all(&text)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if let Err(source) = written {
        let _ignored = std::fs::remove_file(&temporary);
        return Err(io_error("writing", path, source));
    }
    Ok(())
}
