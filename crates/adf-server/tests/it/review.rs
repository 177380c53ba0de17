//! The review gate and tracked directories, end to end over HTTP on 127.0.0.1 with real agent
//! files: `GET /agents/review` summarizes what a file can do without changing a byte of it,
//! `POST /agents/load {requireReview}` answers the reference's 403 `AGENT_REVIEW_REQUIRED`
//! until the owner accepts the file's current digest, a security-relevant change needs review
//! again, and `POST /agents/autostart` starts only reviewed `autostart: true` agents within
//! `maxDepth`, reporting what it skipped and what failed.
use crate::common;

use std::path::{Path, PathBuf};

use adf_store::{AdfFile, Caller, ConfigAction, CreateOptions, FileWrite};
use common::Harness;
use reqwest::Method;
use serde_json::{Value, json};

const LAMBDA: &str = "export async function main(event) { return event; }\n";

/// Creates `dir/<rel>` as an agent with id `id`: `autostart` as given, an `on_startup` system
/// lambda, and `lib/trusted.ts` authorized.
fn new_agent(dir: &Path, rel: &str, id: &str, autostart: bool) -> PathBuf {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut file = AdfFile::create(
        &path,
        &CreateOptions {
            name: Some(id.to_owned()),
            id: Some(id.to_owned()),
            ..CreateOptions::default()
        },
    )
    .unwrap();
    for source in ["lib/trusted.ts", "lib/start.ts"] {
        file.file_write(
            Caller::Owner,
            source,
            LAMBDA.as_bytes(),
            &FileWrite::default(),
        )
        .unwrap();
    }
    file.file_set_authorized(Caller::Owner, "lib/trusted.ts", true)
        .unwrap();
    let config = [
        ("autostart", json!(autostart)),
        (
            "triggers",
            json!({ "on_startup": { "enabled": true, "targets": [{ "scope": "system", "lambda": "lib/start.ts:main" }] } }),
        ),
    ];
    for (key, value) in config {
        file.config_set_path(Caller::Owner, key, ConfigAction::Set, value)
            .unwrap();
    }
    file.close().unwrap();
    path
}

fn edit(path: &Path, change: impl FnOnce(&mut AdfFile)) {
    let mut file = AdfFile::open(path).unwrap();
    change(&mut file);
    file.close().unwrap();
}

fn review_path(path: &Path) -> String {
    format!(
        "/agents/review?filePath={}",
        adf_server::client::encode(&path.display().to_string())
    )
}

async fn load(h: &Harness, path: &Path, require_review: bool) -> (u16, Value) {
    h.client
        .raw(
            Method::POST,
            "/agents/load",
            Some(&json!({ "filePath": path, "requireReview": require_review })),
        )
        .await
        .unwrap()
}

