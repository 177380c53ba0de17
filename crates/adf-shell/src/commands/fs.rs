//! Filesystem commands over `fs_read`, `fs_write`, `fs_list` and `fs_delete`: the agent's
//! flat `adf_files`, with protection, approvals and audit decided by the pipeline.

use serde_json::{Value, json};

use crate::exec::{Abort, Io, Shell};

/// A path as the fs tools take it: `./` dropped, `..` refused (the filesystem is flat).
pub(crate) fn clean_path(path: &str) -> Result<String, String> {
    let mut path = path.trim_start_matches("./");
    while let Some(rest) = path.strip_prefix('/') {
        path = rest;
    }
    if path.is_empty() {
        return Err("empty file name".into());
    }
    if path
        .split('/')
        .any(|segment| segment == ".." || segment == ".")
    {
        return Err(format!(
            "{path}: '..' and '.' segments are not allowed: the filesystem is flat (paths like notes/a.md)"
        ));
    }
    Ok(path.to_owned())
}

/// `path: message`, with coreutils' wording for a missing file.
pub(crate) fn failure(path: &str, error: &adf_runtime::tools::ToolError) -> String {
    if error.code == adf_runtime::tools::ErrorCode::NotFound {
        format!("{path}: No such file or directory")
    } else {
        format!("{path}: {}", error.message)
    }
}

/// What a read found.
pub(crate) enum Content {
    Text(String),
    /// Not UTF-8 text: the media marker is printed instead of the bytes.
    Binary {
        mime: String,
        size: i64,
    },
}

/// Reads a file through `fs_read` (access, audit), taking the full text from the store when
/// the model's read was shortened for its context.
pub(crate) fn read(shell: &mut Shell<'_>, path: &str) -> Result<Content, String> {
    let path = clean_path(path)?;
    let record = shell
        .host
        .call("fs_read", json!({ "path": path }))
        .map_err(|e| failure(&path, &e))?;
    let size = record.get("size").and_then(Value::as_i64).unwrap_or(0);
    let mime = record
        .get("mime_type")
        .and_then(Value::as_str)
        .unwrap_or("application/octet-stream")
        .to_owned();
    if let Some(text) = record.get("content").and_then(Value::as_str)
        && i64::try_from(text.len()).ok() == Some(size)
    {
        return Ok(Content::Text(text.to_owned()));
    }
    let bytes = shell
        .host
        .read_bytes(&path)
        .map_err(|e| format!("{path}: {}", e.message))?
        .ok_or_else(|| format!("{path}: No such file"))?;
    let textual =
        !(mime.starts_with("image/") || mime.starts_with("audio/") || mime.starts_with("video/"));
    match String::from_utf8(bytes) {
        Ok(text) if textual => Ok(Content::Text(text)),
        _ => Ok(Content::Binary { mime, size }),
    }
}

/// Reads a file that must be text (inputs of text commands and `<`).
pub(crate) fn read_text(shell: &mut Shell<'_>, path: &str) -> Result<String, String> {
    match read(shell, path)? {
        Content::Text(text) => Ok(text),
        Content::Binary { mime, size } => Err(format!(
            "{path}: binary file ({mime}, {size} bytes); text commands read text files only"
        )),
    }
}

/// Writes (or appends to) a file through `fs_write`.
pub(crate) fn write_file(
    shell: &mut Shell<'_>,
    path: &str,
    content: &str,
    append: bool,
) -> Result<(), String> {
    let path = clean_path(path)?;
    let mode = if append { "append" } else { "write" };
    shell
        .host
        .call(
            "fs_write",
            json!({ "mode": mode, "path": path, "content": content }),
        )
        .map(|_| ())
        .map_err(|e| format!("{path}: {}", e.message))
}

/// The text of each named file, or stdin when none is named; `-` is stdin.
pub(crate) fn inputs(
    shell: &mut Shell<'_>,
    name: &str,
    files: &[String],
    io: &mut Io,
) -> (Vec<(String, String)>, i32) {
    if files.is_empty() {
        return (vec![("-".into(), std::mem::take(&mut io.stdin))], 0);
    }
    let mut texts = Vec::new();
    let mut status = 0;
    for file in files {
        if file == "-" {
            texts.push(("-".into(), std::mem::take(&mut io.stdin)));
            continue;
        }
        match read_text(shell, file) {
            Ok(text) => texts.push((file.clone(), text)),
            Err(message) => status = io.fail(name, message),
        }
    }
    (texts, status)
}

fn list(shell: &mut Shell<'_>, prefix: &str) -> Result<Vec<Value>, String> {
    shell
        .host
        .call("fs_list", json!({ "prefix": prefix }))
        .map_err(|e| e.message)
        .map(|v| v.as_array().cloned().unwrap_or_default())
}

fn field<'v>(entry: &'v Value, name: &str) -> &'v str {
    entry.get(name).and_then(Value::as_str).unwrap_or("")
}

