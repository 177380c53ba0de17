//! Running one command in a target: the command line of each target (bubblewrap for
//! `isolated` and `shared`, `podman exec` for a registered container, `/bin/sh` for the host),
//! the resource limits every one of them runs under, and the bounded run itself: a wall-time
//! deadline after which the whole process group is killed, and capped output.
//!
//! The sandbox (`isolated`, `shared`): new pid, ipc, uts, net and cgroup namespaces, so no
//! network at all (the sandbox's traffic cannot be routed through the
//! egress policy, so it gets none); read-only `/usr` and the `/etc` files programs need; its
//! own `/proc`, `/dev` and `/tmp`; the workspace is the only host directory it sees, and
//! nothing of `$ADF_HOME` but that. Run by an ordinary user, bwrap adds a user namespace
//! and the process-count limit counts the sandbox's own processes. Run by root, bwrap builds
//! the sandbox without a user namespace (it must bind a workspace under the 0700 runtime home)
//! and `setpriv` inside it switches to the unprivileged [`SANDBOX_UID`], dropping every
//! capability and leaving `no_new_privs` set, because root is exempt from the process-count
//! limit; that limit is then shared by every sandbox running at once. The limits are rlimits
//! set with `prlimit` (CPU time, address space, processes, file size, open files, no core dumps). On its deadline the
//! run kills its process group, and `--die-with-parent` with the pid namespace takes every
//! process of the sandbox with it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncReadExt as _;

use crate::error::ComputeError;
use crate::status::find_program;

/// The wall time of a call that gives no `timeout_ms`.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// The longest `timeout_ms` a call may ask for.
pub const MAX_TIMEOUT_MS: u64 = 600_000;
/// Bytes kept of each of stdout and stderr; the rest is read and dropped.
pub const OUTPUT_CAP_BYTES: usize = 256 * 1024;
/// The address-space limit of a sandboxed process.
pub const MEMORY_BYTES: u64 = 2 * 1024 * 1024 * 1024;
/// The process-count limit of a sandbox (per user namespace).
pub const MAX_PROCESSES: u64 = 128;
/// The largest file a sandboxed process may write.
pub const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;
/// The open-file limit of a sandboxed process.
pub const MAX_OPEN_FILES: u64 = 1024;
/// The unprivileged user a sandbox runs as when the runtime is root (`nobody`).
pub const SANDBOX_UID: u32 = 65534;
/// How long the output readers wait after the process is gone (a descendant that escaped its
/// process group may hold a pipe open).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// The limits of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall time before the process group is killed.
    pub timeout: Duration,
    /// Bytes kept per output stream.
    pub output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
            output_bytes: OUTPUT_CAP_BYTES,
        }
    }
}

impl Limits {
    /// The limits as `adf runtime` shows them.
    pub fn describe(&self) -> Value {
        json!({
            "defaultTimeoutMs": DEFAULT_TIMEOUT_MS,
            "maxTimeoutMs": MAX_TIMEOUT_MS,
            "outputBytes": self.output_bytes,
            "memoryBytes": MEMORY_BYTES,
            "processes": MAX_PROCESSES,
            "fileBytes": MAX_FILE_BYTES,
        })
    }

    fn rlimits(&self) -> Vec<OsString> {
        let cpu = self.timeout.as_secs() + 1;
        [
            format!("--cpu={cpu}"),
            format!("--as={MEMORY_BYTES}"),
            format!("--nproc={MAX_PROCESSES}"),
            format!("--fsize={MAX_FILE_BYTES}"),
            format!("--nofile={MAX_OPEN_FILES}"),
            "--core=0".to_owned(),
        ]
        .map(OsString::from)
        .into()
    }
}

/// What a run ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutput {
    /// Standard output, lossily UTF-8, at most [`Limits::output_bytes`].
    pub stdout: String,
    /// Standard error, likewise.
    pub stderr: String,
    /// The exit code; 128 + the signal for a killed process, 124 on the deadline.
    pub exit_code: i32,
    /// The deadline passed and the process group was killed.
    pub timed_out: bool,
    /// Some output was dropped.
    pub truncated: bool,
}

impl RunOutput {
    /// The `compute_exec` result.
    pub fn to_value(&self, target: &str) -> Value {
        let mut value = json!({
            "stdout": self.stdout,
            "stderr": self.stderr,
            "exit_code": self.exit_code,
            "target": target,
        });
        if self.timed_out {
            value["timed_out"] = Value::Bool(true);
        }
        if self.truncated {
            value["truncated"] = Value::Bool(true);
        }
        value
    }
}

