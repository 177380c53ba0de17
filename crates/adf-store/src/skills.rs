//! The skills indexer (spec §5.1 "File-backed skills"): `skills/*/SKILL.md` into the
//! runtime-owned `skills-registry.json`.
//!
//! The spec leaves the bounds and the registry shape to the runtime (missing-tables Appendix B
//! #10). Ours: a skill lives in `skills/<dir>/SKILL.md` where `<dir>` matches
//! `^[a-z0-9][a-z0-9-]{0,63}$`; the manifest is at most [`MAX_SKILL_BYTES`] and opens with a
//! `---` front matter of `key: value` lines holding `name` (equal to `<dir>`), `description`
//! (required, at most 1024 characters) and optionally `requires` (a `[a, b]` list or a
//! comma-separated string). At most [`MAX_SKILLS`] skills are listed and the serialized registry
//! stays under [`MAX_REGISTRY_BYTES`]. The registry is
//! `{"schema":1,"skills":{"<name>":{"path","description","requires","enabled"}},"rejected":[{"path","reason"}]}`
//! with `rejected` omitted when empty and capped at [`MAX_REJECTED`] entries so that
//! diagnostics never take room from an admissible skill. Indexing never runs skill text,
//! authorizes files or enables tools; `requires` is copied as a checklist only.

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Map, Value, json};

use crate::error::Result;
use crate::protection::FileProtection;
use crate::time;

/// Path of the runtime-owned skills registry in the virtual filesystem.
pub const REGISTRY_PATH: &str = "skills-registry.json";
/// Path of the mute list, `{"schema":1,"disabled":[...]}`: skills listed there are indexed
/// but disabled.
pub const STATE_PATH: &str = "skills-state.json";
/// Largest `SKILL.md` manifest accepted, in bytes.
pub const MAX_SKILL_BYTES: usize = 64 * 1024;
/// Most skills the registry lists.
pub const MAX_SKILLS: usize = 128;
/// Largest serialized registry, in bytes.
pub const MAX_REGISTRY_BYTES: usize = 64 * 1024;
/// Most rejected manifests the registry reports.
pub const MAX_REJECTED: usize = 32;
const MAX_DESCRIPTION_CHARS: usize = 1024;

/// Rebuilds the registry from the files in `conn` and writes it when its content changed (or
/// when its protection is not `read_only`). Returns whether anything was written.
pub fn reindex(conn: &Connection) -> Result<bool> {
    let registry = build_registry(conn)?;
    let text = serde_json::to_string_pretty(&registry)
        .map_err(|e| crate::StoreError::Malformed(e.to_string()))?;
    let current: Option<(Vec<u8>, FileProtection)> = conn
        .query_row(
            "SELECT content, protection FROM adf_files WHERE path = ?1",
            [REGISTRY_PATH],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()?;
    if let Some((content, protection)) = &current
        && content.as_slice() == text.as_bytes()
        && *protection == FileProtection::ReadOnly
    {
        return Ok(false);
    }
    let now = time::now_iso();
    conn.execute(
        "INSERT INTO adf_files (path, content, mime_type, size, protection, authorized, created_at, updated_at)
         VALUES (?1, ?2, 'application/json', ?3, 'read_only', 0, ?4, ?4)
         ON CONFLICT(path) DO UPDATE SET content = excluded.content, mime_type = excluded.mime_type,
           size = excluded.size, protection = 'read_only', authorized = 0, updated_at = excluded.updated_at",
        params![REGISTRY_PATH, text.as_bytes(), text.len() as i64, now],
    )?;
    Ok(true)
}

/// What `adf_files` was at: SQLite's `data_version` (moves when another connection commits)
/// and the count of this connection's row changes of `adf_files`. Equal versions mean no
/// file, the skills catalog included, changed in between; a rolled-back change only makes
/// them differ needlessly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilesVersion(i64, u64);

impl crate::AdfFile {
    /// The current [`FilesVersion`], or `None` when this connection cannot watch its own
    /// writes (its update hook was refused): then only reading the file tells.
    pub fn files_version(&self) -> Result<Option<FilesVersion>> {
        let Some(generation) = self.config_cache.files_generation() else {
            return Ok(None);
        };
        let data_version: i64 = self
            .conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |row| row.get(0))?;
        Ok(Some(FilesVersion(data_version, generation)))
    }
}

/// Whether a write to `path` can change the registry.
pub fn affects_registry(path: &str) -> bool {
    path == STATE_PATH || (path.starts_with("skills/") && path.ends_with("/SKILL.md"))
}

struct Rejection {
    path: String,
    reason: String,
}

