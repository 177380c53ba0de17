//! The filesystem tools through the whole call pipeline: `fs_read`, `fs_write`, `fs_list`,
//! `fs_delete` for the model, unauthorized code and authorized code (FIL-04..FIL-19, TOL-15..25).
use crate::common;

use adf_runtime::tools::approval::{ApproveAll, DenyAll};
use adf_runtime::tools::{Approver, ErrorCode, ToolCaller};
use adf_store::{AdfFile, ConfigAction, FileProtection, FileWrite};
use base64::Engine as _;
use common::{
    authorized, call, call_approved, code, digest, model, new_agent, refused, refused_write,
};
use serde_json::{Value, json};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Writes a file as the owner with a protection level.
fn owner_put(file: &mut AdfFile, path: &str, content: &[u8], protection: FileProtection) {
    file.file_write(
        adf_store::Caller::Owner,
        path,
        content,
        &FileWrite {
            protection_if_new: Some(protection),
            ..FileWrite::default()
        },
    )
    .unwrap();
}

fn owner_config(file: &mut AdfFile, path: &str, value: Value) {
    file.config_set_path(adf_store::Caller::Owner, path, ConfigAction::Set, value)
        .unwrap();
}

fn content_of(file: &AdfFile, path: &str) -> Option<Vec<u8>> {
    file.file_read(path).unwrap().map(|e| e.content)
}

/// `(tool, status, approval_meta)` of every task, oldest first.
fn tasks(file: &AdfFile) -> Vec<(String, String, Value)> {
    let mut rows = adf_store::test_support::tables(file)
        .rows("adf_tasks")
        .unwrap();
    // Rows come in rowid order; a stable sort by creation time keeps it among equals.
    rows.sort_by_key(|row| row["created_at"].as_i64());
    rows.into_iter()
        .map(|row| {
            let meta = match row["approval_meta"].as_str() {
                Some(text) => serde_json::from_str(text).unwrap(),
                None => Value::Null,
            };
            let text = |column: &str| row[column].as_str().unwrap().to_owned();
            (text("tool"), text("status"), meta)
        })
        .collect()
}

/// Every table but `adf_tasks`: a denied model call leaves its approval task behind and
/// nothing else.
fn digest_without_tasks(file: &AdfFile) -> String {
    adf_store::test_support::tables(file)
        .digest(&["adf_tasks"])
        .unwrap()
}

fn bypass_logs(file: &AdfFile, target: &str) -> usize {
    let logs = adf_store::test_support::tables(file).logs().unwrap();
    logs.iter()
        .filter(|l| l.origin.as_deref() == Some("protection"))
        .filter(|l| l.event.as_deref() == Some("bypass") && l.target.as_deref() == Some(target))
        .count()
}

fn write(path: &str, content: &str) -> Value {
    json!({ "mode": "write", "path": path, "content": content })
}

/// `caller` writes `content` to `path` with fs_write; the write must succeed. Returns its result.
fn write_as(file: &mut AdfFile, caller: &ToolCaller, path: &str, content: &str) -> Value {
    call(file, caller, "fs_write", write(path, content)).unwrap()
}

/// `caller` reads `path` with fs_read; the read must succeed.
fn read_as(file: &mut AdfFile, caller: &ToolCaller, path: &str) -> Value {
    call(file, caller, "fs_read", json!({ "path": path })).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Protection through the pipeline

#[test]
fn fil_04_readme_delete_asks_the_owner_refuses_code_and_lets_authorized_code() {
    let (_dir, _path, mut file) = new_agent();
    common::enable(&mut file, "fs_delete");

    let before = digest_without_tasks(&file);
    let error = call(
        &mut file,
        &model(),
        "fs_delete",
        json!({ "path": "README.md" }),
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::Denied);
    assert!(content_of(&file, "README.md").is_some());
    assert_eq!(
        digest_without_tasks(&file),
        before,
        "only the approval task was added"
    );
    let recorded = tasks(&file);
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].0, "fs_delete");
    assert_eq!(recorded[0].1, "denied");
    assert_eq!(recorded[0].2["reason"], "protection");
    assert_eq!(recorded[0].2["protection"]["target"], "README.md");
    assert_eq!(recorded[0].2["protection"]["level"], "no_delete");

    let before = digest(&file);
    let error = call(
        &mut file,
        &code(),
        "fs_delete",
        json!({ "path": "README.md" }),
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::WriteError);
    assert_eq!(
        error.message,
        "Cannot delete \"README.md\": file is no_delete."
    );
    assert_eq!(
        digest(&file),
        before,
        "code gets a hard error and no approval task"
    );

    deletes_readme_overriding(&mut file, &authorized(), &DenyAll, "authorized code");
    assert_eq!(bypass_logs(&file, "README.md"), 1);
}

