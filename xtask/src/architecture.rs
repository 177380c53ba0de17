//! `cargo xtask architecture`: ARCHITECTURE.md checked against the tree.
//!
//! - The crate graph: the ```` ```crate-graph ```` block (`crate -> dep, dep`, one line per
//!   workspace member) must equal the normal dependencies among workspace members that
//!   `cargo metadata` reports.
//! - Every repository path the map names in backticks (`crates/adf-server/src/turns.rs`,
//!   `scripts/test`, `CRATES.md`) must exist.
//! - The invariants a scan can check: only adf-egress builds an HTTP client or opens a
//!   connection; every crate that can reach the network through adf-egress tests with its
//!   `loopback-only` dial guard; every crate whose tests run adf-runtime enables its
//!   `hermetic-home`. "Only adf-store runs SQL" is adf-store's `closed_api` test; the import
//!   circles are `cargo xtask imports`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

/// Crate → its normal dependencies among workspace members.
pub(crate) type CrateGraph = BTreeMap<String, BTreeSet<String>>;

/// The crate graph the map states: the lines of its ```` ```crate-graph ```` block.
pub(crate) fn stated_graph(map: &str) -> Result<CrateGraph> {
    let mut graph = CrateGraph::new();
    let mut inside = false;
    let mut seen_block = false;
    for (number, line) in map.lines().enumerate() {
        let trimmed = line.trim();
        if !inside {
            if trimmed == "```crate-graph" {
                inside = true;
                seen_block = true;
            }
            continue;
        }
        if trimmed.starts_with("```") {
            inside = false;
            continue;
        }
        let content = trimmed.split('#').next().unwrap_or_default().trim();
        if content.is_empty() {
            continue;
        }
        let Some((name, deps)) = content.split_once("->") else {
            bail!(
                "ARCHITECTURE.md:{}: a crate-graph line reads `crate -> dep, dep`: {line:?}",
                number + 1
            );
        };
        let deps: BTreeSet<String> = deps
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(str::to_owned)
            .collect();
        if graph.insert(name.trim().to_owned(), deps).is_some() {
            bail!(
                "ARCHITECTURE.md:{}: {} is listed twice in the crate graph",
                number + 1,
                name.trim()
            );
        }
    }
    if !seen_block {
        bail!("ARCHITECTURE.md has no ```crate-graph block");
    }
    Ok(graph)
}

/// `cargo metadata` of the workspace (no dependency resolution needed).
pub(crate) fn metadata(root: &Path) -> Result<Value> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .context("cannot run cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    serde_json::from_slice(&output.stdout).context("cargo metadata printed no JSON")
}

/// One workspace member's dependency on another: the kind (`None` normal, `dev`, `build`)
/// and the features it enables.
#[derive(Debug, Clone)]
pub(crate) struct Dependency {
    pub(crate) name: String,
    pub(crate) kind: Option<String>,
    pub(crate) features: BTreeSet<String>,
}

/// Workspace members → their dependencies on other workspace members.
pub(crate) fn members(metadata: &Value) -> BTreeMap<String, Vec<Dependency>> {
    let packages = metadata["packages"].as_array().cloned().unwrap_or_default();
    let names: BTreeSet<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    packages
        .iter()
        .filter_map(|package| {
            let name = package["name"].as_str()?.to_owned();
            let deps = package["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|dep| {
                    let dep_name = dep["name"].as_str()?;
                    names.contains(dep_name).then(|| Dependency {
                        name: dep_name.to_owned(),
                        kind: dep["kind"].as_str().map(str::to_owned),
                        features: dep["features"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|f| f.as_str().map(str::to_owned))
                            .collect(),
                    })
                })
                .collect();
            Some((name, deps))
        })
        .collect()
}

/// The normal dependencies among workspace members.
pub(crate) fn actual_graph(members: &BTreeMap<String, Vec<Dependency>>) -> CrateGraph {
    members
        .iter()
        .map(|(name, deps)| {
            let normal = deps
                .iter()
                .filter(|d| d.kind.is_none() && &d.name != name)
                .map(|d| d.name.clone())
                .collect();
            (name.clone(), normal)
        })
        .collect()
}

