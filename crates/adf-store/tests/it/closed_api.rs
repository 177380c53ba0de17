//! The store's API stays closed: every crate but `adf-store` asks it through named methods and
//! the transaction types it hands out (tests through `adf_store::test_support`), so no other
//! crate's Rust file — source, benches, tests, examples alike — holds SQL text, reaches the
//! raw connection (`connection()`, `rusqlite::Connection`) or runs transaction control, and
//! no other crate's manifest names `rusqlite` or the store's `self-test-sql` feature. This
//! scans every Rust file and manifest outside `adf-store` and names every file:line that
//! breaks the rule.

use std::path::{Path, PathBuf};

use rust_source::StrLit;

const SQL_KEYWORDS: &[&str] = &[
    "SELECT",
    "INSERT",
    "UPDATE",
    "DELETE",
    "ROLLBACK",
    "PRAGMA",
    "BEGIN",
    "SAVEPOINT",
    "COMMIT",
    "RELEASE",
];

/// Transaction control, which only `adf-store` runs (it hands out `atomically`, held
/// transactions and run savepoints instead).
const TRANSACTION_KEYWORDS: &[&str] = &["BEGIN", "SAVEPOINT", "COMMIT", "RELEASE", "ROLLBACK"];

/// Code (outside comments and literals) that reaches past the store's typed API.
const RAW_ACCESS: &[&str] = &[
    ".connection()",
    "rusqlite::",
    "is_autocommit(",
    "execute_batch(",
    "prepare_cached(",
];

/// Files whose string literals are agent SQL, the input under test of the agent's own SQL
/// tools (run by `adf_store::sql` under its authorizer), not SQL the crate runs: their
/// SELECT/INSERT/UPDATE/DELETE/PRAGMA literals are allowed; transaction control still needs an
/// entry of [`ALLOWED_LITERALS`], and raw access is found as anywhere else.
const AGENT_SQL_FILES: &[(&str, &str)] = &[(
    "crates/adf-runtime/tests/it/tools_db.rs",
    "db_query/db_execute's own tests: every statement is agent SQL sent through the tools",
)];

/// String literals outside `adf-store` that hold SQL words without the crate running SQL on
/// the file: (path, how the literal starts, why it is allowed). Exact, so a new literal in
/// the same file is still found.
const ALLOWED_LITERALS: &[(&str, &str, &str)] = &[
    (
        "crates/adf-runtime/src/tools/builtin/db.rs",
        "Run one read-only SELECT",
        "db_query's description: the agent's own SQL tool, run by adf_store::sql",
    ),
    (
        "crates/adf-runtime/src/tools/builtin/db.rs",
        "One SELECT (or WITH",
        "db_query's parameter description",
    ),
    (
        "crates/adf-runtime/src/tools/builtin/db.rs",
        "Run one INSERT, UPDATE, DELETE",
        "db_execute's description",
    ),
    (
        "crates/adf-runtime/src/tools/builtin/config/rules.rs",
        "DELETE",
        "an HTTP method of serving.api",
    ),
    (
        "crates/adf-runtime/src/tools/builtin/config/rules.rs",
        "serving.api[{label}]: method must be",
        "an HTTP method list in an error message",
    ),
    (
        "crates/adf-shell/src/commands/data.rs",
        "SELECT",
        "sqlite3 sends the agent's statements to db_query or db_execute by their first word",
    ),
    (
        "crates/adf-shell/src/commands/data.rs",
        "PRAGMA",
        "sqlite3 sends the agent's statements to db_query or db_execute by their first word",
    ),
    (
        "crates/adf-shell/src/commands/agent.rs",
        "SELECT id, tool, status, created_at FROM adf_tasks",
        "ps: agent SQL sent through the agent's db_query tool, under the store's authorizer",
    ),
    (
        "crates/adf-shell/src/commands/agent.rs",
        "SELECT status FROM adf_tasks WHERE id =",
        "wait: agent SQL sent through the agent's db_query tool, under the store's authorizer",
    ),
    (
        "crates/adf-shell/src/commands/agent.rs",
        "SELECT id, status, result, error FROM adf_tasks",
        "wait: agent SQL sent through the agent's db_query tool, under the store's authorizer",
    ),
    (
        "crates/adf-shell/src/commands/mod.rs",
        "sqlite3 [-json|-csv|-header]",
        "sqlite3's help line",
    ),
    (
        "crates/adf-runtime/benches/code.rs",
        "adf.sys_get_meta (read: pipeline + one SELECT)",
        "a benchmark's label",
    ),
    (
        "crates/adf-runtime/tests/it/code.rs",
        "await adf.db_execute({",
        "a lambda's agent SQL, sent through db_execute",
    ),
    (
        "crates/adf-runtime/tests/it/code.rs",
        "const task = await adf.fs_write({ mode: 'write', path: 'big.txt'",
        "a lambda's agent SQL, sent through db_query",
    ),
    (
        "crates/adf-runtime/tests/it/code.rs",
        "const out = []",
        "a lambda's agent SQL the db tools must refuse",
    ),
    (
        "crates/adf-runtime/tests/it/code.rs",
        "return await adf.db_execute({ sql: \\\"UPDATE adf_files SET authorized = 1",
        "a lambda's agent SQL the db tools must refuse",
    ),
    (
        "crates/adf-runtime/tests/it/code.rs",
        "return await adf.db_query({ sql: 'SELECT * FROM adf_identity' })",
        "a lambda's agent SQL the db tools must refuse",
    ),
    (
        "crates/adf-server/tests/it/taps.rs",
        "async function record(tap, event) {",
        "a tap lambda's agent SQL, sent through db_execute",
    ),
    (
        "crates/adf-shell/tests/shell.rs",
        "sqlite3 'CREATE TABLE local_",
        "shell lines whose sqlite3 sends agent SQL to the db tools",
    ),
    (
        "crates/adf-shell/tests/bounds.rs",
        "sqlite3 \\\"SELECT json_valid(",
        "a shell line whose sqlite3 sends agent SQL to db_query",
    ),
    (
        "crates/adf-cli/tests/it/file_commands.rs",
        "INSERT INTO \\\"",
        "the prefix of the reference dump's lines, counted as text; no SQL runs",
    ),
    (
        "crates/adf-server/tests/it/replay.rs",
        "DELETE /files/content",
        "an HTTP route in the reference transcript's notes",
    ),
    (
        "crates/adf-egress/tests/it/policy.rs",
        "DELETE",
        "an HTTP method",
    ),
    (
        "crates/adf-runtime/tests/it/tools_db.rs",
        "BEGIN",
        "agent SQL the db tools must refuse",
    ),
    (
        "crates/adf-runtime/tests/it/tools_db.rs",
        "COMMIT",
        "agent SQL the db tools must refuse",
    ),
    (
        "crates/adf-runtime/tests/it/tools_db.rs",
        "RELEASE adf_atomic",
        "agent SQL the db tools must refuse",
    ),
    (
        "crates/adf-runtime/tests/it/tools_db.rs",
        "SAVEPOINT/RELEASE",
        "a message naming the statements the db tools refuse",
    ),
    (
        "crates/adf-runtime/tests/it/tools_db.rs",
        "CREATE TRIGGER local_tr AFTER INSERT ON",
        "agent SQL (a trigger body) the db tools must refuse",
    ),
    (
        "crates/adf-runtime/tests/it/tools_db.rs",
        "CREATE TEMP TRIGGER local_tt",
        "agent SQL (a trigger body) the db tools must refuse",
    ),
];

