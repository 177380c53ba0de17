//! Helpers shared by the store's integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use adf_store::{AdfFile, CreateOptions};

pub fn fixture(name: &str) -> PathBuf {
    repo_root().join("testdata/reference-v0.4.2").join(name)
}

/// The standard's own documents, kept in the repository.
pub fn spec_doc(name: &str) -> PathBuf {
    repo_root().join("docs/spec").join(name)
}

/// A fresh file in a new temp dir; the dir lives as long as the returned guard.
pub fn new_file(name: &str) -> (tempfile::TempDir, PathBuf, AdfFile) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.adf"));
    let file = AdfFile::create(&path, &CreateOptions::default()).unwrap();
    (dir, path, file)
}

/// A copy of a reference fixture in a new temp dir (never touch the originals).
pub fn copy_fixture(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::copy(fixture(name), &path).unwrap();
    (dir, path)
}

/// Every file in `dir` whose name starts with `stem`: sidecars and backups show up here.
pub fn files_like(dir: &Path, stem: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(stem))
        .collect();
    names.sort();
    names
}

/// A digest of every row of every table, for "the file did not change" assertions that do
/// not depend on page layout.
pub fn content_digest(path: &Path) -> String {
    let uri = format!("file:{}?immutable=1", path.display());
    let conn = rusqlite::Connection::open_with_flags(
        uri,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI,
    )
    .unwrap();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut out = String::new();
    for table in tables {
        out.push_str(&format!("# {table}\n"));
        let mut stmt = conn
            .prepare(&format!("SELECT * FROM \"{table}\" ORDER BY rowid"))
            .unwrap();
        let count = stmt.column_count();
        let mut rows = stmt.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            for i in 0..count {
                let cell = match row.get_ref(i).unwrap() {
                    rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                    rusqlite::types::ValueRef::Blob(b) => format!(
                        "blob:{}",
                        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
                    ),
                    other => format!("{other:?}"),
                };
                out.push_str(&cell);
                out.push('|');
            }
            out.push('\n');
        }
    }
    out
}

/// The repository root, found at run time: cargo sets `CARGO_MANIFEST_DIR` for the test
/// process, and a test binary reused from a shared build cache may have been compiled in
/// another checkout, so the compile-time value could point at someone else's tree.
pub fn repo_root() -> std::path::PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir.join("../..")
}