/// `fs_delete README.md` (no_delete) as `caller` succeeds, says whose authority overrode the
/// protection (`how`), and the file is gone.
fn deletes_readme_overriding(
    file: &mut AdfFile,
    caller: &ToolCaller,
    approver: &dyn Approver,
    how: &str,
) {
    let result = common::call_with(
        file,
        caller,
        "fs_delete",
        json!({ "path": "README.md" }),
        approver,
    )
    .unwrap();
    assert_eq!(
        result,
        json!(format!(
            "Deleted README.md (⚠ protection override: no_delete, {how})."
        ))
    );
    assert!(content_of(file, "README.md").is_none());
}

#[test]
fn fil_04_owner_approved_readme_delete_succeeds_once() {
    let (_dir, _path, mut file) = new_agent();
    common::enable(&mut file, "fs_delete");
    deletes_readme_overriding(&mut file, &model(), &ApproveAll, "owner-approved");
    let recorded = tasks(&file);
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].1, "completed");
}

#[test]
fn fil_05_fil_13_read_only_write_refused_for_agents_bypassed_visibly_by_authorized_code() {
    let (_dir, _path, mut file) = new_agent();
    owner_put(&mut file, "locked.json", b"{}", FileProtection::ReadOnly);

    let before = digest_without_tasks(&file);
    let error = call(&mut file, &model(), "fs_write", write("locked.json", "[1]")).unwrap_err();
    assert_eq!(error.code, ErrorCode::Denied);
    assert_eq!(content_of(&file, "locked.json").unwrap(), b"{}");
    assert_eq!(digest_without_tasks(&file), before);
    assert_eq!(tasks(&file)[0].2["reason"], "protection");

    let error = refused(&mut file, &code(), "fs_write", write("locked.json", "[1]"));
    assert_eq!(error.code, ErrorCode::WriteError);
    assert_eq!(
        error.message,
        "Cannot write to \"locked.json\": file is read_only."
    );

    let result = call(
        &mut file,
        &authorized(),
        "fs_write",
        write("locked.json", "[1]"),
    )
    .unwrap();
    assert_eq!(
        result,
        json!("Wrote locked.json (3 bytes) (⚠ protection override: read_only, authorized code).")
    );
    assert_eq!(content_of(&file, "locked.json").unwrap(), b"[1]");
    assert_eq!(bypass_logs(&file, "locked.json"), 1);
    assert_eq!(
        file.file_read("locked.json")
            .unwrap()
            .unwrap()
            .info
            .protection,
        "read_only",
        "a bypass does not change the protection"
    );
}

#[test]
fn fil_12_owner_approved_write_is_one_time() {
    let (_dir, _path, mut file) = new_agent();
    owner_put(&mut file, "locked.md", b"v0", FileProtection::ReadOnly);

    let result = call_approved(&mut file, &model(), "fs_write", write("locked.md", "v1")).unwrap();
    assert_eq!(
        result,
        json!("Wrote locked.md (2 bytes) (⚠ protection override: read_only, owner-approved).")
    );
    assert_eq!(content_of(&file, "locked.md").unwrap(), b"v1");
    let recorded = tasks(&file);
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].1, "completed");
    assert_eq!(recorded[0].2["reason"], "protection");
    assert_eq!(recorded[0].2["protection"]["level"], "read_only");

    // The next identical write asks again; denied, it changes nothing.
    let before = digest_without_tasks(&file);
    let error = call(&mut file, &model(), "fs_write", write("locked.md", "v2")).unwrap_err();
    assert_eq!(error.code, ErrorCode::Denied);
    assert_eq!(content_of(&file, "locked.md").unwrap(), b"v1");
    assert_eq!(digest_without_tasks(&file), before);
    let recorded = tasks(&file);
    assert_eq!(recorded.len(), 2, "a second approval request");
    assert_eq!(recorded[1].1, "denied");
}

