//! Project chores. `cargo xtask conformance [--missing] [--json]` prints which conformance
//! checklist IDs (`../shared/spec/conformance-checklist.md`) have tests.
//!
//! A test proves an ID by carrying it in its function name: `fn sto_14_schema_matches()`,
//! several IDs in a row (`fn sto_16_sto_17_checks()`), or a range (`fn def_02_to_def_09_x()`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("conformance") => conformance(
            args.iter().any(|a| a == "--missing"),
            args.iter().any(|a| a == "--json"),
        ),
        _ => bail!("usage: cargo xtask conformance [--missing] [--json]"),
    }
}

/// The workspace root. `cargo run` sets `CARGO_MANIFEST_DIR` for the process; it is read at
/// run time first because a binary cached in a shared target dir may have been built from
/// another checkout of the same workspace.
fn repo_root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// `(section title, ids)` in checklist order.
fn checklist(path: &Path) -> Result<Vec<(String, Vec<String>)>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut sections: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            if title.contains('(') {
                sections.push((title.to_owned(), Vec::new()));
            }
        } else if let Some(rest) = line.strip_prefix("| ") {
            let id = rest.split_whitespace().next().unwrap_or_default();
            let looks_like_id = id.split_once('-').is_some_and(|(p, n)| {
                p.len() >= 2
                    && p.chars().all(|c| c.is_ascii_uppercase())
                    && n.chars().all(|c| c.is_ascii_digit())
            });
            if looks_like_id && let Some(section) = sections.last_mut() {
                section.1.push(id.to_owned());
            }
        }
    }
    Ok(sections)
}

/// IDs named by one test function name.
fn ids_in_name(name: &str, prefixes: &BTreeSet<String>) -> Vec<String> {
    let parts: Vec<&str> = name.split('_').collect();
    let mut ids = Vec::new();
    let mut i = 0;
    while i + 1 < parts.len() {
        let prefix = parts[i].to_ascii_uppercase();
        let number = parts[i + 1];
        if prefixes.contains(&prefix)
            && !number.is_empty()
            && number.chars().all(|c| c.is_ascii_digit())
        {
            let start: u32 = number.parse().unwrap_or(0);
            let width = number.len();
            // `x_02_to_x_09`: every ID in the range.
            let range_end = (i + 4 < parts.len()
                && parts[i + 2] == "to"
                && parts[i + 3].eq_ignore_ascii_case(&prefix))
            .then(|| parts[i + 4].parse::<u32>().ok())
            .flatten();
            let end = range_end.unwrap_or(start);
            for n in start..=end.max(start) {
                ids.push(format!("{prefix}-{n:0width$}"));
            }
            i += if range_end.is_some() { 5 } else { 2 };
        } else {
            i += 1;
        }
    }
    ids
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|n| n != "target" && n != "fuzz")
            {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn conformance(missing: bool, json: bool) -> Result<()> {
    let root = repo_root();
    let sections = checklist(&root.join("docs/spec/conformance-checklist.md"))?;
    let prefixes: BTreeSet<String> = sections
        .iter()
        .flat_map(|(_, ids)| {
            ids.iter()
                .filter_map(|id| id.split('-').next().map(str::to_owned))
        })
        .collect();

    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    let mut covered: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let text = std::fs::read_to_string(file)?;
        let mut previous_was_test = false;
        for line in text.lines() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("#[test]")
                || trimmed.starts_with("#[tokio::test")
                || trimmed.starts_with("proptest!")
            {
                previous_was_test = true;
                continue;
            }
            let Some(rest) = trimmed
                .strip_prefix("fn ")
                .or_else(|| trimmed.strip_prefix("async fn "))
            else {
                continue;
            };
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let relative = file
                .strip_prefix(&root)
                .unwrap_or(file)
                .display()
                .to_string();
            let in_tests = relative.contains("/tests/") || previous_was_test;
            if in_tests {
                for id in ids_in_name(&name, &prefixes) {
                    covered
                        .entry(id)
                        .or_default()
                        .insert(format!("{relative}::{name}"));
                }
            }
            previous_was_test = false;
        }
    }

    let total: usize = sections.iter().map(|(_, ids)| ids.len()).sum();
    let known: BTreeSet<&String> = sections.iter().flat_map(|(_, ids)| ids.iter()).collect();
    let hit = covered.keys().filter(|id| known.contains(id)).count();
    if json {
        let report: Vec<serde_like::Section> = sections
            .iter()
            .map(|(title, ids)| serde_like::Section {
                title: title.clone(),
                covered: ids
                    .iter()
                    .filter(|id| covered.contains_key(*id))
                    .cloned()
                    .collect(),
                missing: ids
                    .iter()
                    .filter(|id| !covered.contains_key(*id))
                    .cloned()
                    .collect(),
            })
            .collect();
        println!("{}", serde_like::to_json(&report, hit, total));
        return Ok(());
    }
    for (title, ids) in &sections {
        let done: Vec<&String> = ids.iter().filter(|id| covered.contains_key(*id)).collect();
        println!("{title}: {}/{}", done.len(), ids.len());
        if !done.is_empty() {
            println!(
                "  covered: {}",
                done.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
        if missing {
            let todo: Vec<&str> = ids
                .iter()
                .filter(|id| !covered.contains_key(*id))
                .map(String::as_str)
                .collect();
            if !todo.is_empty() {
                println!("  missing: {}", todo.join(" "));
            }
        }
    }
    println!("total: {hit}/{total} checklist IDs have at least one test");
    Ok(())
}

/// A tiny JSON writer so xtask needs no serde.
mod serde_like {
    pub struct Section {
        pub title: String,
        pub covered: Vec<String>,
        pub missing: Vec<String>,
    }

    fn list(items: &[String]) -> String {
        format!(
            "[{}]",
            items
                .iter()
                .map(|i| format!("\"{i}\""))
                .collect::<Vec<_>>()
                .join(",")
        )
    }

    pub fn to_json(sections: &[Section], hit: usize, total: usize) -> String {
        let body: Vec<String> = sections
            .iter()
            .map(|s| {
                format!(
                    "{{\"title\":\"{}\",\"covered\":{},\"missing\":{}}}",
                    s.title.replace('"', "'"),
                    list(&s.covered),
                    list(&s.missing)
                )
            })
            .collect();
        format!(
            "{{\"covered\":{hit},\"total\":{total},\"sections\":[{}]}}",
            body.join(",")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_ranges_and_lists() {
        let prefixes: BTreeSet<String> = ["STO", "DEF", "MET"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert_eq!(ids_in_name("sto_14_schema", &prefixes), vec!["STO-14"]);
        assert_eq!(
            ids_in_name("sto_16_sto_17_checks", &prefixes),
            vec!["STO-16", "STO-17"]
        );
        assert_eq!(
            ids_in_name("def_02_to_def_04_x", &prefixes),
            vec!["DEF-02", "DEF-03", "DEF-04"]
        );
        assert_eq!(
            ids_in_name("met_11_store_handle", &prefixes),
            vec!["MET-11"]
        );
        assert!(ids_in_name("handles_are_slugs", &prefixes).is_empty());
    }
}
