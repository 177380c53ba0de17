//! Helpers shared by the runtime's integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use adf_runtime::tools::approval::{ApproveAll, DenyAll};
use adf_runtime::tools::{Approver, CallOutcome, ErrorCode, ToolCaller, ToolError, ToolRegistry};
use adf_store::{AdfFile, CreateOptions};
use serde_json::Value;

/// A fresh agent file in its own temp dir (kept alive by the returned guard).
pub fn new_agent() -> (tempfile::TempDir, PathBuf, AdfFile) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.adf");
    let file = AdfFile::create(&path, &CreateOptions::default()).unwrap();
    (dir, path, file)
}

pub fn model() -> ToolCaller {
    ToolCaller::Model {
        loop_name: "main".into(),
    }
}

pub fn code() -> ToolCaller {
    ToolCaller::Code {
        authorized: false,
        source: Some("lib/x.ts:main".into()),
    }
}

pub fn authorized() -> ToolCaller {
    ToolCaller::Code {
        authorized: true,
        source: Some("lib/trusted.ts:main".into()),
    }
}

/// Calls a tool with every approval denied (so a restricted call fails fast).
pub fn call(
    file: &mut AdfFile,
    caller: &ToolCaller,
    name: &str,
    args: Value,
) -> Result<Value, ToolError> {
    call_with(file, caller, name, args, &DenyAll)
}

/// Calls a tool that must fail and leave the file byte-identical; returns the error.
pub fn refused(file: &mut AdfFile, caller: &ToolCaller, name: &str, args: Value) -> ToolError {
    let before = digest(file);
    let error = call(file, caller, name, args).unwrap_err();
    assert_eq!(digest(file), before, "a refused {name} changed the file");
    error
}

/// [`refused`] as a `WRITE_ERROR` that says `message`.
pub fn refused_write(
    file: &mut AdfFile,
    caller: &ToolCaller,
    name: &str,
    args: Value,
    message: &str,
) {
    let error = refused(file, caller, name, args);
    assert_eq!(
        (error.code, error.message.as_str()),
        (ErrorCode::WriteError, message)
    );
}

/// Calls a tool with every approval granted.
pub fn call_approved(
    file: &mut AdfFile,
    caller: &ToolCaller,
    name: &str,
    args: Value,
) -> Result<Value, ToolError> {
    call_with(file, caller, name, args, &ApproveAll)
}

pub fn call_with(
    file: &mut AdfFile,
    caller: &ToolCaller,
    name: &str,
    args: Value,
    approver: &dyn Approver,
) -> Result<Value, ToolError> {
    ToolRegistry::with_builtins()
        .call(file, caller, name, args, approver)
        .map(CallOutcome::into_value)
}

/// Enables (and shows) a tool as the owner.
pub fn enable(file: &mut AdfFile, tool: &str) {
    for flag in ["enabled", "visible"] {
        file.config_set_path(
            adf_store::Caller::Owner,
            &format!("tools.{tool}.{flag}"),
            adf_store::ConfigAction::Set,
            Value::Bool(true),
        )
        .unwrap();
    }
}

/// Sets a config path as the owner (tests arrange agents this way).
pub fn owner_set(file: &mut AdfFile, path: &str, value: Value) {
    file.config_set_path(
        adf_store::Caller::Owner,
        path,
        adf_store::ConfigAction::Set,
        value,
    )
    .unwrap();
}

/// A digest of every row of every table (page layout excluded), for "the call left the file
/// unchanged" assertions.
pub fn digest(file: &AdfFile) -> String {
    digest_skipping(file, &[])
}

/// [`digest`] without the rows of `skipped` tables: a lambda run that fails still leaves its
/// `execute`/`result` rows in `adf_logs` (§13.5), the record of the attempt, not a change
/// the attempt made.
pub fn digest_except_logs(file: &AdfFile) -> String {
    digest_skipping(file, &["adf_logs"])
}

/// Edits the stored config as a hand edit or an older runtime would: past every check the
/// config tools and the store's writers make.
pub fn tamper_config(file: &AdfFile, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut config: serde_json::Value = serde_json::from_str(&file.config_text().unwrap()).unwrap();
    edit(&mut config);
    adf_store::test_support::tables(file)
        .set_config_text(&config.to_string())
        .unwrap();
}

fn digest_skipping(file: &AdfFile, skipped: &[&str]) -> String {
    adf_store::test_support::tables(file)
        .digest(skipped)
        .unwrap()
}

pub fn fixture(name: &str) -> PathBuf {
    repo_root().join("testdata/reference-v0.4.2").join(name)
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

/// Replies for three turns against a compaction threshold of 300 tokens: the second reports
/// 400 input tokens, so the third turn first asks for the summary (`summary`), then replies.
pub fn compaction_script(summary: &str) -> [adf_testkit::Turn; 4] {
    use adf_testkit::Turn;
    let big = adf_testkit::Usage {
        input: 400,
        output: 5,
        ..Default::default()
    };
    [
        Turn::text("r1"),
        Turn::text("r2").with_usage(big),
        Turn::text(summary),
        Turn::text("r3"),
    ]
}

/// The file's `adf_identity` row for `purpose`, if it has one.
pub fn identity_row(file: &AdfFile, purpose: &str) -> Option<adf_store::IdentityRow> {
    file.identity_rows()
        .unwrap()
        .into_iter()
        .find(|r| r.purpose == purpose)
}
