//! Project chores. `cargo xtask conformance [--missing] [--json]` prints which conformance
//! checklist IDs (`docs/spec/conformance-checklist.md`) have tests; `cargo xtask architecture`
//! checks ARCHITECTURE.md against the tree (architecture.rs); `cargo xtask imports` prints the
//! file-level import circles of adf-server and adf-runtime (imports.rs); `cargo xtask
//! long-functions` lists the functions over 120 lines (see [`long_functions`]). The checks also
//! run as this crate's tests, so `cargo test --workspace` keeps them.
//!
//! A test proves an ID by carrying it in its function name: `fn sto_14_schema_matches()`,
//! several IDs in a row (`fn sto_16_sto_17_checks()`, `fn msg_04_05_06_vectors()`), or a range
//! (`fn def_02_to_def_09_x()`, `fn sto_01_to_05_x()`). A test of a feature's absence
//! (`not_supported`, `unsupported` or `absent` in its name) credits nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

mod architecture;
mod imports;
mod long_functions;
// xtask reads the tokens and comments; the string literals and the blanked code are for
// adf-store's closed-API test (`crates/adf-store/tests/it/closed_api.rs`), which compiles this
// file in too by `#[path]`.
#[allow(dead_code)]
mod rust_source;

const USAGE: &str = "\
usage: cargo xtask conformance [--missing] [--json]
       cargo xtask architecture
       cargo xtask imports
       cargo xtask long-functions