#[test]
fn fil_06_read_only_and_no_delete_files_refuse_agent_delete() {
    let (_dir, _path, mut file) = new_agent();
    common::enable(&mut file, "fs_delete");
    owner_put(&mut file, "ro.txt", b"r", FileProtection::ReadOnly);
    owner_put(&mut file, "nd.txt", b"n", FileProtection::NoDelete);
    owner_put(&mut file, "free.txt", b"f", FileProtection::None);
    for (path, level) in [("ro.txt", "read_only"), ("nd.txt", "no_delete")] {
        let args = json!({ "path": path });
        let message = format!("Cannot delete \"{path}\": file is {level}.");
        refused_write(&mut file, &code(), "fs_delete", args.clone(), &message);
        let result = call(&mut file, &authorized(), "fs_delete", args).unwrap();
        assert_eq!(
            result,
            json!(format!(
                "Deleted {path} (⚠ protection override: {level}, authorized code)."
            ))
        );
        assert!(content_of(&file, path).is_none());
    }
    let result = call(
        &mut file,
        &model(),
        "fs_delete",
        json!({ "path": "free.txt" }),
    )
    .unwrap();
    assert_eq!(result, json!("Deleted free.txt."));
    let error = refused(
        &mut file,
        &model(),
        "fs_delete",
        json!({ "path": "free.txt" }),
    );
    assert_eq!(error.code, ErrorCode::NotFound);
}

#[test]
fn fil_07_read_only_files_are_readable_by_the_agent() {
    let (_dir, _path, mut file) = new_agent();
    owner_put(&mut file, "rules.md", b"be kind", FileProtection::ReadOnly);
    let result = read_as(&mut file, &model(), "rules.md");
    assert_eq!(result["content"], "be kind");
    assert_eq!(result["protection"], "read_only");
    assert_eq!(result["mime_type"], "text/markdown");
    assert_eq!(result["size"], 7);
    let keys: Vec<&str> = result
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "path",
            "content",
            "mime_type",
            "size",
            "protection",
            "created_at",
            "updated_at"
        ]
    );
}

#[test]
fn fil_08_no_delete_files_are_writable_by_the_agent() {
    let (_dir, _path, mut file) = new_agent();
    let result = write_as(&mut file, &model(), "mind.md", "# mind\n");
    assert_eq!(result, json!("Wrote mind.md (7 bytes)."));
    assert_eq!(content_of(&file, "mind.md").unwrap(), b"# mind\n");
    assert_eq!(
        file.file_read("mind.md").unwrap().unwrap().info.protection,
        "no_delete"
    );
}

#[test]
fn fil_09_allow_protected_writes_changes_nothing() {
    let (_dir, _path, mut file) = new_agent();
    owner_put(&mut file, "locked.md", b"v0", FileProtection::ReadOnly);
    owner_config(&mut file, "security.allow_protected_writes", json!(true));
    let error = refused(&mut file, &code(), "fs_write", write("locked.md", "v1"));
    assert_eq!(error.code, ErrorCode::WriteError);
}

#[test]
fn fil_10_fil_11_agent_writes_clear_authorized_and_failed_writes_do_not() {
    let (_dir, _path, mut file) = new_agent();
    owner_put(&mut file, "lib/tool.ts", b"export {}", FileProtection::None);
    owner_put(
        &mut file,
        "lib/locked.ts",
        b"export {}",
        FileProtection::ReadOnly,
    );
    for path in ["lib/tool.ts", "lib/locked.ts"] {
        file.file_set_authorized(adf_store::Caller::Owner, path, true)
            .unwrap();
    }
    write_as(&mut file, &model(), "lib/tool.ts", "export const x = 1");
    assert!(
        !file
            .file_read("lib/tool.ts")
            .unwrap()
            .unwrap()
            .info
            .authorized
    );

    call(
        &mut file,
        &code(),
        "fs_write",
        write("lib/locked.ts", "evil"),
    )
    .unwrap_err();
    let locked = file.file_read("lib/locked.ts").unwrap().unwrap().info;
    assert!(
        locked.authorized,
        "a refused write leaves the trust in place"
    );
    assert_eq!(locked.protection, "read_only");
}

#[test]
fn fil_14_protection_parameter_applies_to_new_files_only() {
    let (_dir, _path, mut file) = new_agent();
    let mut args = write("notes/a.md", "hello");
    args["protection"] = json!("read_only");
    assert_eq!(
        call(&mut file, &model(), "fs_write", args).unwrap(),
        json!("Wrote notes/a.md (5 bytes).")
    );
    assert_eq!(
        file.file_read("notes/a.md")
            .unwrap()
            .unwrap()
            .info
            .protection,
        "read_only"
    );

    write_as(&mut file, &model(), "notes/b.md", "x");
    let mut args = write("notes/b.md", "y");
    args["protection"] = json!("read_only");
    assert_eq!(
        call(&mut file, &model(), "fs_write", args).unwrap(),
        json!(
            "Wrote notes/b.md (1 bytes). Protection stays none: the protection parameter applies only to new files."
        )
    );
    assert_eq!(
        file.file_read("notes/b.md")
            .unwrap()
            .unwrap()
            .info
            .protection,
        "none"
    );
}

