//! JSON snapshots kept as test fixtures: a test serializes what it checks and compares it,
//! byte for byte, with a file taken earlier (from the code before a refactor, say). Set
//! `ADF_BLESS_SNAPSHOTS=1` to write the file instead, and review the diff before committing.

use std::path::Path;

use serde_json::Value;

/// The environment variable that makes [`assert_json_snapshot`] write instead of compare.
pub const BLESS_VAR: &str = "ADF_BLESS_SNAPSHOTS";

/// Panics unless `actual`, pretty-printed with a trailing newline, equals the file at `path`
/// byte for byte (key order included). With [`BLESS_VAR`] set to `1` it writes the file.
pub fn assert_json_snapshot(path: impl AsRef<Path>, actual: &Value) {
    let path = path.as_ref();
    let rendered = match serde_json::to_string_pretty(actual) {
        Ok(text) => text + "\n",
        Err(error) => panic!("the snapshot value does not serialize: {error}"),
    };
    if std::env::var(BLESS_VAR).as_deref() == Ok("1") {
        if let Err(error) = std::fs::write(path, &rendered) {
            panic!("cannot write the snapshot {}: {error}", path.display());
        }
        return;
    }
    let expected = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => panic!(
            "cannot read the snapshot {} ({error}); {BLESS_VAR}=1 writes it",
            path.display()
        ),
    };
    if expected != rendered {
        panic!(
            "{} differs from the snapshot.\n--- snapshot\n{expected}\n--- now\n{rendered}",
            path.display()
        );
    }
}

/// [`assert_json_snapshot`] of tool declarations, each `(name, description, parameters)`, as
/// the list `[{name, description, parameters}]` in the order given.
pub fn assert_declarations_snapshot<'a>(
    path: impl AsRef<Path>,
    declarations: impl IntoIterator<Item = (&'a str, &'a str, Value)>,
) {
    let listed: Vec<Value> = declarations
        .into_iter()
        .map(|(name, description, parameters)| {
            serde_json::json!({
                "name": name,
                "description": description,
                "parameters": parameters,
            })
        })
        .collect();
    assert_json_snapshot(path, &Value::Array(listed));
}