/// The lexer of xtask's source scans, compiled into this test as a module of its own: a test
/// of adf-store cannot depend on xtask (a binary), and this scan must tell code, comments and
/// literals apart just as those do. The file uses nothing but `std`. This test reads its
/// string literals and blanked code, not its tokens and comments, hence `dead_code`; its unit
/// tests run here too.
#[path = "../../../../xtask/src/rust_source.rs"]
#[allow(dead_code)]
mod rust_source;

/// The string literals (plain, byte, C and raw) of Rust source, skipping comments and char
/// literals, so prose in doc comments such as "`DELETE /chat`" is not mistaken for SQL.
fn string_literals(source: &str) -> Vec<StrLit> {
    rust_source::lex(source).strings
}

/// Rust source split into its string literals and its code: the source with comments and
/// literals removed, its lines where they were (so a line number holds for both).
fn split_source(source: &str) -> (Vec<StrLit>, String) {
    let lexed = rust_source::lex(source);
    (lexed.strings, lexed.code)
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

/// The Rust files under `dir`, as (path from the workspace root, text), in path order.
fn rust_files(root: &Path, dir: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let relative = path.strip_prefix(root).unwrap_or(&path);
                let relative = relative.to_string_lossy().replace('\\', "/");
                let source = std::fs::read_to_string(&path).expect("readable source");
                files.push((relative, source));
            }
        }
    }
    files.sort();
    files
}

fn allowed(path: &str, literal: &str) -> bool {
    ALLOWED_LITERALS
        .iter()
        .any(|(file, start, _)| *file == path && literal.trim_start().starts_with(start))
}

fn holds_agent_sql(path: &str) -> bool {
    AGENT_SQL_FILES.iter().any(|(file, _)| *file == path)
}

/// `file:line: what` for every SQL literal (`keywords`) and every raw access in `code` in
/// one file's source.
fn findings_in(path: &str, source: &str, keywords: &[&str], check_code: bool) -> Vec<String> {
    let (literals, code) = split_source(source);
    let mut findings = Vec::new();
    for literal in literals {
        if allowed(path, &literal.text) {
            continue;
        }
        for keyword in sql_keywords_in(&literal.text) {
            let agent_sql = holds_agent_sql(path) && !TRANSACTION_KEYWORDS.contains(&keyword);
            if keywords.contains(&keyword) && !agent_sql {
                findings.push(format!("{path}:{}: {keyword} in a string", literal.line));
            }
        }
    }
    if check_code {
        for (index, line) in code.lines().enumerate() {
            for raw in RAW_ACCESS {
                if line.contains(raw) {
                    findings.push(format!("{path}:{}: {raw}", index + 1));
                }
            }
        }
    }
    findings
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// Every crate directory but `adf-store`'s (the workspace's `xtask` is scanned beside them).
fn other_crates(root: &Path) -> Vec<PathBuf> {
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.is_dir() && !path.ends_with("adf-store"))
        .collect();
    crates.sort();
    crates
}