#[test]
fn fil_17_fil_18_free_layout_and_size_in_bytes() {
    let (_dir, _path, mut file) = new_agent();
    for path in ["data/x.csv", "imports/a.txt", "mcp/result.json"] {
        call(&mut file, &model(), "fs_write", write(path, "€")).unwrap();
        let info = file.file_read(path).unwrap().unwrap().info;
        assert_eq!(info.size, 3, "size counts bytes of {path}");
    }
    let read = read_as(&mut file, &code(), "data/x.csv");
    assert_eq!(read["size"], 3);
    assert_eq!(read["content"], "€");
    assert_eq!(read["mime_type"], "text/csv");
}

#[test]
fn fil_19_document_md_aliases_readme() {
    let (_dir, _path, mut file) = new_agent();
    write_as(&mut file, &model(), "README.md", "# Primary\n");
    let read = read_as(&mut file, &model(), "document.md");
    assert_eq!(read["path"], "README.md");
    assert_eq!(read["content"], "# Primary\n");
    let result = write_as(&mut file, &model(), "document.md", "# Renamed\n");
    assert_eq!(result, json!("Wrote README.md (10 bytes)."));
    assert_eq!(content_of(&file, "README.md").unwrap(), b"# Renamed\n");
    assert!(
        file.file_list("document.md").unwrap().is_empty(),
        "no document.md row is created"
    );
}

#[test]
fn skills_registry_is_refused_without_an_approval_request() {
    let (_dir, _path, mut file) = new_agent();
    let before = digest(&file);
    let error = call_approved(
        &mut file,
        &model(),
        "fs_write",
        write("skills-registry.json", "[]"),
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::WriteError);
    assert_eq!(digest(&file), before, "no task: no approval could lift it");
}

// ---------------------------------------------------------------------------------------------
// fs_read

#[test]
fn tol_15_model_read_of_a_long_file_shows_a_50_line_preview() {
    let (_dir, _path, mut file) = new_agent();
    let text: String = (1..=400).map(|n| format!("line {n}\n")).collect();
    owner_put(
        &mut file,
        "data/long.txt",
        text.as_bytes(),
        FileProtection::None,
    );

    let read = read_as(&mut file, &model(), "data/long.txt");
    let head: String = (1..=50).map(|n| format!("line {n}\n")).collect();
    let tokens = text.chars().count().div_ceil(4);
    assert_eq!(
        read["content"],
        json!(format!(
            "{head}\n[Large file preview: showing lines 1-50 of 400 ({} bytes, ~{tokens} tokens). Read more with start_line/end_line.]",
            text.len()
        ))
    );
    assert_eq!(read["size"], text.len());

    // Code always gets everything.
    let read = read_as(&mut file, &code(), "data/long.txt");
    assert_eq!(read["content"], json!(text));

    // An explicit range is what the model asked for: no preview.
    let read = call(
        &mut file,
        &model(),
        "fs_read",
        json!({ "path": "data/long.txt", "start_line": 1, "end_line": 350 }),
    )
    .unwrap();
    let wanted: String = (1..=350).map(|n| format!("line {n}\n")).collect();
    assert_eq!(read["content"], json!(wanted));

    // Exactly 300 lines is not "over 300".
    let text300: String = (1..=300).map(|n| format!("l{n}\n")).collect();
    owner_put(
        &mut file,
        "data/300.txt",
        text300.as_bytes(),
        FileProtection::None,
    );
    let read = read_as(&mut file, &model(), "data/300.txt");
    assert_eq!(read["content"], json!(text300));
}

