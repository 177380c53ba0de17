//! The runtime home directory (`$ADF_HOME`, default `~/.adf`): the owner identity and this
//! installation's runtime identity, kept outside every agent file.
//!
//! Layout:
//! - `owner.json`: the owner keystore (the `adf-crypto` keystore document plus the BIP-39
//!   `mnemonic`, so the owner can export it for backup or another machine).
//! - `runtime.json`: the runtime keystore, generated on first use.
//! - `daemon.json`: the control API addresses of the daemons running from this home, which no
//!   agent may reach (written by `adf-egress` when a daemon binds, removed when it stops).
//!
//! The directory is created at mode 0700 and both files at 0600; files are written to a temporary
//! name and then renamed (or hard-linked, when an existing file must not be replaced), so a crash
//! or a concurrent `adf` never leaves a half-written keystore. Decoded keys live only in memory,
//! in zeroizing types; nothing here prints or logs key material.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use adf_crypto::{OwnerIdentity, PublicIdentity, RuntimeIdentity};
use serde_json::Value;
use zeroize::Zeroizing;

/// File name of the owner keystore.
pub const OWNER_FILE: &str = "owner.json";
/// File name of the runtime keystore.
pub const RUNTIME_FILE: &str = "runtime.json";

/// What can go wrong with the home directory. Messages say what to do; none carries secrets.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HomeError {
    /// Neither `ADF_HOME` nor `HOME` is set.
    #[error("cannot find the runtime home: set ADF_HOME (or HOME) to a directory")]
    NoHomeDir,
    /// No owner identity has been created or imported yet.
    #[error(
        "no owner identity in {0}: run `adf owner init` to create one or `adf owner import` to restore one from its recovery phrase"
    )]
    NoOwner(PathBuf),
    /// `owner init`/`owner import` would replace a different existing owner.
    #[error(
        "an owner identity already exists in {path} ({did}); replacing it makes every file it provisioned foreign to this installation. Pass --force to replace it (back up the old phrase first with `adf owner export-mnemonic`)"
    )]
    OwnerExists {
        /// The home directory.
        path: PathBuf,
        /// The existing owner's DID.
        did: String,
    },
    /// The owner keystore has no mnemonic to export (written by another tool).
    #[error(
        "the owner keystore in {0} holds no recovery phrase; it cannot be exported (re-import the owner with `adf owner import` to store one)"
    )]
    NoMnemonic(PathBuf),
    /// A keystore file exists but cannot be used.
    #[error(
        "{path} is not a usable keystore ({reason}); restore it from a backup, or move it away and run `adf owner import`"
    )]
    BadKeystore {
        /// The keystore file.
        path: PathBuf,
        /// Why (public information only).
        reason: String,
    },
    /// The mnemonic offered is not a valid BIP-39 phrase (the words are never echoed).
    #[error("{0}; expected the 12 or 24 words of the owner's recovery phrase")]
    InvalidMnemonic(String),
    /// Reading or writing the directory failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// Where.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

type Result<T, E = HomeError> = std::result::Result<T, E>;

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> HomeError + use<> {
    let path = path.to_path_buf();
    move |source| HomeError::Io {
        action,
        path,
        source,
    }
}

/// The owner as loaded from the home: keys plus, when stored, the recovery phrase.
pub struct OwnerRecord {
    /// The owner's keys.
    pub identity: OwnerIdentity,
    mnemonic: Option<Zeroizing<String>>,
    /// When the owner was created or imported (ISO-8601), if recorded.
    pub created_at: Option<String>,
}

impl std::fmt::Debug for OwnerRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnerRecord")
            .field("did", &self.identity.did())
            .field("mnemonic", &self.mnemonic.as_ref().map(|_| "<redacted>"))
            .field("created_at", &self.created_at)
            .finish()
    }
}

impl OwnerRecord {
    /// The recovery phrase (secret: show it only when the owner asks to export it).
    pub fn mnemonic(&self) -> Option<&str> {
        self.mnemonic.as_deref().map(String::as_str)
    }
}

/// The home a test build uses when `ADF_HOME` is unset: one per process, named by pid and
/// start time so a reused pid never finds an earlier run's keystores.
fn hermetic_test_home() -> PathBuf {
    static HOME: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        std::env::temp_dir().join(format!("adf-test-home-{}-{started}", std::process::id()))
    })
    .clone()
}

/// True when both paths name one directory (compared as written when either does not exist).
fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a.components().eq(b.components()),
    }
}

/// The runtime's home directory.
#[derive(Debug, Clone)]
pub struct RuntimeHome {
    dir: PathBuf,
}