/// Whether this process runs as root (then the sandbox drops to [`SANDBOX_UID`]).
pub fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A bubblewrap sandbox's layout.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// The host directory mounted at `mount_at`.
    pub host_dir: PathBuf,
    /// Where it is mounted (`/workspace/{agentId}`, or `/workspace` for the shared target).
    pub mount_at: String,
    /// The working directory inside (`/workspace/{agentId}`).
    pub workdir: String,
    /// Extra read-only binds (host path, sandbox path): pip's wheel directory.
    pub read_only: Vec<(PathBuf, String)>,
}

/// The `/etc` entries programs in the sandbox need (the loader, alternatives, TLS roots,
/// time zone); nothing else of the host's `/etc` is visible.
const ETC_ENTRIES: [&str; 8] = [
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl",
    "ca-certificates",
    "localtime",
    "nsswitch.conf",
];

impl Sandbox {
    /// The full command line: `prlimit` limits, then `bwrap` running `/bin/sh -c command`
    /// (as root through `setpriv`, see the module docs).
    pub fn command_line(
        &self,
        command: &str,
        limits: &Limits,
    ) -> Result<Vec<OsString>, ComputeError> {
        let prlimit = program("prlimit")?;
        let bwrap = program("bwrap")?;
        let as_root = running_as_root();
        let setpriv = if as_root {
            let setpriv = program("setpriv")?;
            if !setpriv.starts_with("/usr") {
                return Err(ComputeError::NotInstalled {
                    target: "isolated".into(),
                    what: format!("setpriv must live under /usr (found {})", setpriv.display()),
                });
            }
            Some(setpriv)
        } else {
            None
        };
        let mut line: Vec<OsString> = vec![prlimit.into()];
        line.extend(limits.rlimits());
        line.push("--".into());
        line.push(bwrap.into());
        let mut arg = |items: &[&str]| line.extend(items.iter().map(OsString::from));
        if as_root {
            // Root sets the sandbox up without a user namespace (so it can bind a workspace
            // under the 0700 runtime home), keeps only what `setpriv` needs to become the
            // sandbox user, and loses those on the switch.
            arg(&[
                "--unshare-pid",
                "--unshare-net",
                "--unshare-ipc",
                "--unshare-uts",
                "--unshare-cgroup-try",
                "--cap-drop",
                "ALL",
                "--cap-add",
                "CAP_SETUID",
                "--cap-add",
                "CAP_SETGID",
            ]);
        } else {
            arg(&["--unshare-all"]);
        }
        arg(&["--die-with-parent", "--new-session"]);
        arg(&["--ro-bind", "/usr", "/usr"]);
        for top in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
            let host = format!("/{top}");
            match std::fs::symlink_metadata(&host) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(&host) {
                        let target = target.to_string_lossy().into_owned();
                        arg(&["--symlink", &target, &host]);
                    }
                }
                Ok(meta) if meta.is_dir() => arg(&["--ro-bind", &host, &host]),
                _ => {}
            }
        }
        // Directories bwrap creates as root would be 0700, closed to the sandbox user.
        arg(&["--perms", "0755", "--dir", "/etc"]);
        for entry in ETC_ENTRIES {
            let path = format!("/etc/{entry}");
            arg(&["--ro-bind-try", &path, &path]);
        }
        arg(&[
            "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp",
        ]);
        arg(&["--perms", "0755", "--dir", "/workspace"]);
        for (host, inside) in &self.read_only {
            line.extend(["--ro-bind".into(), host.into(), inside.into()]);
        }
        line.extend([
            "--bind".into(),
            self.host_dir.clone().into_os_string(),
            OsString::from(&self.mount_at),
        ]);
        let venv_bin = format!("{}/.venv/bin", self.workdir);
        let path =
            format!("{venv_bin}:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin");
        let mut arg = |items: &[&str]| line.extend(items.iter().map(OsString::from));
        arg(&["--chdir", &self.workdir, "--clearenv"]);
        arg(&["--setenv", "PATH", &path]);
        arg(&["--setenv", "HOME", &self.workdir]);
        arg(&["--setenv", "TMPDIR", "/tmp"]);
        arg(&["--setenv", "LANG", "C.UTF-8"]);
        arg(&["--"]);
        if let Some(setpriv) = setpriv {
            line.push(setpriv.into());
            line.extend(
                [
                    format!("--reuid={SANDBOX_UID}"),
                    format!("--regid={SANDBOX_UID}"),
                    "--clear-groups".to_owned(),
                    "--".to_owned(),
                ]
                .map(OsString::from),
            );
        }
        line.extend(["/bin/sh", "-c", command].map(OsString::from));
        Ok(line)
    }
}