#[test]
fn tol_15_model_read_over_the_token_limit_is_truncated_with_the_full_size() {
    let (_dir, _path, mut file) = new_agent();
    owner_config(&mut file, "limits.max_file_read_tokens", json!(100));
    let text = "x".repeat(1000);
    owner_put(
        &mut file,
        "data/big.txt",
        text.as_bytes(),
        FileProtection::None,
    );
    let read = read_as(&mut file, &model(), "data/big.txt");
    assert_eq!(
        read["content"],
        json!(format!(
            "{}\n\n[Truncated: showing the first 400 of 1000 characters (~100 of ~250 tokens, limits.max_file_read_tokens). The file is 1000 bytes; read the rest with start_line/end_line.]",
            "x".repeat(400)
        ))
    );
    assert_eq!(read["size"], 1000);
    // Exactly at the limit passes untouched.
    owner_put(
        &mut file,
        "data/400.txt",
        "y".repeat(400).as_bytes(),
        FileProtection::None,
    );
    let read = read_as(&mut file, &model(), "data/400.txt");
    assert_eq!(read["content"], json!("y".repeat(400)));
    // Ranges do not escape the token limit.
    let read = call(
        &mut file,
        &model(),
        "fs_read",
        json!({ "path": "data/big.txt", "start_line": 1, "end_line": 1 }),
    )
    .unwrap();
    assert!(read["content"].as_str().unwrap().contains("[Truncated:"));
    // Code is never truncated.
    let read = read_as(&mut file, &code(), "data/big.txt");
    assert_eq!(read["content"], json!(text));
}

#[test]
fn tol_16_line_ranges_are_one_based_and_inclusive() {
    let (_dir, _path, mut file) = new_agent();
    owner_put(
        &mut file,
        "data/abc.txt",
        b"one\ntwo\nthree\nfour",
        FileProtection::None,
    );
    let read = |file: &mut AdfFile, args: Value| call(file, &code(), "fs_read", args);
    let r = read(
        &mut file,
        json!({ "path": "data/abc.txt", "start_line": 2, "end_line": 3 }),
    )
    .unwrap();
    assert_eq!(r["content"], "two\nthree\n");
    assert_eq!(r["size"], 18, "size is the whole file's");
    let r = read(
        &mut file,
        json!({ "path": "data/abc.txt", "start_line": 4 }),
    )
    .unwrap();
    assert_eq!(r["content"], "four");
    let r = read(&mut file, json!({ "path": "data/abc.txt", "end_line": 1 })).unwrap();
    assert_eq!(r["content"], "one\n");
    let r = read(
        &mut file,
        json!({ "path": "data/abc.txt", "start_line": 3, "end_line": 99 }),
    )
    .unwrap();
    assert_eq!(r["content"], "three\nfour");

    let before = digest(&file);
    for bad in [
        json!({ "path": "data/abc.txt", "start_line": 3, "end_line": 2 }),
        json!({ "path": "data/abc.txt", "start_line": 0 }),
        json!({ "path": "data/abc.txt", "start_line": 9 }),
        json!({ "path": "data/abc.txt", "start_line": "2" }),
        json!({ "path": "data/abc.txt", "offset": 2 }),
        json!({}),
    ] {
        let error = read(&mut file, bad.clone()).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidInput, "{bad}");
    }
    let error = read(&mut file, json!({ "path": "nope.txt" })).unwrap_err();
    assert_eq!(error.code, ErrorCode::NotFound);
    assert_eq!(error.message, "File not found: \"nope.txt\"");
    assert_eq!(digest(&file), before);
}

#[test]
fn tol_17_tol_23_binary_round_trips_as_base64_and_reaches_the_model_as_metadata() {
    let (_dir, _path, mut file) = new_agent();
    let png: Vec<u8> = vec![
        0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, 0xff,
    ];
    let args = json!({
        "mode": "write", "path": "img/pixel.png", "content": B64.encode(&png),
        "encoding": "base64", "mime_type": "image/png"
    });
    assert_eq!(
        call(&mut file, &code(), "fs_write", args).unwrap(),
        json!(format!(
            "Wrote img/pixel.png ({} bytes, binary).",
            png.len()
        ))
    );
    assert_eq!(content_of(&file, "img/pixel.png").unwrap(), png);

    let read = read_as(&mut file, &code(), "img/pixel.png");
    assert_eq!(read["content"], json!(B64.encode(&png)));
    assert_eq!(read["mime_type"], "image/png");
    assert_eq!(read["size"], png.len());

    let read = read_as(&mut file, &model(), "img/pixel.png");
    assert_eq!(read["content"], Value::Null);
    assert_eq!(read["mime_type"], "image/png");
    assert_eq!(read["size"], png.len());

    // Bytes that happen to be UTF-8 stay binary under a binary type.
    let args = json!({
        "mode": "write", "path": "blob.bin", "content": B64.encode(b"abc"), "encoding": "base64"
    });
    call(&mut file, &code(), "fs_write", args).unwrap();
    let read = read_as(&mut file, &code(), "blob.bin");
    assert_eq!(read["content"], json!(B64.encode(b"abc")));
    assert_eq!(read["mime_type"], "application/octet-stream");

    // A text write to an unknown extension is text.
    write_as(&mut file, &code(), "notes/TODO", "buy milk");
    let read = read_as(&mut file, &code(), "notes/TODO");
    assert_eq!(read["content"], "buy milk");
    assert_eq!(read["mime_type"], "text/plain");

    let before = digest(&file);
    let bad = json!({ "mode": "write", "path": "x.png", "content": "not base64!!", "encoding": "base64" });
    let error = call(&mut file, &code(), "fs_write", bad).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidInput);
    let ranged = json!({ "path": "img/pixel.png", "start_line": 1 });
    assert_eq!(
        call(&mut file, &code(), "fs_read", ranged)
            .unwrap_err()
            .code,
        ErrorCode::InvalidInput
    );
    let edit =
        json!({ "mode": "edit", "path": "img/pixel.png", "old_text": "PNG", "new_text": "GIF" });
    assert_eq!(
        call(&mut file, &code(), "fs_write", edit).unwrap_err().code,
        ErrorCode::InvalidInput
    );
    assert_eq!(digest(&file), before);
}

