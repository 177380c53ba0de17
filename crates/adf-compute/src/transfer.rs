//! `fs_transfer {from, to, path, save_as?}` (tools guide "Compute Tools"): copies one file
//! between the VFS (`adf_files`) and a compute workspace (`isolated`, `shared`, `host`), or
//! between two workspaces. It runs inside the call's transaction (local file IO only).
//!
//! The rules: every compute endpoint must be a target the agent may use now (the same
//! decision as `compute_exec`, so `host` needs both gates); a path is relative, without `.`
//! or `..`, and no component on the workspace side may be a symbolic link (a sandbox could
//! plant one pointing at a host file, and the runtime would follow it with its own rights);
//! the file may be at most `limits.max_file_write_bytes`; a VFS write goes through the store
//! as the caller, so file protection applies, and the copy is never authorized code.
//! Registered containers are not transfer endpoints (the guide's "external execution targets
//! are not file-transfer endpoints in this release").

use std::io::{Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use adf_runtime::home::RuntimeHome;
use adf_runtime::tools::builtin::files::DEFAULT_MAX_FILE_WRITE_BYTES;
use adf_runtime::tools::{Tool, ToolContext, ToolError};
use adf_store::{Caller, FileWrite};
use serde_json::{Value, json};

use crate::error::ComputeError;
use crate::exec::{hand_to_sandbox, home, workspace_dir};
use crate::target::{Target, Targets};

/// The endpoints a transfer names.
const ENDPOINTS: [&str; 4] = ["vfs", "isolated", "shared", "host"];

/// The `fs_transfer` tool of a runtime home.
#[derive(Debug, Clone)]
pub struct FsTransfer {
    pub(crate) home: Option<RuntimeHome>,
}

impl Tool for FsTransfer {
    adf_runtime::declare_tool! {
        name: "fs_transfer",
        description: "Copy a file between the VFS and a compute workspace (/workspace/{agentId}/{path} of isolated or shared; the host workspace), or between two workspaces. save_as names the destination path.",
        parameters: json!({
            "type": "object",
            "properties": {
                "from": { "type": "string", "enum": ENDPOINTS },
                "to": { "type": "string", "enum": ENDPOINTS },
                "path": { "type": "string", "description": "Relative path of the source file." },
                "save_as": { "type": "string", "description": "Relative destination path; default path." }
            },
            "required": ["from", "to", "path"]
        }),
    }

    fn check(&self, cx: &ToolContext<'_>, args: &Value) -> Result<(), ToolError> {
        let home = home(&self.home)?;
        let targets = Targets::new(cx.config, home);
        let (from, to, path, save_as) = arguments(args)?;
        endpoint(&targets, from)?;
        endpoint(&targets, to)?;
        relative(path)?;
        relative(save_as)?;
        Ok(())
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let home = home(&self.home)?;
        let targets = Targets::new(cx.config, home);
        let (from, to, path, save_as) = arguments(&args)?;
        let source = endpoint(&targets, from)?;
        let destination = endpoint(&targets, to)?;
        let limit = cx.limit("max_file_write_bytes", DEFAULT_MAX_FILE_WRITE_BYTES);
        let bytes = match &source {
            None => {
                let entry = cx
                    .file
                    .file_read(path)?
                    .ok_or_else(|| ToolError::not_found(format!("no file '{path}' in the VFS")))?;
                let size = entry.content.len() as u64;
                if size > limit {
                    return Err(ComputeError::TooLarge {
                        path: path.into(),
                        size,
                        limit,
                    }
                    .into());
                }
                entry.content
            }
            Some(target) => {
                let dir = workspace_dir(&targets, target)?;
                read_confined(&dir, path, limit)?
            }
        };
        match &destination {
            None => {
                let caller = cx.store_caller();
                cx.file
                    .file_write(caller, save_as, &bytes, &FileWrite::default())?;
                let copied = cx.file.file_read(save_as)?;
                if copied.is_some_and(|entry| entry.info.authorized) {
                    // An owner's write keeps an existing flag; a copy from a workspace is
                    // never authorized code, whoever asked for it.
                    cx.file.file_set_authorized(Caller::Owner, save_as, false)?;
                }
            }
            Some(target) => {
                let dir = workspace_dir(&targets, target)?;
                let sandboxed = matches!(target, Target::Isolated | Target::Shared);
                write_confined(&dir, save_as, &bytes, sandboxed)?;
            }
        }
        Ok(json!({
            "from": from,
            "to": to,
            "path": path,
            "saved_as": save_as,
            "size": bytes.len(),
        }))
    }
}

fn arguments(args: &Value) -> Result<(&str, &str, &str, &str), ToolError> {
    let text = |key: &str| args.get(key).and_then(Value::as_str);
    let (Some(from), Some(to), Some(path)) = (text("from"), text("to"), text("path")) else {
        return Err(ToolError::invalid("from, to and path are required"));
    };
    if from == to {
        return Err(ToolError::invalid(
            "from and to must be different endpoints",
        ));
    }
    Ok((from, to, path, text("save_as").unwrap_or(path)))
}

/// `None` for the VFS, else the compute target (which must be usable now).
fn endpoint(targets: &Targets<'_>, name: &str) -> Result<Option<Target>, ToolError> {
    if name == "vfs" {
        return Ok(None);
    }
    if !ENDPOINTS.contains(&name) {
        return Err(ToolError::invalid(format!(
            "'{name}' is not a transfer endpoint (vfs, isolated, shared, host)"
        )));
    }
    Ok(Some(targets.resolve(Some(name))?))
}

/// The segments of a relative path with no `.`, `..` or empty segment.
fn relative(path: &str) -> Result<Vec<&str>, ComputeError> {
    let bad = |why: &str| ComputeError::BadPath {
        path: path.into(),
        why: why.into(),
    };
    if path.is_empty() || path.starts_with('/') {
        return Err(bad("paths are relative to the workspace"));
    }
    if path.contains('\0') || path.contains('\\') {
        return Err(bad("it contains a NUL or a backslash"));
    }
    let segments: Vec<&str> = path.split('/').collect();
    if segments
        .iter()
        .any(|s| s.is_empty() || *s == "." || *s == "..")
    {
        return Err(bad("it has an empty, '.' or '..' segment"));
    }
    Ok(segments)
}

fn symlink_refused(path: &str) -> ComputeError {
    ComputeError::BadPath {
        path: path.into(),
        why: "it passes through a symbolic link in the workspace".into(),
    }
}

/// The parent directory of `path` under `root`, checking each component is a real directory
/// (creating the missing ones when `create`).
fn confined_parent(
    root: &Path,
    path: &str,
    create: Option<bool>,
) -> Result<(PathBuf, String), ComputeError> {
    let segments = relative(path)?;
    let Some((last, parents)) = segments.split_last() else {
        return Err(ComputeError::BadPath {
            path: path.into(),
            why: "it is empty".into(),
        });
    };
    let mut dir = root.to_path_buf();
    for segment in parents {
        dir.push(segment);
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.file_type().is_symlink() => return Err(symlink_refused(path)),
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(ComputeError::BadPath {
                    path: path.into(),
                    why: format!("'{segment}' is not a directory"),
                });
            }
            Err(_) => match create {
                Some(sandboxed) => {
                    std::fs::create_dir(&dir).map_err(|e| {
                        ComputeError::Io(format!("cannot create {}: {e}", dir.display()))
                    })?;
                    if sandboxed {
                        hand_to_sandbox(&dir)?;
                    }
                }
                None => {
                    return Err(ComputeError::BadPath {
                        path: path.into(),
                        why: "no such file in the workspace".into(),
                    });
                }
            },
        }
    }
    Ok((dir, (*last).to_owned()))
}

