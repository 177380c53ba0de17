//! Every outbound connection goes through adf-egress: no crate builds an HTTP client or opens
//! a TCP connection by itself, so no new call site can bypass the policy.

use std::path::{Path, PathBuf};

/// What only adf-egress may write.
const FORBIDDEN: &[&str] = &[
    "reqwest::Client::builder",
    "reqwest::Client::new",
    "ClientBuilder",
    "reqwest::get(",
    "reqwest::blocking",
    "TcpStream::connect",
    "tokio_tungstenite::connect",
];

/// Crates allowed to: adf-egress itself, and the test-only model mock.
const EXEMPT: &[&str] = &["adf-egress", "adf-testkit"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `file:line: pattern` for every forbidden pattern in `text`.
fn offences(name: &str, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        for pattern in FORBIDDEN {
            if line.contains(pattern) {
                found.push(format!("{name}:{}: {pattern}", number + 1));
            }
        }
    }
    found
}

#[test]
fn the_scanner_sees_each_forbidden_pattern() {
    for pattern in FORBIDDEN {
        let text = format!("fn f() {{\n    let c = {pattern}x;\n}}\n");
        assert_eq!(offences("f.rs", &text), vec![format!("f.rs:2: {pattern}")]);
    }
    assert!(offences("f.rs", "let c = adf_egress::service_client(o);").is_empty());
}

#[test]
fn srv_22_only_adf_egress_builds_http_clients_or_opens_connections() {
    let crates = workspace().join("crates");
    let mut scanned = 0;
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if EXEMPT.contains(&name.as_str()) || !dir.join("src").is_dir() {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files);
        for file in files {
            scanned += 1;
            let text = std::fs::read_to_string(&file).unwrap();
            let shown = file.strip_prefix(&crates).unwrap().display().to_string();
            found.extend(offences(&shown, &text));
        }
    }
    assert!(
        scanned > 50,
        "the walk found only {scanned} files under {crates:?}"
    );
    assert!(
        found.is_empty(),
        "outbound connections must go through adf-egress (agent_client / service_client / Policy::admit):\n{}",
        found.join("\n")
    );
}