// ---------------------------------------------------------------------------------------------
// fs_write

#[test]
fn tol_18_mode_is_required_and_parameters_must_fit_it() {
    let (_dir, _path, mut file) = new_agent();
    let before = digest(&file);
    for (bad, needle) in [
        (json!({ "path": "a.md", "content": "x" }), "mode"),
        (
            json!({ "mode": "replace", "path": "a.md", "content": "x" }),
            "mode",
        ),
        (json!({ "mode": "write", "path": "a.md" }), "content"),
        (json!({ "mode": "append", "path": "a.md" }), "content"),
        (
            json!({ "mode": "write", "path": "a.md", "content": "x", "old_text": "y" }),
            "edit mode",
        ),
        (
            json!({ "mode": "edit", "path": "README.md", "content": "x" }),
            "edit mode",
        ),
        (json!({ "mode": "edit", "path": "README.md" }), "old_text"),
        (
            json!({ "mode": "edit", "path": "README.md", "old_text": "a" }),
            "new_text",
        ),
        (
            json!({ "mode": "edit", "path": "README.md", "new_text": "a" }),
            "old_text",
        ),
        (
            json!({ "mode": "edit", "path": "README.md", "old_text": "", "new_text": "a" }),
            "old_text",
        ),
        (
            json!({ "mode": "edit", "path": "README.md", "edits": [] }),
            "edits",
        ),
        (
            json!({ "mode": "edit", "path": "README.md", "old_text": "a", "new_text": "b", "edits": [{ "old_text": "c", "new_text": "d" }] }),
            "not both",
        ),
        (
            json!({ "mode": "write", "path": "", "content": "x" }),
            "path",
        ),
        (
            json!({ "mode": "write", "path": "../escape", "content": "x" }),
            "path",
        ),
        (
            json!({ "mode": "write", "path": "/abs", "content": "x" }),
            "path",
        ),
        (
            json!({ "mode": "write", "path": "a.md", "content": "x", "protection": "secret" }),
            "protection",
        ),
        (
            json!({ "mode": "write", "path": "a.md", "content": "x", "colour": "red" }),
            "colour",
        ),
    ] {
        let error = call(&mut file, &model(), "fs_write", bad.clone()).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidInput, "{bad}");
        assert!(error.message.contains(needle), "{bad}: {}", error.message);
    }
    assert_eq!(digest(&file), before);
}