/// Each difference between the stated and the actual graph, worded for the reader.
pub(crate) fn graph_differences(stated: &CrateGraph, actual: &CrateGraph) -> Vec<String> {
    let mut found = Vec::new();
    for (name, deps) in actual {
        match stated.get(name) {
            None => found.push(format!(
                "{name} is a workspace member the map does not list"
            )),
            Some(said) => {
                for missing in deps.difference(said) {
                    found.push(format!(
                        "{name} depends on {missing}, which the map does not say"
                    ));
                }
                for extra in said.difference(deps) {
                    found.push(format!(
                        "the map says {name} depends on {extra}, which it does not"
                    ));
                }
            }
        }
    }
    for name in stated.keys().filter(|n| !actual.contains_key(*n)) {
        found.push(format!(
            "the map lists {name}, which is no workspace member"
        ));
    }
    found
}

/// The top-level names a backticked repository path may start with.
const PATH_ROOTS: &[&str] = &[
    "crates/",
    "xtask/",
    "scripts/",
    "docs/",
    "testdata/",
    ".cargo/",
    ".ci/",
];

/// The backticked repository paths of the map, with their line numbers: text starting with a
/// top-level directory of the repository, or a `*.md`/`*.toml` file name.
pub(crate) fn named_paths(map: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut in_fence = false;
    for (number, line) in map.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        for (index, part) in line.split('`').enumerate() {
            if index % 2 == 0 {
                continue;
            }
            let looks_like_path = !part.contains(' ')
                && !part.contains('{')
                && !part.contains('*')
                && (PATH_ROOTS.iter().any(|root| part.starts_with(root))
                    || (!part.contains("::")
                        && (part.ends_with(".md") || part.ends_with(".toml"))
                        && !part.contains('$')
                        && !part.starts_with('~')));
            if looks_like_path {
                found.push((number + 1, part.to_owned()));
            }
        }
    }
    found
}

/// What an HTTP client or a socket of one's own looks like in source: only adf-egress may.
pub(crate) const CONNECTING: &[&str] = &[
    "reqwest::Client::builder",
    "reqwest::Client::new",
    "ClientBuilder",
    "reqwest::get(",
    "reqwest::blocking",
    "hyper::client",
    "hyper_util::client",
    "ureq::",
    "isahc::",
    "attohttpc::",
    "TcpStream::connect",
    "UdpSocket::bind",
    "tokio_tungstenite::connect",
];

/// Crates that may connect: adf-egress itself, and the test-only mock servers.
const CONNECTING_CRATES: &[&str] = &["adf-egress", "adf-testkit"];

/// Files elsewhere that may use one pattern, and why.
const CONNECTING_EXCEPTIONS: &[(&str, &str, &str)] = &[(
    "adf-cli/src/http_load.rs",
    "hyper::client",
    "`adf bench http` speaks HTTP/1 with hyper's connection API over sockets adf_egress::tcp opened",
)];