pub(crate) fn cat(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let mut number = false;
    let mut files = Vec::new();
    for arg in args {
        match arg.as_str() {
            "-n" => number = true,
            _ => files.push(arg.clone()),
        }
    }
    let mut status = 0;
    let mut text = String::new();
    if files.is_empty() {
        text = std::mem::take(&mut io.stdin);
    }
    for file in &files {
        if file == "-" {
            text.push_str(&std::mem::take(&mut io.stdin));
            continue;
        }
        match read(shell, file) {
            Ok(Content::Text(t)) => text.push_str(&t),
            Ok(Content::Binary { mime, size }) => {
                // Base64 never reaches stdout: a marker and the manifest instead.
                text.push_str(&format!("[media: {file} ({mime}, {size} bytes)]\n"));
                let manifest =
                    json!({ "media": [{ "path": file, "mime_type": mime, "size": size }] });
                text.push_str(&format!("{manifest}\n"));
            }
            Err(message) => status = io.fail("cat", message),
        }
    }
    if number {
        for (index, line) in text.split_inclusive('\n').enumerate() {
            io.out.push_str(&format!("{:>6}\t{line}", index + 1));
        }
    } else {
        io.out.push_str(&text);
    }
    Ok(status)
}

pub(crate) fn ls(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let long = args.iter().any(|a| a.starts_with('-') && a.contains('l'));
    let prefixes: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let prefixes: Vec<String> = if prefixes.is_empty() {
        vec![String::new()]
    } else {
        prefixes
            .iter()
            .map(|p| {
                p.trim_start_matches("./")
                    .trim_start_matches('/')
                    .to_owned()
            })
            .collect()
    };
    let mut status = 0;
    for prefix in prefixes {
        let prefix = if prefix == "." { String::new() } else { prefix };
        let entries = match list(shell, &prefix) {
            Ok(entries) => entries,
            Err(message) => return Ok(io.fail("ls", message)),
        };
        if entries.is_empty() && !prefix.is_empty() {
            status = io.fail("ls", format!("cannot access '{prefix}': No such file"));
            continue;
        }
        for entry in entries {
            let path = field(&entry, "path");
            if long {
                let size = entry.get("size").and_then(Value::as_i64).unwrap_or(0);
                let protection = field(&entry, "protection");
                let updated = entry.get("updated_at").map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                });
                io.out.push_str(&format!(
                    "{:<10} {:>9} {} {path}\n",
                    if protection.is_empty() {
                        "none"
                    } else {
                        protection
                    },
                    size,
                    updated.unwrap_or_default()
                ));
            } else {
                io.out.push_str(path);
                io.out.push('\n');
            }
        }
    }
    Ok(status)
}

pub(crate) fn rm(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let force = args.iter().any(|a| a.starts_with('-') && a.contains('f'));
    let mut status = 0;
    let files: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    if files.is_empty() && !force {
        return Ok(io.fail("rm", "missing operand"));
    }
    for file in files {
        let path = match clean_path(file) {
            Ok(path) => path,
            Err(message) => {
                status = io.fail("rm", message);
                continue;
            }
        };
        if let Err(error) = shell.host.call("fs_delete", json!({ "path": path })) {
            if force && error.code == adf_runtime::tools::ErrorCode::NotFound {
                continue;
            }
            status = io.fail(
                "rm",
                format!("cannot remove {}", failure(&format!("'{path}'"), &error)),
            );
        }
    }
    Ok(status)
}

fn copy(
    shell: &mut Shell<'_>,
    name: &str,
    args: &[String],
    io: &mut Io,
    remove: bool,
) -> Result<i32, Abort> {
    let operands: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let [source, dest] = operands.as_slice() else {
        return Ok(io.fail(name, "usage: SRC DEST"));
    };
    let source_path = match clean_path(source) {
        Ok(p) => p,
        Err(m) => return Ok(io.fail(name, m)),
    };
    let mut dest_path = match clean_path(dest) {
        Ok(p) => p,
        Err(m) => return Ok(io.fail(name, m)),
    };
    if dest_path.ends_with('/') {
        let base = source_path.rsplit('/').next().unwrap_or(&source_path);
        dest_path.push_str(base);
    }
    let record = match shell.host.call("fs_read", json!({ "path": source_path })) {
        Ok(record) => record,
        Err(e) => return Ok(io.fail(name, format!("{source_path}: {}", e.message))),
    };
    let mime = record
        .get("mime_type")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let bytes = match shell.host.read_bytes(&source_path) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(io.fail(name, format!("{source_path}: No such file"))),
        Err(e) => return Ok(io.fail(name, e.message)),
    };
    let args = match String::from_utf8(bytes) {
        Ok(text) => json!({ "mode": "write", "path": dest_path, "content": text }),
        Err(error) => {
            use base64::Engine as _;
            let encoded = base64::engine::general_purpose::STANDARD.encode(error.into_bytes());
            let mut args = json!({ "mode": "write", "path": dest_path, "content": encoded, "encoding": "base64" });
            if let Some(mime) = mime {
                args["mime_type"] = Value::String(mime);
            }
            args
        }
    };
    if let Err(e) = shell.host.call("fs_write", args) {
        return Ok(io.fail(name, format!("{dest_path}: {}", e.message)));
    }
    if remove && let Err(e) = shell.host.call("fs_delete", json!({ "path": source_path })) {
        return Ok(io.fail(
            name,
            format!("cannot remove '{source_path}': {}", e.message),
        ));
    }
    Ok(0)
}

