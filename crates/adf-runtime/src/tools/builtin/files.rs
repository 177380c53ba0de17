//! Built-in tools: the virtual filesystem (`fs_read`, `fs_write`, `fs_list`, `fs_delete`;
//! tools guide "Filesystem Tools", missing-tables §10.2, spec §4.1–§4.3).
//!
//! Protection decisions are the store's (`AdfFile::file_write` / `file_delete` for
//! `cx.store_caller()`); these tools shape arguments and results around them:
//!
//! - A refused write or delete keeps its [`ProtectionHit`](crate::tools::ProtectionHit), so a
//!   model call turns into a one-time owner approval in the pipeline, while code gets the error.
//! - A write that lifted a protection says so in its result with the `⚠ protection override`
//!   marker: authorized code (the store logged the bypass) or an owner-approved override.
//! - Per-path serialization (tools guide: "serialized per (workspace, path)") needs no lock
//!   here: an agent file has one writer connection, and the pipeline runs each call inside one
//!   transaction, so every read-modify-write (`append`, `edit`) sees the previous call's result.
//!
//! `fs_read` gives code the full record always. For the model it applies the two context
//! guards of the tools guide: tokens are estimated as characters / 4 (a provider-independent
//! approximation, deliberately conservative for English text); content over
//! `limits.max_file_read_tokens` is cut with a footer naming the full size, and a whole-file
//! read of more than 300 lines (within the token limit) shows the first 50 lines with a size
//! summary. An explicit `start_line`/`end_line` range is exempt from the 300-line preview — the
//! model asked for exactly those lines — but not from the token limit. Binary content reaches
//! code as base64 and the model as `content: null` (metadata only).

use std::sync::Arc;

use adf_store::{FileEntry, FileProtection, FileWrite, WriteOutcome};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::tools::{ErrorCode, Tool, ToolContext, ToolError};

/// The tools of this family.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(FsRead),
        Arc::new(FsWrite),
        Arc::new(FsList),
        Arc::new(FsDelete),
    ]
}

/// `limits.max_file_read_tokens` when the config leaves it out (§5.7).
pub const DEFAULT_MAX_FILE_READ_TOKENS: u64 = 30_000;
/// `limits.max_file_write_bytes` when the config leaves it out (§5.7).
pub const DEFAULT_MAX_FILE_WRITE_BYTES: u64 = 5_000_000;
/// Whole-file model reads longer than this many lines get the preview.
pub const PREVIEW_LINE_THRESHOLD: usize = 300;
/// Lines shown by the preview.
pub const PREVIEW_LINES: usize = 50;
/// Core documents exempt from the write-size cap (\[C28\]).
const SIZE_CAP_EXEMPT: [&str; 3] = ["README.md", "document.md", "mind.md"];

/// The token estimate used for the model-side guards: characters / 4, rounded up.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

const BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Whether stored bytes are text to hand out as a string: valid UTF-8 under a textual (or
/// unknown) MIME type. A declared binary type keeps bytes binary even when they happen to
/// decode as UTF-8, so a base64 round trip returns what was written.
fn is_text(mime: Option<&str>, content: &[u8]) -> bool {
    let textual = match mime {
        None => true,
        Some(mime) => {
            let mime = mime
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            mime.starts_with("text/")
                || mime.ends_with("+json")
                || mime.ends_with("+xml")
                || matches!(
                    mime.as_str(),
                    "application/json"
                        | "application/javascript"
                        | "application/x-javascript"
                        | "application/typescript"
                        | "application/yaml"
                        | "application/x-yaml"
                        | "application/toml"
                        | "application/xml"
                        | "application/x-sh"
                        | "application/sql"
                        | "application/x-ndjson"
                )
        }
    };
    textual && std::str::from_utf8(content).is_ok()
}

fn file_not_found(path: &str) -> ToolError {
    ToolError::not_found(format!("File not found: \"{path}\""))
}

/// Rewords a store refusal in the tools' voice, keeping the protection hit that lets the
/// pipeline offer the owner a one-time override.
fn refusal(error: adf_store::StoreError, verb: &str, path: &str) -> ToolError {
    let mut error = ToolError::from(error);
    if let Some(hit) = &error.protection {
        error.message = format!(
            "Cannot {verb} \"{path}\": file is {}.",
            hit.level_described()
        );
    }
    error
}

/// The `⚠ protection override` marker for a write that lifted a protection, or `""`.
fn override_marker(
    cx: &ToolContext<'_>,
    outcome: &WriteOutcome,
    level_before: Option<FileProtection>,
) -> String {
    if let Some(level) = &outcome.bypassed {
        return format!(" (⚠ protection override: {level}, authorized code)");
    }
    match level_before {
        Some(level) if cx.protection_override && level != FileProtection::None => {
            format!(" (⚠ protection override: {level}, owner-approved)")
        }
        _ => String::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// fs_read

struct FsRead;

#[derive(Debug, Deserialize)]
struct ReadArgs {
    path: String,
    start_line: Option<usize>,
    end_line: Option<usize>,
}

impl Tool for FsRead {
    declare_tool! {
        name: "fs_read",
        description: "Read a file from the virtual filesystem. Returns the file record {path, content, mime_type, size, protection, created_at, updated_at}. Use start_line/end_line (1-based, inclusive) for large text files. Binary files return metadata only here; use code execution to process them.",
        parameters: json!({
            "type": "object",
            "properties": {
                "path": { "type": "string", "minLength": 1, "description": "File path, e.g. README.md or data/x.csv." },
                "start_line": { "type": "integer", "minimum": 1, "description": "First line to return (1-based). Text files only." },
                "end_line": { "type": "integer", "minimum": 1, "description": "Last line to return (inclusive). Text files only." }
            },
            "required": ["path"],
            "additionalProperties": false
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let args: ReadArgs =
            serde_json::from_value(args).map_err(|e| ToolError::invalid(e.to_string()))?;
        if let (Some(start), Some(end)) = (args.start_line, args.end_line)
            && end < start
        {
            return Err(ToolError::invalid(format!(
                "end_line ({end}) is before start_line ({start})"
            )));
        }
        let entry = cx
            .file
            .file_read(&args.path)?
            .ok_or_else(|| file_not_found(&args.path))?;
        let FileEntry { info, content } = entry;
        let ranged = args.start_line.is_some() || args.end_line.is_some();
        let text = if is_text(info.mime_type.as_deref(), &content) {
            std::str::from_utf8(&content).ok().map(str::to_owned)
        } else {
            None
        };
        let content_value = match text {
            Some(text) => {
                let selected = if ranged {
                    select_lines(&text, args.start_line, args.end_line, &info.path)?
                } else {
                    text
                };
                let shown = if cx.caller.is_model() {
                    let limit = cx.limit("max_file_read_tokens", DEFAULT_MAX_FILE_READ_TOKENS);
                    guard_for_model(selected, limit, ranged, info.size)
                } else {
                    selected
                };
                Value::String(shown)
            }
            None if ranged => {
                return Err(ToolError::invalid(format!(
                    "\"{}\" is a binary file ({}); start_line/end_line apply to text files",
                    info.path,
                    info.mime_type.as_deref().unwrap_or("unknown type")
                )));
            }
            // The model gets metadata only: base64 would flood its context with noise.
            None if cx.caller.is_model() => Value::Null,
            None => Value::String(BASE64.encode(&content)),
        };
        Ok(json!({
            "path": info.path,
            "content": content_value,
            "mime_type": info.mime_type,
            "size": info.size,
            "protection": info.protection,
            "created_at": info.created_at,
            "updated_at": info.updated_at,
        }))
    }
}

/// Lines `start..=end` (1-based) of `text`, each with its line terminator.
fn select_lines(
    text: &str,
    start: Option<usize>,
    end: Option<usize>,
    path: &str,
) -> Result<String, ToolError> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let start = start.unwrap_or(1);
    if start > lines.len().max(1) {
        return Err(ToolError::invalid(format!(
            "start_line {start} is past the end of \"{path}\" ({} lines)",
            lines.len()
        )));
    }
    let end = end.unwrap_or(lines.len()).min(lines.len());
    Ok(lines
        .get(start.saturating_sub(1)..end)
        .map(|selected| selected.concat())
        .unwrap_or_default())
}

/// The tools guide's two model-side guards (see the module docs).
fn guard_for_model(text: String, max_tokens: u64, ranged: bool, file_size: i64) -> String {
    let tokens = estimate_tokens(&text);
    let line_count = text.split_inclusive('\n').count();
    if tokens > max_tokens {
        let keep_chars = usize::try_from(max_tokens.saturating_mul(4)).unwrap_or(usize::MAX);
        let total_chars = text.chars().count();
        let kept: String = text.chars().take(keep_chars).collect();
        return format!(
            "{kept}\n\n[Truncated: showing the first {keep_chars} of {total_chars} characters (~{max_tokens} of ~{tokens} tokens, limits.max_file_read_tokens). The file is {file_size} bytes; read the rest with start_line/end_line.]"
        );
    }
    if !ranged && line_count > PREVIEW_LINE_THRESHOLD {
        let head: String = text.split_inclusive('\n').take(PREVIEW_LINES).collect();
        return format!(
            "{head}\n[Large file preview: showing lines 1-{PREVIEW_LINES} of {line_count} ({file_size} bytes, ~{tokens} tokens). Read more with start_line/end_line.]"
        );
    }
    text
}

// ---------------------------------------------------------------------------------------------
// fs_write

struct FsWrite;

#[derive(Debug, Deserialize)]
struct Edit {
    old_text: String,
    new_text: String,
    #[serde(default)]
    replace_all: bool,
}

#[derive(Debug, Deserialize)]
struct WriteArgs {
    mode: String,
    path: String,
    content: Option<String>,
    old_text: Option<String>,
    new_text: Option<String>,
    replace_all: Option<bool>,
    edits: Option<Vec<Edit>>,
    protection: Option<String>,
    encoding: Option<String>,
    mime_type: Option<String>,
}

impl Tool for FsWrite {
    declare_tool! {
        name: "fs_write",
        description: "Write, edit or append to a file. mode=\"write\" + content creates or overwrites; mode=\"append\" + content adds to the end (creating the file if absent); mode=\"edit\" + old_text/new_text replaces a unique match (replace_all for every match), or edits=[{old_text,new_text,replace_all?}] applies a batch in order, atomically. protection applies to new files only; encoding=\"base64\" (+ mime_type) writes binary.",
        parameters: {
            let edit = json!({
                "type": "object",
                "properties": {
                    "old_text": { "type": "string", "minLength": 1 },
                    "new_text": { "type": "string" },
                    "replace_all": { "type": "boolean" }
                },
                "required": ["old_text", "new_text"],
                "additionalProperties": false
            });
            json!({
                "type": "object",
                "properties": {
                    "mode": { "type": "string", "enum": ["write", "edit", "append"], "description": "write: create/overwrite; edit: find and replace; append: add to the end." },
                    "path": { "type": "string", "minLength": 1, "description": "File path, e.g. notes/today.md." },
                    "content": { "type": "string", "description": "write/append: the content (base64 when encoding is base64)." },
                    "old_text": { "type": "string", "minLength": 1, "description": "edit: exact text to find; must match once unless replace_all." },
                    "new_text": { "type": "string", "description": "edit: replacement text (\"\" deletes)." },
                    "replace_all": { "type": "boolean", "description": "edit: replace every occurrence." },
                    "edits": { "type": "array", "items": edit, "description": "edit: a batch of replacements applied in order; if any fails, nothing changes." },
                    "protection": { "type": "string", "enum": ["read_only", "no_delete", "none"], "description": "Protection of a newly created file; ignored for existing files." },
                    "encoding": { "type": "string", "enum": ["utf8", "base64"], "description": "write/append: base64 for binary content." },
                    "mime_type": { "type": "string", "description": "MIME type, e.g. image/png." }
                },
                "required": ["mode", "path"],
                "additionalProperties": false
            })
        },
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let args: WriteArgs =
            serde_json::from_value(args).map_err(|e| ToolError::invalid(e.to_string()))?;
        check_mode_arguments(&args)?;
        let path = cx.file.resolve_path(&args.path)?;
        if path == adf_store::skills::REGISTRY_PATH {
            // No approval can lift this: the indexer owns the file.
            return Err(ToolError::new(
                ErrorCode::WriteError,
                format!("Cannot write to \"{path}\": the runtime generates it from skills/."),
            ));
        }
        let existing = cx.file.file_read(&path)?;
        let level_before = existing.as_ref().map(|e| e.info.protection);
        let protection = args
            .protection
            .as_deref()
            .map(FileProtection::parse)
            .transpose()?;

        let (bytes, summary) = match args.mode.as_str() {
            "write" => {
                let bytes = decode_content(&args)?;
                let binary = args.encoding.as_deref() == Some("base64");
                let summary = if binary {
                    format!("Wrote {path} ({} bytes, binary).", bytes.len())
                } else {
                    format!("Wrote {path} ({} bytes).", bytes.len())
                };
                (bytes, summary)
            }
            "append" => {
                let addition = decode_content(&args)?;
                let mut bytes = existing
                    .as_ref()
                    .map(|e| e.content.clone())
                    .unwrap_or_default();
                bytes.extend_from_slice(&addition);
                let summary = format!(
                    "Appended {} bytes to {path} (now {} bytes).",
                    addition.len(),
                    bytes.len()
                );
                (bytes, summary)
            }
            _ => {
                let entry = existing.as_ref().ok_or_else(|| {
                    ToolError::not_found(format!(
                        "File not found: \"{path}\". Use mode=\"write\" with content to create it."
                    ))
                })?;
                let original = std::str::from_utf8(&entry.content).map_err(|_| {
                    ToolError::invalid(format!("\"{path}\" is a binary file; edit works on text"))
                })?;
                let edits = edit_list(&args);
                let (edited, replacements) = apply_edits(original, &edits, &path)?;
                let summary = if edits.len() > 1 {
                    format!(
                        "Edited {path}: applied {} edits, {replacements} replacement(s).",
                        edits.len()
                    )
                } else {
                    format!("Edited {path} ({replacements} replacement(s)).")
                };
                (edited.into_bytes(), summary)
            }
        };

        check_size(cx, &args.path, &path, bytes.len())?;
        let mime_type = args.mime_type.clone().or_else(|| {
            // A text file under an extension the store does not know is still text, so a
            // later fs_read hands it back as a string rather than base64.
            (existing.is_none()
                && args.encoding.as_deref() != Some("base64")
                && adf_store::mime::guess_mime(&path) == "application/octet-stream")
                .then(|| "text/plain".to_owned())
        });
        let options = FileWrite {
            mime_type,
            protection_if_new: protection,
        };
        let outcome = cx
            .file
            .file_write(cx.store_caller(), &path, &bytes, &options)
            .map_err(|e| refusal(e, "write to", &path))?;

        let mut message = summary;
        if let (Some(requested), Some(level)) = (protection, level_before)
            && requested != level
        {
            message.push_str(&format!(
                " Protection stays {level}: the protection parameter applies only to new files."
            ));
        }
        // Only read_only stops a write; a no_delete file was never overridden.
        let blocking = level_before.filter(|level| *level == FileProtection::ReadOnly);
        let marker = override_marker(cx, &outcome, blocking);
        if !marker.is_empty() {
            let trimmed = message.trim_end_matches('.').to_owned();
            message = format!("{trimmed}{marker}.");
        }
        Ok(Value::String(message))
    }
}

/// Refuses parameters that do not belong to the chosen mode, so a mistaken call fails clearly
/// instead of half-applying.
fn check_mode_arguments(args: &WriteArgs) -> Result<(), ToolError> {
    let edit_params = args.old_text.is_some()
        || args.new_text.is_some()
        || args.replace_all.is_some()
        || args.edits.is_some();
    match args.mode.as_str() {
        "write" | "append" => {
            if args.content.is_none() {
                return Err(ToolError::invalid(format!(
                    "{} mode requires \"content\"",
                    args.mode
                )));
            }
            if edit_params {
                return Err(ToolError::invalid(format!(
                    "old_text/new_text/replace_all/edits belong to edit mode, not {}",
                    args.mode
                )));
            }
        }
        "edit" => {
            if args.content.is_some() || args.encoding.is_some() {
                return Err(ToolError::invalid(
                    "edit mode takes old_text/new_text or edits, not content/encoding",
                ));
            }
            let single = args.old_text.is_some() || args.new_text.is_some();
            if let Some(edits) = &args.edits {
                if single || args.replace_all.is_some() {
                    return Err(ToolError::invalid(
                        "give either old_text/new_text (with replace_all) or edits, not both",
                    ));
                }
                if edits.is_empty() {
                    return Err(ToolError::invalid("edits must not be empty"));
                }
            } else if !single {
                return Err(ToolError::invalid(
                    "edit mode requires old_text and new_text, or a non-empty edits array",
                ));
            } else if args.old_text.is_none() {
                return Err(ToolError::invalid("edit mode requires old_text"));
            } else if args.new_text.is_none() {
                return Err(ToolError::invalid(
                    "edit mode requires new_text (use \"\" to delete the matched text)",
                ));
            }
        }
        other => {
            return Err(ToolError::invalid(format!(
                "mode must be write, edit or append, not '{other}'"
            )));
        }
    }
    Ok(())
}

fn decode_content(args: &WriteArgs) -> Result<Vec<u8>, ToolError> {
    let content = args.content.as_deref().unwrap_or_default();
    match args.encoding.as_deref() {
        Some("base64") => BASE64
            .decode(content.trim())
            .map_err(|e| ToolError::invalid(format!("content is not valid base64: {e}"))),
        _ => Ok(content.as_bytes().to_vec()),
    }
}

fn edit_list(args: &WriteArgs) -> Vec<Edit> {
    match &args.edits {
        Some(edits) => edits
            .iter()
            .map(|e| Edit {
                old_text: e.old_text.clone(),
                new_text: e.new_text.clone(),
                replace_all: e.replace_all,
            })
            .collect(),
        None => vec![Edit {
            old_text: args.old_text.clone().unwrap_or_default(),
            new_text: args.new_text.clone().unwrap_or_default(),
            replace_all: args.replace_all.unwrap_or(false),
        }],
    }
}

/// Applies `edits` in order to an in-memory copy; the first failing edit aborts the whole
/// batch before anything is written. Returns the new text and the number of replacements.
fn apply_edits(original: &str, edits: &[Edit], path: &str) -> Result<(String, usize), ToolError> {
    let batch = edits.len() > 1;
    let fail = |index: usize, why: String| {
        let label = if batch {
            format!("edits[{index}]: ")
        } else {
            String::new()
        };
        let tail = if batch {
            " Batch aborted, file unchanged."
        } else {
            ""
        };
        ToolError::new(ErrorCode::ToolError, format!("{label}{why}{tail}"))
    };
    let mut text = original.to_owned();
    let mut replacements = 0;
    for (index, edit) in edits.iter().enumerate() {
        if edit.old_text.is_empty() {
            return Err(fail(index, "old_text must not be empty.".into()));
        }
        if edit.old_text == edit.new_text {
            return Err(fail(
                index,
                "old_text and new_text are identical (no change).".into(),
            ));
        }
        let count = text.matches(edit.old_text.as_str()).count();
        if count == 0 {
            return Err(fail(
                index,
                format!("old_text not found in {path}. Use fs_read to check the current content."),
            ));
        }
        if edit.replace_all {
            text = text.replace(edit.old_text.as_str(), &edit.new_text);
            replacements += count;
        } else if count > 1 {
            return Err(fail(
                index,
                format!(
                    "old_text appears {count} times in {path}. Add surrounding context to make it unique, or set replace_all."
                ),
            ));
        } else {
            text = text.replacen(edit.old_text.as_str(), &edit.new_text, 1);
            replacements += 1;
        }
    }
    Ok((text, replacements))
}

/// The write-size cap of `limits.max_file_write_bytes`, on the size the file would have.
fn check_size(
    cx: &ToolContext<'_>,
    requested: &str,
    resolved: &str,
    size: usize,
) -> Result<(), ToolError> {
    if SIZE_CAP_EXEMPT.contains(&requested) || SIZE_CAP_EXEMPT.contains(&resolved) {
        return Ok(());
    }
    let max = cx.limit("max_file_write_bytes", DEFAULT_MAX_FILE_WRITE_BYTES);
    if size as u64 > max {
        return Err(ToolError::failed(format!(
            "Write rejected: {resolved} would be {size} bytes but limits.max_file_write_bytes is {max}."
        )));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// fs_list

struct FsList;

impl Tool for FsList {
    declare_tool! {
        name: "fs_list",
        description: "List files in the virtual filesystem with their metadata (mime_type, size, protection, authorized, timestamps). Optionally only paths starting with prefix, e.g. \"lib/\".",
        parameters: json!({
            "type": "object",
            "properties": {
                "prefix": { "type": "string", "description": "Only list paths starting with this, e.g. lib/." }
            },
            "additionalProperties": false
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let prefix = args
            .get("prefix")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let files = cx.file.file_list(prefix)?;
        serde_json::to_value(files)
            .map_err(|e| ToolError::new(ErrorCode::InternalError, e.to_string()))
    }
}

// ---------------------------------------------------------------------------------------------
// fs_delete

struct FsDelete;

impl Tool for FsDelete {
    declare_tool! {
        name: "fs_delete",
        description: "Delete a file. Files with read_only or no_delete protection cannot be deleted.",
        parameters: super::args::one_argument(
            "path",
            json!({ "type": "string", "minLength": 1, "description": "Path of the file to delete." }),
        ),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let requested = args.get("path").and_then(Value::as_str).unwrap_or_default();
        let path = cx.file.resolve_path(requested)?;
        let level_before = cx
            .file
            .file_read(&path)?
            .map(|e| e.info.protection)
            .ok_or_else(|| file_not_found(&path))?;
        let outcome = cx
            .file
            .file_delete(cx.store_caller(), &path)
            .map_err(|e| refusal(e, "delete", &path))?;
        let marker = override_marker(cx, &outcome, Some(level_before));
        Ok(Value::String(format!("Deleted {path}{marker}.")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_selection_is_one_based_and_inclusive() {
        let text = "a\nb\nc\nd";
        assert_eq!(
            select_lines(text, Some(2), Some(3), "x").ok().as_deref(),
            Some("b\nc\n")
        );
        assert_eq!(
            select_lines(text, Some(4), Some(9), "x").ok().as_deref(),
            Some("d")
        );
        assert_eq!(
            select_lines(text, None, Some(1), "x").ok().as_deref(),
            Some("a\n")
        );
        assert!(select_lines(text, Some(5), None, "x").is_err());
    }

    #[test]
    fn tokens_are_characters_over_four_rounded_up() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens("éééé"), 1, "characters, not bytes");
    }

    #[test]
    fn text_detection_follows_mime_and_utf8() {
        assert!(is_text(Some("text/markdown"), b"# hi"));
        assert!(is_text(None, b"plain"));
        assert!(is_text(Some("application/ld+json"), b"{}"));
        assert!(!is_text(Some("image/png"), b"abc"));
        assert!(!is_text(Some("text/plain"), &[0xff, 0xfe]));
    }
}