/// `file:line: pattern` for every connecting pattern in `text` (`name` as shown).
pub(crate) fn connecting_sites(name: &str, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        for pattern in CONNECTING {
            let excepted = CONNECTING_EXCEPTIONS
                .iter()
                .any(|(file, allowed, _)| *file == name && pattern == allowed);
            if code.contains(pattern) && !excepted {
                found.push(format!("{name}:{}: {pattern}", number + 1));
            }
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {dir:?}"))? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// Every place outside adf-egress (and the test kit) that builds an HTTP client or opens a
/// socket, scanning each crate's `src/`; the number of files scanned alongside.
pub(crate) fn connecting_outside_egress(root: &Path) -> Result<(usize, Vec<String>)> {
    let crates = root.join("crates");
    let (mut scanned, mut found) = (0, Vec::new());
    for entry in std::fs::read_dir(&crates)? {
        let dir = entry?.path();
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if CONNECTING_CRATES.contains(&name.as_str()) || !dir.join("src").is_dir() {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files)?;
        for file in files {
            scanned += 1;
            let text = std::fs::read_to_string(&file)?;
            let shown = file
                .strip_prefix(&crates)
                .unwrap_or(&file)
                .to_string_lossy()
                .replace('\\', "/");
            found.extend(connecting_sites(&shown, &text));
        }
    }
    Ok((scanned, found))
}

/// Every member whose normal dependencies reach `target` (or that is `target`) and whose
/// dev-dependencies do not enable `feature` of it.
pub(crate) fn missing_test_feature(
    members: &BTreeMap<String, Vec<Dependency>>,
    target: &str,
    feature: &str,
) -> Vec<String> {
    let graph = actual_graph(members);
    let reaches = |start: &str| {
        let mut seen = BTreeSet::new();
        let mut work = vec![start.to_owned()];
        while let Some(name) = work.pop() {
            if name == target {
                return true;
            }
            if seen.insert(name.clone()) {
                work.extend(graph.get(&name).into_iter().flatten().cloned());
            }
        }
        false
    };
    members
        .iter()
        .filter(|(name, _)| reaches(name))
        .filter(|(_, deps)| {
            !deps.iter().any(|d| {
                d.name == target && d.kind.as_deref() == Some("dev") && d.features.contains(feature)
            })
        })
        .map(|(name, _)| {
            format!(
                "{name} runs {target} but its dev-dependencies do not enable {target}/{feature}"
            )
        })
        .collect()
}

/// Every finding of the architecture check (empty: the map and the tree agree).
pub(crate) fn check(root: &Path) -> Result<Vec<String>> {
    let map_path = root.join("ARCHITECTURE.md");
    let map = std::fs::read_to_string(&map_path)
        .with_context(|| format!("cannot read {}", map_path.display()))?;
    let members = members(&metadata(root)?);
    let mut findings = Vec::new();
    findings.extend(
        graph_differences(&stated_graph(&map)?, &actual_graph(&members))
            .into_iter()
            .map(|d| format!("crate graph: {d}")),
    );
    for (line, path) in named_paths(&map) {
        if !root.join(path.trim_end_matches('/')).exists() {
            findings.push(format!(
                "ARCHITECTURE.md:{line}: `{path}` does not exist in the repository"
            ));
        }
    }
    let (scanned, connecting) = connecting_outside_egress(root)?;
    if scanned < 50 {
        findings.push(format!(
            "the source scan found only {scanned} files under crates/"
        ));
    }
    findings.extend(
        connecting.into_iter().map(|site| {
            format!("{site}: only adf-egress builds HTTP clients or opens connections")
        }),
    );
    findings.extend(missing_test_feature(
        &members,
        "adf-egress",
        "loopback-only",
    ));
    findings.extend(missing_test_feature(
        &members,
        "adf-runtime",
        "hermetic-home",
    ));
    Ok(findings)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn dep(name: &str, kind: Option<&str>, features: &[&str]) -> Dependency {
        Dependency {
            name: name.into(),
            kind: kind.map(str::to_owned),
            features: features.iter().map(|f| (*f).to_owned()).collect(),
        }
    }

    #[test]
    fn the_stated_graph_is_read_from_its_block_and_compared_both_ways() {
        let map = "text\n```crate-graph\na -> b, c   # why\nb ->\nc -> b\n```\n`a -> z` prose\n";
        let stated = stated_graph(map).unwrap();
        assert_eq!(
            stated["a"],
            BTreeSet::from(["b".to_owned(), "c".to_owned()])
        );
        assert!(stated["b"].is_empty());
        let mut actual = stated.clone();
        assert!(graph_differences(&stated, &actual).is_empty());
        actual.get_mut("a").unwrap().remove("c");
        actual.get_mut("b").unwrap().insert("d".into());
        actual.insert("d".into(), BTreeSet::new());
        assert_eq!(
            graph_differences(&stated, &actual),
            [
                "the map says a depends on c, which it does not",
                "b depends on d, which the map does not say",
                "d is a workspace member the map does not list",
            ]
        );
        assert!(stated_graph("no block").is_err());
        assert!(stated_graph("```crate-graph\na b\n```").is_err());
    }

    #[test]
    fn backticked_repository_paths_are_found_and_other_code_is_not() {
        let map = "See `crates/adf-server/src/turns.rs` `start_chat`, `CRATES.md`, `scripts/test`,\n\
                   `$ADF_HOME/settings.json`, `Cargo.toml`, `adf_store::x.md`, `crates/*/src`, `tools/mod.rs`.\n\
                   ```\n`crates/in/a/fence.rs`\n```\n";
        let found: Vec<String> = named_paths(map).into_iter().map(|(_, p)| p).collect();
        assert_eq!(
            found,
            [
                "crates/adf-server/src/turns.rs",
                "CRATES.md",
                "scripts/test",
                "Cargo.toml"
            ]
        );
    }

    #[test]
    fn the_connection_scan_sees_each_pattern_outside_comments_and_honours_its_exceptions() {
        for pattern in CONNECTING {
            let text = format!("fn f() {{\n    let c = {pattern}x;\n}}\n");
            assert_eq!(
                connecting_sites("a/src/f.rs", &text),
                [format!("a/src/f.rs:2: {pattern}")]
            );
        }
        assert!(
            connecting_sites("a/src/f.rs", "// reqwest::Client::new is adf-egress's").is_empty()
        );
        assert!(
            connecting_sites("a/src/f.rs", "let c = adf_egress::service_client(o);").is_empty()
        );
        let (file, pattern, _) = CONNECTING_EXCEPTIONS[0];
        assert!(connecting_sites(file, &format!("use {pattern}::conn;")).is_empty());
        assert_eq!(
            connecting_sites("other.rs", &format!("use {pattern}::conn;")).len(),
            1
        );
    }

    #[test]
    fn a_crate_reaching_the_target_without_its_test_feature_is_named() {
        let members = BTreeMap::from([
            ("net".to_owned(), vec![]),
            (
                "mid".to_owned(),
                vec![dep("net", None, &[]), dep("net", Some("dev"), &["guard"])],
            ),
            ("top".to_owned(), vec![dep("mid", None, &[])]),
            ("apart".to_owned(), vec![]),
        ]);
        assert_eq!(
            missing_test_feature(&members, "net", "guard"),
            [
                "net runs net but its dev-dependencies do not enable net/guard",
                "top runs net but its dev-dependencies do not enable net/guard",
            ]
        );
    }

    fn repo_root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    /// The map's crate graph, every path it names and the invariants above hold for this tree.
    #[test]
    fn architecture_md_agrees_with_the_tree() {
        let findings = check(&repo_root()).unwrap();
        assert!(
            findings.is_empty(),
            "ARCHITECTURE.md and the tree disagree (run `cargo xtask architecture`):\n{}",
            findings.join("\n")
        );
    }

    /// SRV-22's code half: no crate but adf-egress (and the test kit) builds an HTTP client or
    /// opens a connection, so no new call site can bypass the policy.
    #[test]
    fn srv_22_only_adf_egress_builds_http_clients_or_opens_connections() {
        let (scanned, found) = connecting_outside_egress(&repo_root()).unwrap();
        assert!(scanned > 50, "the walk found only {scanned} files");
        assert!(
            found.is_empty(),
            "outbound connections must go through adf-egress (agent_client / service_client / Policy::admit):\n{}",
            found.join("\n")
        );
    }

    /// Tests dial loopback only: every crate that reaches adf-egress tests with its guard.
    #[test]
    fn every_crate_that_can_dial_tests_with_the_loopback_only_guard() {
        let members = members(&metadata(&repo_root()).unwrap());
        assert!(members.len() > 10, "{members:?}");
        let missing = missing_test_feature(&members, "adf-egress", "loopback-only");
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }
}