#[test]
fn no_file_outside_the_store_holds_sql_text_or_the_raw_connection() {
    let root = workspace_root();
    let crates = other_crates(&root);
    assert!(
        crates.len() >= 10,
        "found only {} crates besides adf-store",
        crates.len()
    );
    let mut findings = Vec::new();
    let (mut scanned, mut tests) = (0, 0);
    for dir in crates.iter().chain([&root.join("xtask")]) {
        for (path, source) in rust_files(&root, dir) {
            scanned += 1;
            tests += usize::from(path.contains("/tests/"));
            findings.extend(findings_in(&path, &source, SQL_KEYWORDS, true));
        }
    }
    assert!(scanned > 100, "scanned only {scanned} source files");
    assert!(tests > 50, "scanned only {tests} test files");
    assert!(
        findings.is_empty(),
        "SQL text or raw connection access outside adf-store; add a named method to adf-store \
         (views.rs, held.rs), or for a test's fixture or whole-table read use \
         adf_store::test_support (feature `test-support`):\n{}",
        findings.join("\n")
    );
}

/// `file: what` for every manifest line that would let a crate reach SQLite past the store:
/// a dependency on `rusqlite`, or the store's `self-test-sql` feature (`connection()`).
fn manifest_findings(path: &str, manifest: &str) -> Vec<String> {
    manifest
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with('#'))
        .filter_map(|(index, line)| {
            let what = if line.trim_start().starts_with("rusqlite") {
                "depends on rusqlite"
            } else if line.contains("self-test-sql") {
                "enables adf-store/self-test-sql"
            } else {
                return None;
            };
            Some(format!("{path}:{}: {what}", index + 1))
        })
        .collect()
}

#[test]
fn no_manifest_outside_the_store_reaches_sqlite() {
    let root = workspace_root();
    let mut findings = Vec::new();
    let mut manifests = 0;
    for dir in other_crates(&root).iter().chain([&root.join("xtask")]) {
        let path = dir.join("Cargo.toml");
        let Ok(manifest) = std::fs::read_to_string(&path) else {
            continue;
        };
        manifests += 1;
        let shown = path
            .strip_prefix(&root)
            .unwrap_or(&path)
            .display()
            .to_string();
        findings.extend(manifest_findings(&shown, &manifest));
    }
    assert!(manifests >= 10, "read only {manifests} manifests");
    assert!(
        findings.is_empty(),
        "only adf-store reaches SQLite; tests use adf_store::test_support:\n{}",
        findings.join("\n")
    );
}

#[test]
fn the_manifest_scan_finds_rusqlite_and_the_raw_connection_feature() {
    let manifest = "[dev-dependencies]\n\
                    # rusqlite, mentioned in a comment\n\
                    rusqlite.workspace = true\n\
                    adf-store = { workspace = true, features = [\"self-test-sql\"] }\n\
                    adf-store-two = { workspace = true, features = [\"test-support\"] }\n";
    assert_eq!(
        manifest_findings("x/Cargo.toml", manifest),
        vec![
            "x/Cargo.toml:3: depends on rusqlite".to_owned(),
            "x/Cargo.toml:4: enables adf-store/self-test-sql".to_owned()
        ]
    );
}

#[test]
fn the_scan_finds_raw_access_in_code_and_not_in_comments_or_strings() {
    let source = "// file.connection() in a comment\n\
                  let text = \"see file.connection() docs\";\n\
                  let conn = file.connection();\n\
                  /* conn.execute_batch( */ conn.is_autocommit();\n";
    let found = findings_in("x.rs", source, SQL_KEYWORDS, true);
    assert_eq!(
        found,
        vec![
            "x.rs:3: .connection()".to_owned(),
            "x.rs:4: is_autocommit(".to_owned()
        ]
    );
    assert_eq!(
        findings_in(
            "x.rs",
            "let s = \"BEGIN IMMEDIATE\";\n",
            TRANSACTION_KEYWORDS,
            false
        ),
        vec!["x.rs:1: BEGIN in a string".to_owned()]
    );
    assert_eq!(
        findings_in(
            "crates/adf-runtime/tests/it/tools_db.rs",
            "let q = \"SELECT * FROM local_t\"; let t = \"ROLLBACK\";\n",
            SQL_KEYWORDS,
            true
        ),
        vec!["crates/adf-runtime/tests/it/tools_db.rs:1: ROLLBACK in a string".to_owned()],
        "a file of agent SQL still may not hold transaction control"
    );
    assert!(
        findings_in(
            "crates/adf-shell/src/commands/data.rs",
            "let k = \"SELECT\"; let q = \"DELETE FROM adf_logs\";",
            SQL_KEYWORDS,
            true
        ) == vec!["crates/adf-shell/src/commands/data.rs:1: DELETE in a string".to_owned()],
        "an allowed literal does not hide another in the same file"
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