/// Reads `path` under `root`: a regular file, reached without a symbolic link, at most
/// `limit` bytes.
fn read_confined(root: &Path, path: &str, limit: u64) -> Result<Vec<u8>, ComputeError> {
    let (dir, name) = confined_parent(root, path, None)?;
    let full = dir.join(name);
    let missing = || ComputeError::BadPath {
        path: path.into(),
        why: "no such file in the workspace".into(),
    };
    let meta = std::fs::symlink_metadata(&full).map_err(|_| missing())?;
    if meta.file_type().is_symlink() {
        return Err(symlink_refused(path));
    }
    if !meta.is_file() {
        return Err(ComputeError::BadPath {
            path: path.into(),
            why: "not a regular file".into(),
        });
    }
    if meta.len() > limit {
        return Err(ComputeError::TooLarge {
            path: path.into(),
            size: meta.len(),
            limit,
        });
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&full)
        .map_err(|e| ComputeError::Io(format!("cannot open '{path}': {e}")))?;
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ComputeError::Io(format!("cannot read '{path}': {e}")))?;
    if bytes.len() as u64 > limit {
        return Err(ComputeError::TooLarge {
            path: path.into(),
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

/// Writes `bytes` to `path` under `root`, creating parent directories, never through a
/// symbolic link; in a sandbox workspace the new file belongs to the sandbox user.
fn write_confined(
    root: &Path,
    path: &str,
    bytes: &[u8],
    sandboxed: bool,
) -> Result<(), ComputeError> {
    let (dir, name) = confined_parent(root, path, Some(sandboxed))?;
    let full = dir.join(name);
    if std::fs::symlink_metadata(&full).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(symlink_refused(path));
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&full)
        .map_err(|e| ComputeError::Io(format!("cannot write '{path}': {e}")))?;
    file.write_all(bytes)
        .map_err(|e| ComputeError::Io(format!("cannot write '{path}': {e}")))?;
    if sandboxed {
        hand_to_sandbox(&full)?;
    }
    Ok(())
}
