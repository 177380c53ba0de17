//! What this machine offers for compute: the isolation tool, Podman, the program used to
//! drop privileges. `adf runtime` and the daemon's `GET /runtime` show [`status`].

use std::path::PathBuf;

use serde_json::{Value, json};

/// Whether a program a target needs is installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// Found at this path.
    Found(PathBuf),
    /// Missing; what to install.
    Missing(String),
}

/// The first executable file called `name` in `PATH`, then in the system directories.
pub(crate) fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/bin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// bubblewrap (`bwrap`), which the isolated and shared targets run under, and `prlimit`
/// (util-linux), which sets their resource limits.
pub fn bubblewrap() -> Availability {
    match (find_program("bwrap"), find_program("prlimit")) {
        (Some(bwrap), Some(_)) => Availability::Found(bwrap),
        (None, _) => Availability::Missing(
            "bubblewrap is not installed (install the 'bubblewrap' package, which provides bwrap)"
                .into(),
        ),
        (Some(_), None) => Availability::Missing(
            "prlimit is not installed (install the 'util-linux' package)".into(),
        ),
    }
}

/// Podman, which registered external containers run under.
pub fn podman() -> Availability {
    match find_program("podman") {
        Some(path) => Availability::Found(path),
        None => Availability::Missing(
            "podman is not installed (install the 'podman' package to use registered containers)"
                .into(),
        ),
    }
}

/// The compute section of `adf runtime` and `GET /runtime`: which isolation tool is available,
/// with the sandbox's limits and network.
pub fn status() -> Value {
    let availability = |a: Availability| match a {
        Availability::Found(path) => json!({ "available": true, "path": path }),
        Availability::Missing(what) => json!({ "available": false, "install": what }),
    };
    let bubblewrap = bubblewrap();
    let isolation = match &bubblewrap {
        Availability::Found(_) => Value::from("bubblewrap"),
        Availability::Missing(_) => Value::Null,
    };
    json!({
        "supported": true,
        "isolation": isolation,
        "bubblewrap": availability(bubblewrap),
        "podman": availability(podman()),
        "network": "off (sandboxes get no network)",
        "limits": crate::run::Limits::default().describe(),
    })
}