async fn loaded_ids(h: &Harness) -> Vec<String> {
    let list = h.client.get("/agents").await.unwrap();
    let mut ids: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreviewed_load_with_require_review_is_refused_until_the_owner_accepts_and_review_never_changes_the_file()
 {
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), "agents/gated.adf", "gated01", true);
    let canonical = std::fs::canonicalize(&path).unwrap();
    let before = std::fs::read(&path).unwrap();

    let info = h.client.get(&review_path(&path)).await.unwrap();
    assert_eq!(info["agentId"], "gated01");
    assert_eq!(info["filePath"], canonical.display().to_string());
    assert_eq!(info["reviewed"], false);
    let summary = &info["summary"];
    assert_eq!(summary["name"], "gated01");
    assert_eq!(summary["autostart"], true);
    assert_eq!(
        summary["triggers"],
        json!([{ "scope": "system", "lambda": "lib/start.ts:main", "event": "on_startup" }])
    );
    let authorized = summary["authorizedFiles"].as_array().unwrap();
    assert_eq!(authorized.len(), 1, "{summary}");
    assert_eq!(authorized[0]["path"], "lib/trusted.ts");
    assert_eq!(authorized[0]["sha256"].as_str().unwrap().len(), 64);
    for key in [
        "enabledTools",
        "restrictedTools",
        "timers",
        "umbilicalTaps",
        "serving",
        "mcpServers",
        "handle",
        "digest",
    ] {
        assert!(summary.get(key).is_some(), "summary lacks {key}: {summary}");
    }

    // The reference's 403 body, and nothing loaded.
    let (status, body) = load(&h, &path, true).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["code"], "AGENT_REVIEW_REQUIRED");
    assert_eq!(body["agentId"], "gated01");
    assert_eq!(body["filePath"], canonical.display().to_string());
    assert!(body["error"].as_str().unwrap().contains("review"), "{body}");
    assert!(loaded_ids(&h).await.is_empty());

    let accepted = h
        .client
        .post("/agents/review/accept", Some(&json!({ "filePath": path })))
        .await
        .unwrap();
    assert_eq!(accepted["reviewed"], true);
    assert_eq!(accepted["summary"]["digest"], summary["digest"]);
    // Reviewing read the file; it never wrote it (no migration, no marker, no sidecar).
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert!(common::sidecars(&path).is_empty());
    // The record is in the home's settings, keyed by the config id.
    let settings = h.client.get("/settings").await.unwrap();
    assert_eq!(
        settings["settings"]["reviewedAgents"]["gated01"]["digest"],
        summary["digest"]
    );

    let (status, body) = load(&h, &path, true).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["id"], "gated01");
    assert_eq!(loaded_ids(&h).await, ["gated01"]);
    // Reviewing a loaded file reads it through its agent and still says reviewed.
    let info = h.client.get(&review_path(&path)).await.unwrap();
    assert_eq!(info["reviewed"], true);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_security_relevant_change_needs_review_again_and_a_load_without_require_review_is_not_gated()
 {
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), "agents/changing.adf", "changing01", true);
    let first = h
        .client
        .post("/agents/review/accept", Some(&json!({ "filePath": path })))
        .await
        .unwrap();
    assert_eq!(first["reviewed"], true);

    // A new name is not what the gate is about: still reviewed.
    edit(&path, |file| {
        file.config_set_path(Caller::Owner, "name", ConfigAction::Set, json!("renamed"))
            .unwrap();
    });
    let info = h.client.get(&review_path(&path)).await.unwrap();
    assert_eq!(info["reviewed"], true, "{info}");
    assert_eq!(info["summary"]["name"], "renamed");

    // New code in an authorized file: review again.
    edit(&path, |file| {
        file.file_write(
            Caller::Owner,
            "lib/trusted.ts",
            b"export async function main() { return 'changed'; }\n",
            &FileWrite::default(),
        )
        .unwrap();
    });
    let info = h.client.get(&review_path(&path)).await.unwrap();
    assert_eq!(info["reviewed"], false, "{info}");
    assert_ne!(info["summary"]["digest"], first["summary"]["digest"]);
    let (status, body) = load(&h, &path, true).await;
    assert_eq!(status, 403, "{body}");
    assert!(loaded_ids(&h).await.is_empty());

    // Accepted again, then a new trigger target: review again.
    h.client
        .post("/agents/review/accept", Some(&json!({ "filePath": path })))
        .await
        .unwrap();
    edit(&path, |file| {
        file.config_set_path(
            Caller::Owner,
            "triggers.on_file_change",
            ConfigAction::Set,
            json!({ "enabled": true, "targets": [{ "scope": "system", "lambda": "lib/trusted.ts:main" }] }),
        )
        .unwrap();
    });
    let info = h.client.get(&review_path(&path)).await.unwrap();
    assert_eq!(info["reviewed"], false, "{info}");

    // Without requireReview an owner's load is not gated (as in the reference).
    let (status, body) = load(&h, &path, false).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(loaded_ids(&h).await, ["changing01"]);

    // Bad requests.
    crate::common::assert_status(&h, Method::GET, "/agents/review", None, 400).await;
    crate::common::assert_status(
        &h,
        Method::POST,
        "/agents/review/accept",
        Some(&json!({})),
        400,
    )
    .await;
    let missing = h.dir.path().join("agents/missing.adf");
    crate::common::assert_status(&h, Method::GET, &review_path(&missing), None, 404).await;
    assert!(!missing.exists(), "a review never creates a file");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_autostart_scan_starts_only_reviewed_autostart_agents_within_max_depth_and_reports_the_rest()
 {
    let h = Harness::start().await;
    let root = h.dir.path().join("tracked");
    let top = new_agent(&root, "top.adf", "top01", true);
    let nested = new_agent(&root, "team/nested.adf", "nested01", true);
    let deep = new_agent(&root, "team/far/away/deep.adf", "deep01", true);
    let unreviewed = new_agent(&root, "team/unreviewed.adf", "unrev01", true);
    let manual = new_agent(&root, "manual.adf", "manual01", false);
    std::fs::write(root.join("broken.adf"), b"not an agent file").unwrap();
    std::fs::write(root.join("notes.txt"), b"ignored").unwrap();
    for path in [&top, &nested, &deep, &manual] {
        h.client
            .post("/agents/review/accept", Some(&json!({ "filePath": path })))
            .await
            .unwrap();
    }
    let bytes_before = std::fs::read(&unreviewed).unwrap();

    let report = h
        .client
        .post(
            "/agents/autostart",
            Some(&json!({ "trackedDirs": [root], "maxDepth": 1 })),
        )
        .await
        .unwrap();
    // deep.adf is three levels down: not scanned with maxDepth 1.
    assert_eq!(report["scanned"], 5, "{report}");
    let ids = |list: &Value| {
        let mut ids: Vec<String> = list
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["agentId"].as_str().map(str::to_owned))
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&report["started"]), ["nested01", "top01"], "{report}");
    assert_eq!(ids(&report["skipped"]), ["manual01", "unrev01"], "{report}");
    let reasons: Vec<&str> = report["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["reason"].as_str().unwrap())
        .collect();
    assert!(reasons.contains(&"review required") && reasons.contains(&"autostart is off"));
    let failed = report["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 1, "{report}");
    assert!(
        failed[0]["filePath"]
            .as_str()
            .unwrap()
            .ends_with("broken.adf")
    );
    assert_eq!(loaded_ids(&h).await, ["nested01", "top01"]);
    assert_eq!(std::fs::read(&unreviewed).unwrap(), bytes_before);

    // A second, deeper scan starts the deep one and never loads a file twice.
    let again = h
        .client
        .post(
            "/agents/autostart",
            Some(&json!({ "trackedDirs": [root, root.join("team")], "maxDepth": 5 })),
        )
        .await
        .unwrap();
    assert_eq!(ids(&again["started"]), ["deep01"], "{again}");
    let already: Vec<&Value> = again["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "already loaded")
        .collect();
    assert_eq!(already.len(), 2, "{again}");
    assert_eq!(loaded_ids(&h).await, ["deep01", "nested01", "top01"]);

    // A missing tracked directory is reported, not fatal; a bad body is a 400.
    let report = h
        .client
        .post(
            "/agents/autostart",
            Some(&json!({ "trackedDirs": [h.dir.path().join("nowhere")] })),
        )
        .await
        .unwrap();
    assert_eq!(report["scanned"], 0);
    assert_eq!(report["failed"].as_array().unwrap().len(), 1);
    let (status, _) = h
        .client
        .raw(
            Method::POST,
            "/agents/autostart",
            Some(&json!({ "trackedDirs": "nope" })),
        )
        .await
        .unwrap();
    assert_eq!(status, 400);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracked_directories_come_from_the_settings_start_reviewed_agents_and_serve_start_by_id() {
    let h = Harness::start().await;
    let root = h.dir.path().join("tracked");
    let path = new_agent(&root, "one.adf", "tracked01", true);
    h.client
        .call(
            Method::PUT,
            "/settings/trackedDirectories",
            Some(&json!({ "value": [root] })),
        )
        .await
        .unwrap();
    let daemon = &h.server.daemon;
    assert_eq!(daemon.tracked_directories(), std::slice::from_ref(&root));
    let report = daemon
        .autostart(
            &daemon.tracked_directories(),
            adf_server::review::DEFAULT_MAX_DEPTH,
        )
        .await;
    assert!(report.started.is_empty(), "not reviewed yet: {report:?}");
    daemon.accept_review(&path).await.unwrap();
    let report = daemon
        .autostart(
            &daemon.tracked_directories(),
            adf_server::review::DEFAULT_MAX_DEPTH,
        )
        .await;
    assert_eq!(report.started.len(), 1, "{report:?}");
    assert_eq!(loaded_ids(&h).await, ["tracked01"]);

    // `POST /agents/{id}/start` of an agent that is not loaded finds it in a tracked
    // directory by id, handle or name (an explicit start: no review needed).
    new_agent(&root, "deeper/other.adf", "other01", false);
    let (status, body) = h
        .client
        .raw(Method::POST, "/agents/other01/start", None)
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["loaded"], true);
    assert_eq!(body["agent"]["id"], "other01");
    assert_eq!(loaded_ids(&h).await, ["other01", "tracked01"]);
    crate::common::assert_status(&h, Method::POST, "/agents/nobody/start", None, 404).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_and_load_name_the_configured_sections_this_runtime_does_not_run() {
    let h = Harness::start().await;
    let path = new_agent(h.dir.path(), "agents/declared.adf", "declared01", false);
    let plain = h.client.get(&review_path(&path)).await.unwrap();
    assert_eq!(plain["summary"]["notRunYet"], json!([]));

    edit(&path, |file| {
        file.config_set_path(
            Caller::Owner,
            "pre_llm_hook",
            ConfigAction::Set,
            json!("lib/trusted.ts:main"),
        )
        .unwrap();
    });
    let info = h.client.get(&review_path(&path)).await.unwrap();
    let not_run = info["summary"]["notRunYet"].as_array().unwrap();
    assert_eq!(not_run.len(), 1, "{not_run:?}");
    assert_eq!(not_run[0]["path"], "pre_llm_hook");
    assert!(
        not_run[0]["what"].as_str().unwrap().contains("not called"),
        "{not_run:?}"
    );

    let (status, body) = load(&h, &path, false).await;
    assert_eq!(status, 200, "{body}");
    let agent = h.server.daemon.agents().remove(0);
    let logged: Vec<(String, String)> = common::logs_of(&agent, "runtime")
        .await
        .into_iter()
        .filter(|row| row.event.as_deref() == Some("config_not_run"))
        .map(|row| (row.level, row.message))
        .collect();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0].0, "warn");
    assert!(logged[0].1.contains("pre_llm_hook"), "{}", logged[0].1);
    h.stop().await;
}