impl RuntimeHome {
    /// `$ADF_HOME`, else `$HOME/.adf`. Nothing is created until something is written.
    ///
    /// A test build (feature `hermetic-home`) never runs against the user's `~/.adf`: when
    /// `ADF_HOME` is unset or names `$HOME/.adf`, it answers a fresh home of this process under
    /// the temporary directory, so a test never inherits the owner identity of whoever runs
    /// the suite.
    pub fn from_env() -> Result<Self> {
        let user_home = std::env::var_os("HOME")
            .filter(|v| !v.is_empty())
            .map(|home| PathBuf::from(home).join(".adf"));
        if let Some(dir) = std::env::var_os("ADF_HOME").filter(|v| !v.is_empty()) {
            let names_user_home = user_home
                .as_deref()
                .is_some_and(|user| same_dir(user, Path::new(&dir)));
            if !(cfg!(feature = "hermetic-home") && names_user_home) {
                return Ok(Self::at(dir));
            }
        }
        if cfg!(feature = "hermetic-home") {
            return Ok(Self::at(hermetic_test_home()));
        }
        Ok(Self::at(user_home.ok_or(HomeError::NoHomeDir)?))
    }

    /// A home at an explicit directory (tests, embedding).
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        RuntimeHome { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where daemons on this machine record their control API addresses (rule 2 of §5.6
    /// holds in every process that reads it; see `adf_egress::control`).
    pub fn daemon_record_path(&self) -> PathBuf {
        self.dir.join(adf_egress::control::RECORD_FILE)
    }

    fn owner_path(&self) -> PathBuf {
        self.dir.join(OWNER_FILE)
    }

    fn runtime_path(&self) -> PathBuf {
        self.dir.join(RUNTIME_FILE)
    }

    /// True when an owner keystore exists.
    pub fn has_owner(&self) -> bool {
        self.owner_path().is_file()
    }

    /// The owner, or [`HomeError::NoOwner`] saying how to create one.
    pub fn owner(&self) -> Result<OwnerRecord> {
        self.load_owner()?
            .ok_or_else(|| HomeError::NoOwner(self.dir.clone()))
    }

    /// The owner if one exists.
    pub fn load_owner(&self) -> Result<Option<OwnerRecord>> {
        let path = self.owner_path();
        let Some(text) = read_secret(&path)? else {
            return Ok(None);
        };
        let bad = |reason: String| HomeError::BadKeystore {
            path: path.clone(),
            reason,
        };
        let identity = OwnerIdentity::from_keystore_json(&text).map_err(|e| bad(e.to_string()))?;
        let doc: Value = serde_json::from_str(&text).map_err(|_| bad("not JSON".into()))?;
        let mnemonic = doc
            .get("mnemonic")
            .and_then(Value::as_str)
            .map(|m| Zeroizing::new(m.to_owned()));
        let created_at = doc
            .get("created_at")
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(Some(OwnerRecord {
            identity,
            mnemonic,
            created_at,
        }))
    }

    /// The owner's public identity, if an owner exists.
    pub fn owner_public(&self) -> Result<Option<PublicIdentity>> {
        Ok(self.load_owner()?.map(|o| o.identity.public()))
    }

    /// Creates a new owner from a fresh 12-word phrase. Refuses to replace an existing owner
    /// unless `force`.
    pub fn init_owner(&self, force: bool) -> Result<OwnerRecord> {
        let mnemonic = OwnerIdentity::generate_mnemonic(&mut rand::rng())
            .map_err(|e| HomeError::InvalidMnemonic(e.to_string()))?;
        self.store_owner(&mnemonic, force)
    }

    /// Restores the owner from its recovery phrase. Importing the owner already stored is a
    /// no-op; replacing a different one needs `force`.
    pub fn import_owner(&self, mnemonic: &str, force: bool) -> Result<OwnerRecord> {
        self.store_owner(mnemonic, force)
    }

    /// The owner, created on the spot when none exists yet. The flag says whether it was created
    /// (callers tell the user to back up the phrase).
    pub fn ensure_owner(&self) -> Result<(OwnerRecord, bool)> {
        if let Some(owner) = self.load_owner()? {
            return Ok((owner, false));
        }
        match self.init_owner(false) {
            Ok(owner) => Ok((owner, true)),
            // Another process created one first: use it.
            Err(HomeError::OwnerExists { .. }) => Ok((self.owner()?, false)),
            Err(HomeError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::AlreadyExists =>
            {
                Ok((self.owner()?, false))
            }
            Err(e) => Err(e),
        }
    }

    fn store_owner(&self, mnemonic: &str, force: bool) -> Result<OwnerRecord> {
        let identity = OwnerIdentity::from_mnemonic(mnemonic)
            .map_err(|e| HomeError::InvalidMnemonic(e.to_string()))?;
        if self.has_owner() && !force && self.load_owner_lenient().is_none() {
            return Err(HomeError::BadKeystore {
                path: self.owner_path(),
                reason: "unreadable; pass --force to replace it".into(),
            });
        }
        if let Some(existing) = self.load_owner_lenient() {
            if existing == identity.did()
                && self.load_owner()?.is_some_and(|o| o.mnemonic.is_some())
            {
                return self.owner();
            }
            if !force && existing != identity.did() {
                return Err(HomeError::OwnerExists {
                    path: self.dir.clone(),
                    did: existing,
                });
            }
        }
        let normalized = Zeroizing::new(
            mnemonic
                .split_whitespace()
                .map(str::to_lowercase)
                .collect::<Vec<_>>()
                .join(" "),
        );
        let created_at = adf_crypto::attestation::to_iso8601(chrono::Utc::now());
        let keystore = identity.to_keystore_json();
        let mut doc: Value =
            serde_json::from_str(&keystore).map_err(|_| HomeError::BadKeystore {
                path: self.owner_path(),
                reason: "keystore serialization".into(),
            })?;
        if let Some(obj) = doc.as_object_mut() {
            obj.insert("mnemonic".into(), Value::String(normalized.to_string()));
            obj.insert("created_at".into(), Value::String(created_at.clone()));
        }
        let text = Zeroizing::new(doc.to_string());
        // serde_json's Value keeps its own copy of the phrase; clear the strings it holds.
        zeroize_value(doc);
        let replace = force || self.has_owner();
        self.write_secret(&self.owner_path(), text.as_bytes(), replace)?;
        Ok(OwnerRecord {
            identity,
            mnemonic: Some(normalized),
            created_at: Some(created_at),
        })
    }

    /// The DID in an existing owner keystore even if the rest is unusable.
    fn load_owner_lenient(&self) -> Option<String> {
        let text = read_secret(&self.owner_path()).ok()??;
        let doc: Value = serde_json::from_str(&text).ok()?;
        let did = doc.get("did")?.as_str()?.to_owned();
        zeroize_value(doc);
        Some(did)
    }

    /// This installation's runtime identity, generated and stored on first use.
    pub fn runtime(&self) -> Result<RuntimeIdentity> {
        if let Some(rt) = self.load_runtime()? {
            return Ok(rt);
        }
        let rt = RuntimeIdentity::generate();
        match self.write_secret(
            &self.runtime_path(),
            rt.to_keystore_json().as_bytes(),
            false,
        ) {
            Ok(()) => Ok(rt),
            // A concurrent first use won the race: everyone must use the stored one.
            Err(HomeError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::AlreadyExists =>
            {
                self.load_runtime()?.ok_or_else(|| HomeError::BadKeystore {
                    path: self.runtime_path(),
                    reason: "vanished while being created".into(),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// The runtime identity if one has been generated (never creates one: read-only callers).
    pub fn load_runtime(&self) -> Result<Option<RuntimeIdentity>> {
        let path = self.runtime_path();
        let Some(text) = read_secret(&path)? else {
            return Ok(None);
        };
        RuntimeIdentity::from_keystore_json(&text)
            .map(Some)
            .map_err(|e| HomeError::BadKeystore {
                path,
                reason: e.to_string(),
            })
    }

    fn ensure_dir(&self) -> Result<()> {
        if self.dir.is_dir() {
            return Ok(());
        }
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt as _;
            builder.mode(0o700);
        }
        builder
            .create(&self.dir)
            .map_err(io("cannot create the runtime home", &self.dir))
    }

    /// Writes `bytes` to `path` at mode 0600 through a temporary file. With `replace` false an
    /// existing file is left alone and the error kind is `AlreadyExists`.
    fn write_secret(&self, path: &Path, bytes: &[u8], replace: bool) -> Result<()> {
        self.ensure_dir()?;
        let tmp = self.dir.join(format!(
            ".{}.{}.{:016x}.tmp",
            path.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("keystore"),
            std::process::id(),
            rand::random::<u64>()
        ));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let result = (|| {
            let mut f = options.open(&tmp).map_err(io("cannot write", &tmp))?;
            f.write_all(bytes).map_err(io("cannot write", &tmp))?;
            f.sync_all().map_err(io("cannot write", &tmp))?;
            if replace {
                std::fs::rename(&tmp, path).map_err(io("cannot write", path))
            } else {
                // A hard link fails if the target exists, so a concurrent writer never loses.
                std::fs::hard_link(&tmp, path).map_err(io("cannot write", path))
            }
        })();
        let _ = std::fs::remove_file(&tmp);
        result?;
        if let Some(parent) = path.parent()
            && let Ok(d) = std::fs::File::open(parent)
        {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

/// Reads a keystore file into zeroizing memory; `None` when it does not exist.
fn read_secret(path: &Path) -> Result<Option<Zeroizing<String>>> {
    match std::fs::read(path) {
        Ok(bytes) => {
            let bytes = Zeroizing::new(bytes);
            let text = std::str::from_utf8(&bytes).map_err(|_| HomeError::BadKeystore {
                path: path.to_path_buf(),
                reason: "not UTF-8".into(),
            })?;
            Ok(Some(Zeroizing::new(text.to_owned())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("cannot read", path)(e)),
    }
}

/// Clears every string inside a JSON value before it is dropped.
fn zeroize_value(v: Value) {
    use zeroize::Zeroize as _;
    match v {
        Value::String(mut s) => s.zeroize(),
        Value::Array(a) => a.into_iter().for_each(zeroize_value),
        Value::Object(m) => m.into_iter().for_each(|(_, v)| zeroize_value(v)),
        _ => {}
    }
}
