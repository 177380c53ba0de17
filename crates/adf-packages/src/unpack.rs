//! Unpacking a tarball into a fresh directory: regular files and directories only, every
//! path inside the package (`..`, absolute paths and links refused), the size budget checked
//! from each header before its bytes are written, native addons (`*.node`, `binding.gyp`)
//! refused.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use crate::install::Refusal;

/// Most entries one tarball may hold.
const MAX_ENTRIES: usize = 50_000;

/// Unpacks `gzipped` into `into` (which must not exist) and answers the unpacked bytes.
pub(crate) fn unpack(gzipped: &[u8], into: &Path, budget: u64) -> Result<u64, Refusal> {
    let io = |e: std::io::Error| Refusal::new("registry", format!("unpacking: {e}"));
    std::fs::create_dir_all(into).map_err(io)?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(gzipped));
    let mut total: u64 = 0;
    let entries = archive
        .entries()
        .map_err(|e| Refusal::new("registry", format!("not a tar.gz: {e}")))?;
    for (count, entry) in entries.enumerate() {
        if count >= MAX_ENTRIES {
            return Err(Refusal::new(
                "size_limit",
                format!("more than {MAX_ENTRIES} files in one package"),
            ));
        }
        let mut entry =
            entry.map_err(|e| Refusal::new("registry", format!("a broken tar entry: {e}")))?;
        let raw = entry
            .path()
            .map_err(|e| Refusal::new("unsafe_path", format!("an unreadable path: {e}")))?
            .into_owned();
        let relative = package_path(&raw)?;
        let kind = entry.header().entry_type();
        let Some(relative) = relative else {
            continue;
        };
        let name = relative
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name == "binding.gyp" || name.ends_with(".node") {
            return Err(Refusal::new(
                "native_addon",
                format!(
                    "the package ships {} (a native addon); only pure JavaScript/WASM packages can be installed",
                    relative.display()
                ),
            ));
        }
        let target = into.join(&relative);
        if kind.is_dir() {
            std::fs::create_dir_all(&target).map_err(io)?;
            continue;
        }
        if !kind.is_file() {
            if matches!(
                kind,
                tar::EntryType::XGlobalHeader | tar::EntryType::XHeader
            ) {
                continue;
            }
            return Err(Refusal::new(
                "unsafe_path",
                format!(
                    "{} is a link or a special file; packages may hold only files and directories",
                    relative.display()
                ),
            ));
        }
        let size = entry.header().size().unwrap_or(u64::MAX);
        total = total.saturating_add(size);
        if total > budget {
            return Err(Refusal::new(
                "size_limit",
                format!(
                    "the package unpacks to more than {} MB (the limit with its dependencies)",
                    budget / (1024 * 1024)
                ),
            ));
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0).min(1 << 24));
        (&mut entry)
            .take(size)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        std::fs::write(&target, bytes).map_err(io)?;
    }
    Ok(total)
}

/// The path inside the package: the tarball's first component (`package/`) dropped; `None`
/// for that top directory itself; refused when any part could climb out.
fn package_path(raw: &Path) -> Result<Option<PathBuf>, Refusal> {
    let mut parts = Vec::new();
    for component in raw.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_owned()),
            Component::CurDir => {}
            _ => {
                return Err(Refusal::new(
                    "unsafe_path",
                    format!(
                        "the tarball holds '{}', a path outside the package",
                        raw.display()
                    ),
                ));
            }
        }
    }
    if parts.len() <= 1 {
        return Ok(None);
    }
    Ok(Some(parts[1..].iter().collect()))
}