long-functions lists the non-test functions of crates/*/src longer than 120 lines and fails
when more than 3 are, or one lacks a `// Long because …` comment saying why.

architecture: checks ARCHITECTURE.md against the tree (its crate graph against cargo
metadata, every repository path it names, the invariants a scan can check).
imports: prints the file-level import circles of adf-server and adf-runtime and checks them
against the list that may only shrink (xtask/src/imports.rs).

conformance:
Counts the checklist IDs (docs/spec/conformance-checklist.md) that tests name in their function
names: sto_14_x; msg_04_05_06_x (MSG-04, MSG-05, MSG-06); idn_20_idn_26_x (mixed prefixes
too); def_02_to_def_09_x and sto_01_to_05_x (ranges). Only numbers that are IDs of the
checklist count. A test whose name contains `not_supported`, `unsupported` or `absent` (whole
words) proves a feature is missing, so it credits no ID: name such tests
`not_supported_yet_<feature>` until the real behaviour has a real test.";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args
        .iter()
        .any(|a| a == "--help" || a == "-h" || a == "help")
    {
        println!("{USAGE}");
        return Ok(());
    }
    match args.first().map(String::as_str) {
        Some("conformance") => conformance(
            args.iter().any(|a| a == "--missing"),
            args.iter().any(|a| a == "--json"),
        ),
        Some("architecture") => {
            let findings = architecture::check(&repo_root())?;
            if findings.is_empty() {
                println!("ARCHITECTURE.md agrees with the tree");
                return Ok(());
            }
            bail!(
                "ARCHITECTURE.md and the tree disagree:\n{}",
                findings.join("\n")
            )
        }
        Some("imports") => {
            let (report, problems) = imports::check(&repo_root())?;
            print!("{report}");
            if problems.is_empty() {
                return Ok(());
            }
            bail!("{}", problems.join("\n"))
        }
        Some("long-functions") => long_functions::report(&repo_root()),
        _ => bail!("{USAGE}"),
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

/// Words that mark a test of a feature's absence ("not supported yet"): such a test names no
/// requirement it proves, so it credits nothing, whatever IDs its name carries.
const ABSENCE_MARKERS: [&[&str]; 3] = [&["not", "supported"], &["unsupported"], &["absent"]];

/// Checklist IDs by prefix and number (`("STO", 1)` → `STO-01`), so a name's numbers are
/// matched by value and only numbers that are real IDs count.
type KnownIds = BTreeMap<(String, u32), String>;

fn known_ids<'a>(ids: impl IntoIterator<Item = &'a String>) -> KnownIds {
    ids.into_iter()
        .filter_map(|id| {
            let (prefix, number) = id.split_once('-')?;
            Some(((prefix.to_owned(), number.parse().ok()?), id.clone()))
        })
        .collect()
}

fn is_number(part: &str) -> bool {
    !part.is_empty() && part.chars().all(|c| c.is_ascii_digit())
}

/// True when the name carries an absence marker as whole words.
fn marks_absence(parts: &[&str]) -> bool {
    ABSENCE_MARKERS
        .iter()
        .any(|marker| parts.windows(marker.len()).any(|w| w == *marker))
}

/// The longest range a name may spell (`sto_01_to_05`), so a stray number cannot credit a
/// whole section.
const MAX_RANGE: u32 = 30;

/// IDs named by one test function name: `sto_14_x`; lists with the prefix repeated
/// (`sto_16_sto_17_x`, mixed prefixes too: `idn_20_msg_26_x`) or not (`msg_04_05_06_x`);
/// ranges (`def_02_to_def_09_x`, `sto_01_to_05_x`). Numbers that are not IDs of the checklist
/// are ignored; a name with an absence marker names none.
fn ids_in_name(name: &str, known: &KnownIds) -> Vec<String> {
    let parts: Vec<&str> = name.split('_').collect();
    if marks_absence(&parts) {
        return Vec::new();
    }
    let prefixes: BTreeSet<&str> = known.keys().map(|(p, _)| p.as_str()).collect();
    let mut numbers: Vec<(String, u32)> = Vec::new();
    // The prefix of the list being read, with its last number, while numbers keep following.
    let mut current: Option<(String, u32)> = None;
    let mut i = 0;
    while i < parts.len() {
        let part = parts[i];
        let upper = part.to_ascii_uppercase();
        let next_is_number = parts.get(i + 1).is_some_and(|n| is_number(n));
        if prefixes.contains(upper.as_str()) && next_is_number {
            let n = parts[i + 1].parse().unwrap_or(0);
            numbers.push((upper.clone(), n));
            current = Some((upper, n));
            i += 2;
            continue;
        }
        if let Some((prefix, last)) = current.clone() {
            if is_number(part) {
                let n = part.parse().unwrap_or(0);
                numbers.push((prefix.clone(), n));
                current = Some((prefix, n));
                i += 1;
                continue;
            }
            // `to_05` or `to_sto_05`: the range from the last number.
            let same_prefix = parts
                .get(i + 1)
                .is_some_and(|p| p.eq_ignore_ascii_case(&prefix));
            let end_at = if same_prefix { i + 2 } else { i + 1 };
            if part == "to"
                && let Some(end) = parts.get(end_at).filter(|n| is_number(n))
            {
                let end: u32 = end.parse().unwrap_or(0);
                if end > last && end - last <= MAX_RANGE {
                    numbers.extend((last + 1..=end).map(|n| (prefix.clone(), n)));
                }
                current = Some((prefix, end));
                i = end_at + 1;
                continue;
            }
        }
        current = None;
        i += 1;
    }
    let mut ids: Vec<String> = Vec::new();
    for key in numbers {
        if let Some(id) = known.get(&key)
            && !ids.contains(id)
        {
            ids.push(id.clone());
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
    let known = known_ids(sections.iter().flat_map(|(_, ids)| ids.iter()));

    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    // The architecture checks (SRV-22's scan among them) are xtask's own tests.
    rust_files(&root.join("xtask/src"), &mut files);
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
                for id in ids_in_name(&name, &known) {
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
    pub(super) struct Section {
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

    pub(super) fn to_json(sections: &[Section], hit: usize, total: usize) -> String {
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

    fn known(ids: &[&str]) -> KnownIds {
        let owned: Vec<String> = ids.iter().map(|s| (*s).to_owned()).collect();
        known_ids(&owned)
    }

    fn checklist_like() -> KnownIds {
        let mut ids: Vec<String> = Vec::new();
        for prefix in ["STO", "DEF", "MET", "MSG", "IDN", "SRV"] {
            ids.extend((1..=40).map(|n| format!("{prefix}-{n:02}")));
        }
        known_ids(&ids)
    }

    #[test]
    fn names_ranges_and_lists() {
        let k = checklist_like();
        assert_eq!(ids_in_name("sto_14_schema", &k), vec!["STO-14"]);
        assert_eq!(
            ids_in_name("sto_16_sto_17_checks", &k),
            vec!["STO-16", "STO-17"]
        );
        assert_eq!(
            ids_in_name("def_02_to_def_04_x", &k),
            vec!["DEF-02", "DEF-03", "DEF-04"]
        );
        assert_eq!(ids_in_name("met_11_store_handle", &k), vec!["MET-11"]);
        assert!(ids_in_name("handles_are_slugs", &k).is_empty());
    }

    #[test]
    fn shorthand_lists_credit_every_number() {
        let k = checklist_like();
        assert_eq!(
            ids_in_name("msg_04_05_06_x", &k),
            vec!["MSG-04", "MSG-05", "MSG-06"]
        );
        assert_eq!(
            ids_in_name("idn_13_15_12_injected_dek_envelope_vectors", &k),
            vec!["IDN-13", "IDN-15", "IDN-12"]
        );
        // A list ends at the first word that is not a number.
        assert_eq!(
            ids_in_name("msg_05_06_alf_roundtrip_level2_and_tamper_07", &k),
            vec!["MSG-05", "MSG-06"]
        );
    }

    #[test]
    fn shorthand_ranges_credit_every_id_between() {
        let k = checklist_like();
        assert_eq!(
            ids_in_name("sto_01_to_05_x", &k),
            vec!["STO-01", "STO-02", "STO-03", "STO-04", "STO-05"]
        );
        assert_eq!(
            ids_in_name("def_12_to_def_14_def_20_x", &k),
            vec!["DEF-12", "DEF-13", "DEF-14", "DEF-20"]
        );
        // A backwards or runaway range credits only its start.
        assert_eq!(ids_in_name("sto_05_to_01_x", &k), vec!["STO-05"]);
        assert_eq!(ids_in_name("sto_01_to_99_x", &k), vec!["STO-01"]);
    }

    #[test]
    fn mixed_prefixes_each_keep_their_own() {
        let k = checklist_like();
        assert_eq!(
            ids_in_name("idn_20_idn_26_claim", &k),
            vec!["IDN-20", "IDN-26"]
        );
        assert_eq!(
            ids_in_name("cod_35_msg_08_09_idn_10_x", &k),
            vec!["MSG-08", "MSG-09", "IDN-10"],
            "COD is not in this checklist"
        );
        assert_eq!(
            ids_in_name("srv_19_then_met_3_x", &k),
            vec!["SRV-19", "MET-03"],
            "numbers match by value, not by spelling"
        );
    }

    #[test]
    fn only_numbers_that_are_checklist_ids_count() {
        let k = known(&["MSG-04", "MSG-06", "STO-02"]);
        assert_eq!(ids_in_name("msg_04_05_06_x", &k), vec!["MSG-04", "MSG-06"]);
        assert_eq!(ids_in_name("sto_01_to_03_x", &k), vec!["STO-02"]);
        assert!(ids_in_name("msg_400_bad_request", &k).is_empty());
    }

    #[test]
    fn absence_tests_credit_nothing() {
        let k = checklist_like();
        for name in [
            "srv_30_fetch_middleware_is_refused_as_not_supported_yet",
            "not_supported_yet_srv_30_fetch_middleware",
            "absent_srv_30_fetch_middleware",
            "msg_13_unsupported_algorithm",
        ] {
            assert!(ids_in_name(name, &k).is_empty(), "{name}");
        }
        // Whole words only: these name their IDs.
        assert_eq!(ids_in_name("sto_01_absentee_x", &k), vec!["STO-01"]);
        assert_eq!(ids_in_name("sto_02_supported_x", &k), vec!["STO-02"]);
    }
}
