//! The per-installation control-API token: `$ADF_HOME/daemon-token`.
//!
//! Every daemon requires a token for its control API, loopback included, because any local
//! process (another user's code, a container, a web page through the browser) can reach a
//! loopback port. The token is generated on the first daemon start and reused afterwards, so
//! the `adf` client commands of the same home find it without a flag. `ADF_DAEMON_TOKEN`, when
//! set, replaces it for the daemon and the client alike.
//!
//! The file is created at mode 0600 in the 0700 home through a temporary file and a hard link:
//! a crash never leaves half a token, and two daemons starting at once agree on one token (the
//! second link fails and that daemon reads the first one's file).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use adf_runtime::home::RuntimeHome;

use crate::error::ServerError;

/// File name of the token inside `$ADF_HOME`.
pub const TOKEN_FILE: &str = "daemon-token";

/// The environment variable that chooses the token (daemon and client).
pub const TOKEN_ENV: &str = "ADF_DAEMON_TOKEN";

/// Where the token of `home` lives.
pub fn token_path(home: &RuntimeHome) -> PathBuf {
    home.dir().join(TOKEN_FILE)
}

/// The token a daemon of `home` requires: `from_env` (the value of `ADF_DAEMON_TOKEN`) when it
/// is set and not empty, else the home's token file, created on first use.
pub fn daemon_token(home: &RuntimeHome, from_env: Option<String>) -> Result<String, ServerError> {
    if let Some(token) = from_env.filter(|t| !t.trim().is_empty()) {
        return Ok(token);
    }
    load_or_create(home)
}

/// The token a client of `home` sends: `from_env` when set, else the home's token file when it
/// exists. Never creates the file (only a daemon does).
pub fn client_token(home: &RuntimeHome, from_env: Option<String>) -> Option<String> {
    if let Some(token) = from_env.filter(|t| !t.trim().is_empty()) {
        return Some(token);
    }
    read(&token_path(home)).ok().flatten()
}

/// Reads the token file; `None` when it is absent or empty.
fn read(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text.trim().to_owned()).filter(|t| !t.is_empty())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn load_or_create(home: &RuntimeHome) -> Result<String, ServerError> {
    let path = token_path(home);
    let cannot = |action: &str, e: std::io::Error| {
        ServerError::Io(std::io::Error::new(
            e.kind(),
            format!("cannot {action} {}: {e}", path.display()),
        ))
    };
    if let Some(token) = read(&path).map_err(|e| cannot("read", e))? {
        return Ok(token);
    }
    create_private_dir(home.dir()).map_err(|e| cannot("create the folder of", e))?;
    let token = generate();
    let temp = home.dir().join(format!(
        ".{TOKEN_FILE}.{}.{:016x}.tmp",
        std::process::id(),
        rand::random::<u64>()
    ));
    let written = write_private(&temp, token.as_bytes()).and_then(|()| {
        // An empty file left by an earlier failure is replaced; a real token is never.
        if read(&path)?.is_none() {
            let _ = std::fs::remove_file(&path);
        }
        std::fs::hard_link(&temp, &path)
    });
    let _ = std::fs::remove_file(&temp);
    match written {
        Ok(()) => Ok(token),
        // Another daemon of this home created it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read(&path)
            .map_err(|e| cannot("read", e))?
            .ok_or_else(|| cannot("read", std::io::Error::other("the file is empty"))),
        Err(e) => Err(cannot("write", e)),
    }
}

/// 32 random bytes as 64 hex digits: URL-safe, so it fits the login URL as it is.
fn generate() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.write_all(b"\n")?;
    file.sync_all()
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        builder.mode(0o700);
    }
    builder.create(dir)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn srv_token_is_created_once_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let home = RuntimeHome::at(dir.path().join("home"));
        assert_eq!(client_token(&home, None), None, "a client never creates it");
        let first = daemon_token(&home, None).unwrap();
        assert_eq!(first.len(), 64);
        assert!(first.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(daemon_token(&home, None).unwrap(), first);
        assert_eq!(client_token(&home, None).as_deref(), Some(first.as_str()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(token_path(&home))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // No temporary file is left beside it.
        let names: Vec<_> = std::fs::read_dir(home.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from(TOKEN_FILE)]);
    }

    #[test]
    fn srv_env_token_wins_for_daemon_and_client() {
        let dir = tempfile::tempdir().unwrap();
        let home = RuntimeHome::at(dir.path().join("home"));
        assert_eq!(daemon_token(&home, Some("mine".into())).unwrap(), "mine");
        assert!(!token_path(&home).exists(), "the env token writes nothing");
        assert_eq!(
            client_token(&home, Some("mine".into())).as_deref(),
            Some("mine")
        );
        // An empty variable counts as unset.
        let generated = daemon_token(&home, Some(String::new())).unwrap();
        assert_ne!(generated, "");
    }

    #[test]
    fn srv_an_empty_token_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let home = RuntimeHome::at(dir.path());
        std::fs::write(token_path(&home), "\n").unwrap();
        let token = daemon_token(&home, None).unwrap();
        assert_eq!(token.len(), 64);
        assert_eq!(client_token(&home, None), Some(token));
    }
}