/// The registry the files in `conn` describe.
pub fn build_registry(conn: &Connection) -> Result<Value> {
    let mut rejected: Vec<Rejection> = Vec::new();
    let disabled = read_mute_list(conn, &mut rejected)?;

    let mut stmt = conn.prepare(
        "SELECT path, content FROM adf_files WHERE path LIKE 'skills/%/SKILL.md' ORDER BY path",
    )?;
    let manifests: Vec<(String, Vec<u8>)> = stmt
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;

    let mut skills = Map::new();
    let mut size = 64; // the registry's fixed framing
    for (path, content) in manifests {
        let Some(dir) = path
            .strip_prefix("skills/")
            .and_then(|p| p.strip_suffix("/SKILL.md"))
        else {
            continue;
        };
        let entry = match admit(dir, &content) {
            Ok(manifest) => manifest,
            Err(reason) => {
                rejected.push(Rejection { path, reason });
                continue;
            }
        };
        if skills.len() >= MAX_SKILLS {
            rejected.push(Rejection {
                path,
                reason: format!("more than {MAX_SKILLS} skills installed"),
            });
            continue;
        }
        let value = json!({
            "path": path,
            "description": entry.description,
            "requires": entry.requires,
            "enabled": !disabled.iter().any(|d| d == dir),
        });
        let entry_size = value.to_string().len() + dir.len() + 4;
        if size + entry_size > MAX_REGISTRY_BYTES {
            rejected.push(Rejection {
                path,
                reason: "registry size budget exhausted".into(),
            });
            continue;
        }
        size += entry_size;
        skills.insert(dir.to_owned(), value);
    }

    let mut registry = json!({ "schema": 1, "skills": Value::Object(skills) });
    if !rejected.is_empty() {
        let total = rejected.len();
        let mut list: Vec<Value> = rejected
            .into_iter()
            .take(MAX_REJECTED)
            .map(|r| json!({ "path": r.path, "reason": r.reason }))
            .collect();
        if total > MAX_REJECTED {
            list.push(json!({ "path": "skills/", "reason": format!("{} more rejections not listed", total - MAX_REJECTED) }));
        }
        registry["rejected"] = Value::Array(list);
    }
    Ok(registry)
}

fn read_mute_list(conn: &Connection, rejected: &mut Vec<Rejection>) -> Result<Vec<String>> {
    let content: Option<Vec<u8>> = conn
        .query_row(
            "SELECT content FROM adf_files WHERE path = ?1",
            [STATE_PATH],
            |row| row.get(0),
        )
        .optional()?;
    let Some(content) = content else {
        return Ok(Vec::new());
    };
    let parsed: Option<Vec<String>> =
        serde_json::from_slice::<Value>(&content)
            .ok()
            .and_then(|v| {
                v.get("disabled")?.as_array().map(|items| {
                    items
                        .iter()
                        .filter_map(|i| i.as_str().map(str::to_owned))
                        .collect()
                })
            });
    match parsed {
        Some(list) => Ok(list),
        None => {
            rejected.push(Rejection {
                path: STATE_PATH.into(),
                reason: "not valid JSON of the form {\"schema\":1,\"disabled\":[...]}; treated as an empty mute list".into(),
            });
            Ok(Vec::new())
        }
    }
}

struct Manifest {
    description: String,
    requires: Vec<String>,
}

fn valid_dir_name(dir: &str) -> bool {
    let bytes = dir.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

fn admit(dir: &str, content: &[u8]) -> std::result::Result<Manifest, String> {
    if !valid_dir_name(dir) {
        return Err("directory name must match ^[a-z0-9][a-z0-9-]{0,63}$".into());
    }
    if content.len() > MAX_SKILL_BYTES {
        return Err(format!(
            "SKILL.md is {} bytes; the limit is {MAX_SKILL_BYTES}",
            content.len()
        ));
    }
    let text = std::str::from_utf8(content).map_err(|_| "SKILL.md is not UTF-8 text".to_owned())?;
    let front = front_matter(text).ok_or("SKILL.md has no '---' front matter")?;
    let field = |key: &str| {
        front
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.trim().trim_matches(|c| c == '"' || c == '\'').to_owned())
    };
    let name = field("name").ok_or("front matter has no name")?;
    if name != dir {
        return Err(format!(
            "name '{name}' does not match its directory '{dir}'"
        ));
    }
    let description = field("description")
        .filter(|d| !d.is_empty())
        .ok_or("front matter has no description")?;
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(format!(
            "description is longer than {MAX_DESCRIPTION_CHARS} characters"
        ));
    }
    let requires = field("requires")
        .map(|r| {
            r.trim_start_matches('[')
                .trim_end_matches(']')
                .split(',')
                .map(|s| s.trim().trim_matches(|c| c == '"' || c == '\'').to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    Ok(Manifest {
        description,
        requires,
    })
}

fn front_matter(text: &str) -> Option<Vec<(&str, &str)>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines();
    if lines.next()?.trim_end() != "---" {
        return None;
    }
    let mut fields = Vec::new();
    for line in lines {
        if line.trim_end() == "---" {
            return Some(fields);
        }
        if let Some((key, value)) = line.split_once(':') {
            fields.push((key.trim(), value));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_a_well_formed_skill() {
        let m = admit("pdf-tools", b"---\nname: pdf-tools\ndescription: Work with PDFs\nrequires: [sys_code, fs_write]\n---\nbody")
            .map_err(|e| e.to_string());
        let m = match m {
            Ok(m) => m,
            Err(e) => panic!("rejected: {e}"),
        };
        assert_eq!(m.description, "Work with PDFs");
        assert_eq!(m.requires, vec!["sys_code", "fs_write"]);
    }

    #[test]
    fn rejects_name_mismatch_and_bad_dirs() {
        assert!(admit("a", b"---\nname: b\ndescription: x\n---\n").is_err());
        assert!(admit("Bad_Dir", b"---\nname: Bad_Dir\ndescription: x\n---\n").is_err());
        assert!(admit("a", b"no front matter").is_err());
        assert!(admit("a", &vec![b'x'; MAX_SKILL_BYTES + 1]).is_err());
    }
}