#[test]
fn tol_19_write_size_cap_with_core_files_exempt() {
    let (_dir, _path, mut file) = new_agent();
    let max = 5_000_000usize;
    let error = refused(
        &mut file,
        &code(),
        "fs_write",
        write("data/x", &"a".repeat(max + 1)),
    );
    assert_eq!(error.code, ErrorCode::ToolError);
    assert_eq!(
        error.message,
        "Write rejected: data/x would be 5000001 bytes but limits.max_file_write_bytes is 5000000."
    );

    call(
        &mut file,
        &code(),
        "fs_write",
        write("data/x", &"a".repeat(max)),
    )
    .unwrap();
    let six_mb = "b".repeat(6_000_000);
    for core in ["README.md", "mind.md", "document.md"] {
        call(&mut file, &code(), "fs_write", write(core, &six_mb)).unwrap();
    }
    assert_eq!(
        file.file_read("README.md").unwrap().unwrap().info.size,
        6_000_000
    );

    // A configured cap, and append measured on the resulting size.
    owner_config(&mut file, "limits.max_file_write_bytes", json!(10));
    write_as(&mut file, &code(), "small.txt", "123456");
    let before = digest(&file);
    let append = json!({ "mode": "append", "path": "small.txt", "content": "78901" });
    let error = call(&mut file, &code(), "fs_write", append).unwrap_err();
    assert!(
        error.message.contains("would be 11 bytes"),
        "{}",
        error.message
    );
    let binary = json!({ "mode": "write", "path": "b.bin", "content": B64.encode([0u8; 11]), "encoding": "base64" });
    assert_eq!(
        call(&mut file, &code(), "fs_write", binary)
            .unwrap_err()
            .code,
        ErrorCode::ToolError
    );
    assert_eq!(digest(&file), before);
}

#[test]
fn tol_20_edit_needs_a_unique_match_unless_replace_all() {
    let (_dir, _path, mut file) = new_agent();
    owner_put(
        &mut file,
        "doc.md",
        b"draft one, draft two",
        FileProtection::None,
    );
    let edit = |old: &str, new: &str| json!({ "mode": "edit", "path": "doc.md", "old_text": old, "new_text": new });

    let before = digest(&file);
    let error = call(&mut file, &model(), "fs_write", edit("draft", "final")).unwrap_err();
    assert_eq!(error.code, ErrorCode::ToolError);
    assert_eq!(
        error.message,
        "old_text appears 2 times in doc.md. Add surrounding context to make it unique, or set replace_all."
    );
    let error = call(&mut file, &model(), "fs_write", edit("missing", "x")).unwrap_err();
    assert_eq!(
        error.message,
        "old_text not found in doc.md. Use fs_read to check the current content."
    );
    let error = call(&mut file, &model(), "fs_write", edit("one", "one")).unwrap_err();
    assert_eq!(
        error.message,
        "old_text and new_text are identical (no change)."
    );
    let error = call(&mut file, &model(), "fs_write", edit_missing_file()).unwrap_err();
    assert_eq!(error.code, ErrorCode::NotFound);
    assert_eq!(digest(&file), before);

    assert_eq!(
        call(
            &mut file,
            &model(),
            "fs_write",
            edit("draft one", "final one")
        )
        .unwrap(),
        json!("Edited doc.md (1 replacement(s)).")
    );
    let mut all = edit("draft", "final");
    all["replace_all"] = json!(true);
    // Only "draft two" is left.
    assert_eq!(
        call(&mut file, &model(), "fs_write", all).unwrap(),
        json!("Edited doc.md (1 replacement(s)).")
    );
    assert_eq!(
        content_of(&file, "doc.md").unwrap(),
        b"final one, final two"
    );
    let mut all = edit("final", "done");
    all["replace_all"] = json!(true);
    assert_eq!(
        call(&mut file, &model(), "fs_write", all).unwrap(),
        json!("Edited doc.md (2 replacement(s)).")
    );
    assert_eq!(content_of(&file, "doc.md").unwrap(), b"done one, done two");
}

fn edit_missing_file() -> Value {
    json!({ "mode": "edit", "path": "ghost.md", "old_text": "a", "new_text": "b" })
}

#[test]
fn tol_21_batch_edits_apply_in_order_and_atomically() {
    let (_dir, _path, mut file) = new_agent();
    owner_put(
        &mut file,
        "config.md",
        b"version: v1\nstatus: draft\nnote: draft",
        FileProtection::None,
    );
    let batch = |edits: Value| json!({ "mode": "edit", "path": "config.md", "edits": edits });

    for (edits, message) in [
        (
            json!([{ "old_text": "v1", "new_text": "v2" }, { "old_text": "status", "new_text": "state" }, { "old_text": "absent", "new_text": "x" }]),
            "edits[2]: old_text not found in config.md. Use fs_read to check the current content. Batch aborted, file unchanged.",
        ),
        (
            json!([{ "old_text": "v1", "new_text": "v2" }, { "old_text": "draft", "new_text": "final" }]),
            "edits[1]: old_text appears 2 times in config.md. Add surrounding context to make it unique, or set replace_all. Batch aborted, file unchanged.",
        ),
        (
            json!([{ "old_text": "v1", "new_text": "v2" }, { "old_text": "note", "new_text": "note" }]),
            "edits[1]: old_text and new_text are identical (no change). Batch aborted, file unchanged.",
        ),
        (
            // In order: the second edit no longer finds what the first replaced.
            json!([{ "old_text": "v1", "new_text": "v2" }, { "old_text": "v1", "new_text": "v3" }]),
            "edits[1]: old_text not found in config.md. Use fs_read to check the current content. Batch aborted, file unchanged.",
        ),
    ] {
        let error = refused(&mut file, &model(), "fs_write", batch(edits));
        assert_eq!(error.message, message);
    }

    let result = call(
        &mut file,
        &model(),
        "fs_write",
        batch(json!([
            { "old_text": "v1", "new_text": "v2" },
            { "old_text": "v2", "new_text": "v3" },
            { "old_text": "draft", "new_text": "final", "replace_all": true }
        ])),
    )
    .unwrap();
    assert_eq!(
        result,
        json!("Edited config.md: applied 3 edits, 4 replacement(s).")
    );
    assert_eq!(
        content_of(&file, "config.md").unwrap(),
        b"version: v3\nstatus: final\nnote: final"
    );
}

