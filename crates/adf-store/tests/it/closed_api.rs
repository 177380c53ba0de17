//! The store's API stays closed: the daemon and the CLI ask `adf-store` through named methods,
//! so their source holds no SQL text. This scans their string literals for SQL keywords and
//! names every file:line that has one.

use std::path::{Path, PathBuf};

const SQL_KEYWORDS: &[&str] = &["SELECT", "INSERT", "UPDATE", "DELETE", "ROLLBACK", "PRAGMA"];

/// Crates whose source must hold no SQL text (paths from the workspace root).
const CLOSED_CRATES: &[&str] = &["crates/adf-server/src", "crates/adf-cli/src"];

/// A string literal of Rust source: the line it starts on and its text.
#[derive(Debug)]
struct Literal {
    line: usize,
    text: String,
}

/// The string literals (plain, byte and raw) of Rust source, skipping comments and char
/// literals, so prose in doc comments such as "`DELETE /chat`" is not mistaken for SQL.
fn string_literals(source: &str) -> Vec<Literal> {
    let chars: Vec<char> = source.chars().collect();
    let mut literals = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let count_lines =
        |from: usize, to: usize| chars[from..to].iter().filter(|c| **c == '\n').count();
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let start = i;
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                i += 1;
            }
            i = (i + 2).min(chars.len());
            line += count_lines(start, i);
        } else if c == '\'' {
            // A char literal ('x', '\n', '"') is skipped whole; a lifetime is just a quote.
            if next == Some('\\') {
                let mut j = i + 2;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if let Some((hashes, body_start)) = raw_string_start(&chars, i) {
            let start_line = line;
            let closing: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let mut j = body_start;
            while j < chars.len() && !chars[j..].starts_with(&closing) {
                j += 1;
            }
            literals.push(Literal {
                line: start_line,
                text: chars[body_start..j.min(chars.len())].iter().collect(),
            });
            line += count_lines(i, j.min(chars.len()));
            i = (j + closing.len()).min(chars.len());
        } else if c == '"'
            || (c == 'b' && next == Some('"') && !is_ident(chars.get(i.wrapping_sub(1))))
        {
            let start_line = line;
            let body_start = if c == 'b' { i + 2 } else { i + 1 };
            let mut j = body_start;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            let end = j.min(chars.len());
            literals.push(Literal {
                line: start_line,
                text: chars[body_start..end].iter().collect(),
            });
            line += count_lines(i, end);
            i = end + 1;
        } else {
            i += 1;
        }
    }
    literals
}

fn is_ident(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// Where a raw string (`r"`, `r#"`, `br##"` …) starts at `i`: its `#` count and the index of
/// its first character.
fn raw_string_start(chars: &[char], i: usize) -> Option<(usize, usize)> {
    if i > 0 && is_ident(chars.get(i - 1)) {
        return None;
    }
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (chars.get(j) == Some(&'"')).then_some((hashes, j + 1))
}

/// The SQL keywords a text holds as whole uppercase words.
fn sql_keywords_in(text: &str) -> Vec<&'static str> {
    let words: Vec<&str> = text
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .collect();
    SQL_KEYWORDS
        .iter()
        .copied()
        .filter(|keyword| words.contains(keyword))
        .collect()
}

/// `file:line: KEYWORD` for every string literal with SQL in the Rust files under `dir`.
fn sql_findings(root: &Path, dir: &Path) -> Vec<String> {
    let mut findings = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            if path.extension().is_none_or(|ext| ext != "rs") {
                continue;
            }
            let relative = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
            let relative_text = relative.to_string_lossy().replace('\\', "/");
            let source = std::fs::read_to_string(&path).expect("readable source");
            for literal in string_literals(&source) {
                for keyword in sql_keywords_in(&literal.text) {
                    findings.push(format!("{relative_text}:{}: {keyword}", literal.line));
                }
            }
        }
    }
    findings.sort();
    findings
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

#[test]
fn server_and_cli_source_hold_no_sql_text() {
    let root = workspace_root();
    let mut findings = Vec::new();
    for dir in CLOSED_CRATES {
        let dir = root.join(dir);
        assert!(dir.is_dir(), "{} is missing", dir.display());
        findings.extend(sql_findings(&root, &dir));
    }
    assert!(
        findings.is_empty(),
        "SQL text outside adf-store; add a named method to adf-store (views.rs) instead:\n{}",
        findings.join("\n")
    );
}

#[test]
fn the_scan_finds_sql_in_literals_and_not_in_comments() {
    let source = "//! `DELETE /chat` removes history\n\
                  /* SELECT in a block comment */\n\
                  fn f<'a>(x: &'a str) -> char {\n\
                      let quote = '\"';\n\
                      let q = \"SELECT COUNT(*) FROM adf_loop\";\n\
                      let raw = r#\"x \"quoted\"\n UPDATE adf_meta\"#;\n\
                      let fine = \"selected rows; UPDATED_AT\";\n\
                      conn.execute_batch(\"ROLLBACK\");\n\
                      '\\n'\n\
                  }\n";
    let found: Vec<(usize, Vec<&str>)> = string_literals(source)
        .iter()
        .map(|literal| (literal.line, sql_keywords_in(&literal.text)))
        .filter(|(_, keywords)| !keywords.is_empty())
        .collect();
    assert_eq!(
        found,
        vec![
            (5, vec!["SELECT"]),
            (6, vec!["UPDATE"]),
            (9, vec!["ROLLBACK"])
        ]
    );
}