/// The command line of the host target: `prlimit` limits, `/bin/sh -c command` in `workdir`
/// (the environment is set by [`run`]: none of the runtime's variables reach the program).
pub fn host_command_line(command: &str, limits: &Limits) -> Result<Vec<OsString>, ComputeError> {
    let mut line: Vec<OsString> = vec![program("prlimit")?.into()];
    line.extend(limits.rlimits());
    line.extend(["--", "/bin/sh", "-c", command].map(OsString::from));
    Ok(line)
}

/// The command line of a registered Podman container.
pub fn podman_command_line(container: &str, command: &str) -> Result<Vec<OsString>, ComputeError> {
    Ok(vec![
        program("podman")?.into(),
        "exec".into(),
        "-i".into(),
        container.into(),
        "/bin/sh".into(),
        "-c".into(),
        command.into(),
    ])
}

fn program(name: &str) -> Result<PathBuf, ComputeError> {
    find_program(name).ok_or_else(|| ComputeError::NotInstalled {
        target: "compute".into(),
        what: format!("the program '{name}' is not installed"),
    })
}

/// Runs `line` in its own process group with `workdir` as the working directory (the host
/// target's; a sandbox's is set by bwrap) and an environment of `PATH`, `HOME` and `LANG`
/// only, within `limits`.
pub async fn run(
    line: &[OsString],
    workdir: Option<&Path>,
    limits: &Limits,
) -> Result<RunOutput, ComputeError> {
    let Some((program, args)) = line.split_first() else {
        return Err(ComputeError::Io("empty command line".into()));
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
        )
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    if let Some(dir) = workdir {
        command.current_dir(dir).env("HOME", dir);
    }
    let mut child = command.spawn().map_err(|e| {
        ComputeError::Io(format!("cannot start {}: {e}", program.to_string_lossy()))
    })?;
    let group = child.id();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let deadline = tokio::time::Instant::now() + limits.timeout;
    let drain_until = deadline + DRAIN_GRACE;
    let wait = async {
        let waited = tokio::time::timeout_at(deadline, child.wait()).await;
        let timed_out = waited.is_err();
        // Whether it ended or ran out of time, nothing it started outlives the call.
        kill_group(group);
        let status = match waited {
            Ok(status) => status.ok(),
            Err(_) => {
                let _ = child.start_kill();
                child.wait().await.ok()
            }
        };
        (status, timed_out)
    };
    let ((status, timed_out), (out, out_cut), (err, err_cut)) = tokio::join!(
        wait,
        read_capped(stdout, limits.output_bytes, drain_until),
        read_capped(stderr, limits.output_bytes, drain_until),
    );
    let exit_code = if timed_out {
        124
    } else {
        status.map_or(-1, |status| {
            use std::os::unix::process::ExitStatusExt as _;
            status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
        })
    };
    Ok(RunOutput {
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr: String::from_utf8_lossy(&err).into_owned(),
        exit_code,
        timed_out,
        truncated: out_cut || err_cut,
    })
}

/// Kills every process of the group `leader` started (the run's own group, so never the
/// runtime's). `kill(1)` rather than a libc call keeps the crate free of `unsafe`.
fn kill_group(leader: Option<u32>) {
    let Some(pid) = leader.filter(|pid| *pid > 1) else {
        return;
    };
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Reads `stream` to its end or `until`, keeping the first `cap` bytes; true when it dropped
/// some.
async fn read_capped<R: tokio::io::AsyncRead + Unpin>(
    stream: Option<R>,
    cap: usize,
    until: tokio::time::Instant,
) -> (Vec<u8>, bool) {
    let Some(mut stream) = stream else {
        return (Vec::new(), false);
    };
    let mut kept = Vec::new();
    let mut dropped = false;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match tokio::time::timeout_at(until, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => {
                let room = cap.saturating_sub(kept.len());
                let take = n.min(room);
                kept.extend_from_slice(&buf[..take]);
                if take < n {
                    dropped = true;
                }
            }
        }
    }
    (kept, dropped)
}