#[test]
fn tol_22_appends_to_one_path_never_lose_each_other() {
    let (_dir, _path, mut file) = new_agent();
    let first = call(
        &mut file,
        &code(),
        "fs_write",
        json!({ "mode": "append", "path": "run.log", "content": "0\n" }),
    )
    .unwrap();
    assert_eq!(first, json!("Appended 2 bytes to run.log (now 2 bytes)."));
    for n in 1..100 {
        call(
            &mut file,
            &code(),
            "fs_write",
            json!({ "mode": "append", "path": "run.log", "content": format!("{n}\n") }),
        )
        .unwrap();
    }
    let expected: String = (0..100).map(|n| format!("{n}\n")).collect();
    assert_eq!(content_of(&file, "run.log").unwrap(), expected.as_bytes());
}

// ---------------------------------------------------------------------------------------------
// fs_list, fs_delete audit

#[test]
fn tol_24_list_filters_by_prefix_and_reports_protection() {
    let (_dir, _path, mut file) = new_agent();
    owner_put(&mut file, "lib/a.ts", b"a", FileProtection::ReadOnly);
    owner_put(&mut file, "lib/b.ts", b"bb", FileProtection::None);
    owner_put(&mut file, "library.md", b"c", FileProtection::None);
    let listed = call(&mut file, &model(), "fs_list", json!({ "prefix": "lib/" })).unwrap();
    let rows = listed.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["path"], "lib/a.ts");
    assert_eq!(rows[0]["protection"], "read_only");
    assert_eq!(rows[0]["size"], 1);
    assert_eq!(rows[1]["path"], "lib/b.ts");
    assert_eq!(rows[1]["protection"], "none");
    assert!(rows[0].get("content").is_none(), "metadata only");

    let all = call(&mut file, &model(), "fs_list", json!({})).unwrap();
    let paths: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    for expected in ["README.md", "mind.md", "soul.md", "lib/a.ts", "library.md"] {
        assert!(paths.contains(&expected), "{expected} in {paths:?}");
    }
    let readme = all
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == "README.md")
        .unwrap();
    assert_eq!(readme["protection"], "no_delete");
}

#[test]
fn tol_25_delete_snapshots_to_audit_when_audit_files_is_on() {
    let (_dir, _path, mut file) = new_agent();
    common::enable(&mut file, "fs_delete");
    owner_put(
        &mut file,
        "data/old.csv",
        b"a,b\n1,2\n",
        FileProtection::None,
    );
    owner_put(&mut file, "data/quiet.csv", b"x", FileProtection::None);
    call(
        &mut file,
        &model(),
        "fs_delete",
        json!({ "path": "data/quiet.csv" }),
    )
    .unwrap();
    assert!(
        file.audit_list().unwrap().is_empty(),
        "audit.files is off by default"
    );

    owner_config(&mut file, "context.audit.files", json!(true));
    call(
        &mut file,
        &model(),
        "fs_delete",
        json!({ "path": "data/old.csv" }),
    )
    .unwrap();
    let audits = file.audit_list().unwrap();
    assert_eq!(audits.len(), 1);
    assert_eq!(audits[0].source, "file");
    assert_eq!(audits[0].r#ref.as_deref(), Some("data/old.csv"));
    let snapshot = file.audit_data(audits[0].id).unwrap();
    assert_eq!(snapshot["content_base64"], json!(B64.encode(b"a,b\n1,2\n")));
}