pub(crate) fn cp(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    copy(shell, "cp", args, io, false)
}

pub(crate) fn mv(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    copy(shell, "mv", args, io, true)
}

pub(crate) fn touch(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let mut status = 0;
    for file in args.iter().filter(|a| !a.starts_with('-')) {
        if let Err(message) = write_file(shell, file, "", true) {
            status = io.fail("touch", message);
        }
    }
    Ok(status)
}

pub(crate) fn find(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let mut prefix = String::new();
    let mut pattern: Option<regex::Regex> = None;
    let mut index = 0;
    while index < args.len() {
        let arg = &args[index];
        match arg.as_str() {
            "-name" | "-iname" | "-path" => {
                let Some(glob) = args.get(index + 1) else {
                    return Ok(io.fail("find", format!("{arg} needs a pattern")));
                };
                match glob_regex(glob, arg == "-iname") {
                    Ok(re) => pattern = Some(re),
                    Err(e) => return Ok(io.fail("find", e)),
                }
                index += 2;
                continue;
            }
            "-type" => {
                index += 2;
                continue;
            }
            "." | "/" | "./" => {}
            other if other.starts_with('-') => {
                return Ok(io.fail(
                    "find",
                    format!("unsupported option '{other}' (use -name, -path, -type f)"),
                ));
            }
            other => prefix = other.trim_start_matches("./").to_owned(),
        }
        index += 1;
    }
    let entries = match list(shell, &prefix) {
        Ok(entries) => entries,
        Err(message) => return Ok(io.fail("find", message)),
    };
    for entry in entries {
        let path = field(&entry, "path");
        let base = path.rsplit('/').next().unwrap_or(path);
        if pattern
            .as_ref()
            .is_none_or(|re| re.is_match(base) || re.is_match(path))
        {
            io.out.push_str(path);
            io.out.push('\n');
        }
    }
    Ok(0)
}

/// A shell pattern (`*`, `?`, `[…]`) as an anchored regex.
pub(crate) fn glob_regex(glob: &str, case_insensitive: bool) -> Result<regex::Regex, String> {
    let mut re = String::from(if case_insensitive { "(?i)^" } else { "^" });
    for c in glob.chars() {
        match c {
            '*' => re.push_str(".*"),
            '?' => re.push('.'),
            '[' | ']' => re.push(c),
            c => re.push_str(&regex::escape(&c.to_string())),
        }
    }
    re.push('$');
    regex::Regex::new(&re).map_err(|e| format!("bad pattern '{glob}': {e}"))
}

pub(crate) fn du(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let human = args.iter().any(|a| a == "-h");
    let files: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let entries = match list(shell, "") {
        Ok(entries) => entries,
        Err(message) => return Ok(io.fail("du", message)),
    };
    let show = |size: i64| {
        if !human {
            return size.to_string();
        }
        let units = ["B", "K", "M", "G"];
        let mut value = size as f64;
        let mut unit = 0;
        while value >= 1024.0 && unit < units.len() - 1 {
            value /= 1024.0;
            unit += 1;
        }
        if unit == 0 {
            format!("{size}")
        } else {
            format!("{value:.1}{}", units[unit])
        }
    };
    let mut status = 0;
    let mut total = 0;
    for entry in &entries {
        let path = field(entry, "path");
        let size = entry.get("size").and_then(Value::as_i64).unwrap_or(0);
        if files.is_empty() || files.iter().any(|f| f.trim_start_matches("./") == path) {
            total += size;
            io.out.push_str(&format!("{}\t{path}\n", show(size)));
        }
    }
    for file in &files {
        let file = file.trim_start_matches("./");
        if !entries.iter().any(|e| field(e, "path") == file) {
            status = io.fail("du", format!("cannot access '{file}': No such file"));
        }
    }
    if files.is_empty() {
        io.out.push_str(&format!("{}\ttotal\n", show(total)));
    }
    Ok(status)
}

/// `chmod LEVEL FILE…`: the shell's callers (the model, agent code) may not change a file's
/// protection (spec: owner and authorized code only), so after checking its arguments it
/// refuses, saying where protection is set: `fs_write`'s `protection` on a new file (in the
/// shell, `chmod` has no creating form), the owner, or authorized code.
pub(crate) fn chmod(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let [level, files @ ..] = args else {
        return Ok(io.fail("chmod", "usage: chmod none|read_only|no_delete FILE…"));
    };
    if !matches!(level.as_str(), "none" | "read_only" | "no_delete") || files.is_empty() {
        return Ok(io.fail(
            "chmod",
            "usage: chmod none|read_only|no_delete FILE… (numeric modes do not apply: files carry a protection level)",
        ));
    }
    let _ = shell;
    for file in files {
        io.fail(
            "chmod",
            format!(
                "changing the protection of '{file}': not permitted (a file's protection is set when it is created, with fs_write's protection, and changed only by the owner or authorized code)"
            ),
        );
    }
    Ok(1)
}
