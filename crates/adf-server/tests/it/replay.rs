//! Replays the reference daemon's recorded requests (`daemon-transcripts/http-transcript.json`)
//! that concern the operations this daemon implements, against our daemon over real HTTP, and
//! compares status codes and response shapes (keys and JSON types, not values).
//!
//! Shape rule: every key of the reference body must exist in ours with the same JSON type
//! (all numbers are one type); a `null` in the reference matches any type (it depends on
//! state); in arrays, a key only some reference elements have is optional (timers list
//! `lambda`/`last_fired_at`/`locked` only when set, inbox rows `meta`/`source_context`).
//! Extra keys in our answers are allowed.

use crate::common;

use std::collections::BTreeSet;

use reqwest::Method;
use serde_json::{Map, Value};

use common::{Harness, transcripts};

/// Transcript entries left out, with why: operations this daemon does not implement yet.
const OUT_OF_SCOPE: &[(usize, &str)] = &[
    (
        34,
        "GET /umbilical/events: the umbilical replay window belongs to the serving/WebSocket work",
    ),
    (
        37,
        "GET /ws: WebSocket diagnostics belong to the serving/WebSocket work",
    ),
];

/// Deliberate differences from the reference: (entry, our status, why).
const DIFFERENCES: &[(usize, u16, &str)] = &[
    (
        7,
        200,
        "GET /chat?limit=4: same status and top-level shape, but each uiLog entry's metadata depends on the rows it shows (the fixture holds 7 rows, the reference's daemon had 14 by then); tests/hil.rs checks the entries",
    ),
    (
        28,
        400,
        "GET /tables/adf_inbox: 400 (only local_* tables are read there), the reference answers 500 \"Invalid table name\"",
    ),
    (
        35,
        200,
        "GET /agents/{id}/runtime: mcp and ws list what the file configures; their live states (mcp.states, ws.active) come from the MCP and WebSocket subsystems, not merged on this branch",
    ),
    (
        39,
        200,
        "GET /diagnostics: ws.configured only (live WebSocket counts belong to the WebSocket subsystem)",
    ),
    (
        40,
        200,
        "GET /runtime/settings: autoCompactThreshold is null when the settings do not set it (this runtime has no daemon-wide compaction threshold to report)",
    ),
    (
        41,
        200,
        "GET /runtime/usage: the usage map is keyed by day, provider and model, so its keys are data (tests/api_ops.rs checks the totals); source is adf_loop of the loaded agents",
    ),
    (
        44,
        200,
        "GET /runtime/network: host lists the hostname and the daemon's listen URL (no interface enumeration), no websocket counts, no mesh debug block; mesh agents carry messaging/serving facts but not trackedDirRoot/nextWake* labels",
    ),
    (
        53,
        409,
        "DELETE /files/content of a read_only file: 409 FILE_PROTECTED {error, success: false} unless force=true; the reference answers 200 {success: false}",
    ),
    (
        54,
        409,
        "DELETE /files/content of README.md (no_delete): same as entry 53",
    ),
    (
        61,
        400,
        "POST /timers with a bad mode: 400 (bad input), the reference answers 500 \"Invalid mode\"",
    ),
    (
        65,
        200,
        "POST /state: the reference answers 500 because its executor was left stopped by an earlier abort; ours moves the display state",
    ),
    (67, 200, "POST /state: same as entry 65"),
    (
        70,
        503,
        "POST /chat: the fixture configures no provider, so 503 (no model reachable) instead of accepting a turn that cannot run",
    ),
    (
        71,
        200,
        "GET /agents/review: same status; the summary is this daemon's own review digest (crate::review: what the file can do, tools, triggers, code), not the reference's keys",
    ),
    (
        74,
        404,
        "POST /agents/load of a missing path: 404 and nothing created; the reference creates a 0-byte file and answers 500",
    ),
];

/// Nullable columns whose value depends on which rows exist (the reference's newest log
/// rows came from timer fires that have a `target` and `data`; ours from the fixture's).
const NULLABLE: &[&str] = &["target", "data", "result", "error", "completed_at"];

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn shape_diff(reference: &Value, ours: &Value, at: &str, out: &mut Vec<String>) {
    match (reference, ours) {
        (Value::Null, _) => {}
        (Value::Object(r), Value::Object(o)) => {
            for (key, rv) in r {
                match o.get(key) {
                    None => out.push(format!("{at}.{key}: missing")),
                    Some(ov) => shape_diff(rv, ov, &format!("{at}.{key}"), out),
                }
            }
        }
        (Value::Array(r), Value::Array(o)) => {
            if o.is_empty() && !r.is_empty() {
                out.push(format!(
                    "{at}: ours is empty, the reference has {}",
                    r.len()
                ));
            }
            let objects: Vec<&Map<String, Value>> = r.iter().filter_map(Value::as_object).collect();
            let required: Option<BTreeSet<&String>> = (objects.len() == r.len() && !r.is_empty())
                .then(|| {
                    objects
                        .iter()
                        .map(|m| m.keys().collect::<BTreeSet<_>>())
                        .reduce(|a, b| a.intersection(&b).copied().collect())
                        .unwrap_or_default()
                });
            for (i, (rv, ov)) in r.iter().zip(o.iter()).enumerate() {
                let rv = match (&required, rv) {
                    (Some(keys), Value::Object(m)) => Value::Object(
                        m.iter()
                            .filter(|(k, _)| keys.contains(k))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect(),
                    ),
                    _ => rv.clone(),
                };
                shape_diff(&rv, ov, &format!("{at}[{i}]"), out);
            }
        }
        (r, o) if json_type(r) == json_type(o) => {}
        (_, Value::Null) if NULLABLE.iter().any(|k| at.ends_with(&format!(".{k}"))) => {}
        (r, o) => out.push(format!(
            "{at}: reference {} vs ours {}",
            json_type(r),
            json_type(o)
        )),
    }
}

#[test]
fn shape_rule_accepts_optional_keys_and_flags_missing_ones() {
    let reference =
        serde_json::json!({"a": 1, "list": [{"x": 1, "opt": true}, {"x": 2}], "n": null});
    let good = serde_json::json!({"a": 2.5, "list": [{"x": 1}, {"x": 3}], "n": "any", "extra": 1});
    let mut out = Vec::new();
    shape_diff(&reference, &good, "$", &mut out);
    assert!(out.is_empty(), "{out:?}");
    let bad = serde_json::json!({"a": "1", "list": [{"y": 1}]});
    shape_diff(&reference, &bad, "$", &mut out);
    assert_eq!(out.len(), 3, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_reference_transcript_status_codes_and_shapes() {
    let harness = Harness::start().await;
    // The reference daemon had meshPort in its settings (entry 45 reads it) and the mock
    // provider the transcripts' README describes (its port is never reached here).
    std::fs::write(
        harness.dir.path().join("home/settings.json"),
        r#"{"meshPort": 7295, "providers": [{"id": "mock-local", "type": "openai-compatible", "name": "Mock", "baseUrl": "http://127.0.0.1:9/v1", "apiKey": "x", "defaultModel": "mock-model"}]}"#,
    )
    .unwrap();
    let e2e = harness.copy_fixture("populated-runtime.adf", "e2e.adf");
    // The transcript was recorded while the fixture's `once` and cron timers were still in the
    // future; today they are overdue and the scheduler would fire them on load (moving them in
    // the timer list). Put them back in the future, as they were when the reference ran.
    {
        let now = adf_store::time::now_ms();
        let file = adf_store::AdfFile::open(&e2e).unwrap();
        let tables = adf_store::test_support::tables(&file);
        for id in [1, 3] {
            let timer = adf_store::test_support::RowsWhere::new("id", id);
            let wake = serde_json::json!(now + id * 3_600_000);
            let changed = tables.set_column("adf_timers", &timer, "next_wake_at", &wake);
            assert_eq!(changed.unwrap(), 1);
        }
        let once = adf_store::test_support::RowsWhere::new("id", 1);
        let rows = tables.rows("adf_timers").unwrap();
        let row = rows.iter().find(|row| row["id"] == 1).unwrap();
        let mut schedule: Value =
            serde_json::from_str(row["schedule_json"].as_str().unwrap()).unwrap();
        schedule["at"] = serde_json::json!(now + 3_600_000);
        let schedule = Value::from(schedule.to_string());
        let changed = tables.set_column("adf_timers", &once, "schedule_json", &schedule);
        assert_eq!(changed.unwrap(), 1);
        file.close().unwrap();
    }
    let agents_dir = format!("{}/", harness.dir.path().join("agents").display());
    let (status, _) = harness
        .client
        .raw(
            Method::POST,
            "/agents/load",
            Some(&serde_json::json!({ "filePath": e2e })),
        )
        .await
        .unwrap();
    assert_eq!(status, 200);

    let text = std::fs::read_to_string(transcripts().join("http-transcript.json")).unwrap();
    let entries: Vec<Value> = serde_json::from_str(&text).unwrap();
    let mut failures = Vec::new();
    let mut replayed = 0;
    for (index, entry) in entries.iter().enumerate() {
        if OUT_OF_SCOPE.iter().any(|(i, _)| *i == index) {
            continue;
        }
        let method = Method::from_bytes(entry["method"].as_str().unwrap().as_bytes()).unwrap();
        let path = entry["path"]
            .as_str()
            .unwrap()
            .replace("/home/owner/refdaemon/agents/", &agents_dir);
        let body = match &entry["request_body"] {
            Value::Null => None,
            other => Some(
                serde_json::from_str::<Value>(
                    &other
                        .to_string()
                        .replace("/home/owner/refdaemon/agents/", &agents_dir),
                )
                .unwrap(),
            ),
        };
        let (status, ours) = harness
            .client
            .raw(method.clone(), &path, body.as_ref())
            .await
            .unwrap();
        replayed += 1;
        let expected = DIFFERENCES
            .iter()
            .find(|(i, _, _)| *i == index)
            .map_or(entry["status"].as_u64().unwrap() as u16, |(_, s, _)| *s);
        if status != expected {
            failures.push(format!(
                "#{index} {method} {path}: status {status}, expected {expected}; body {ours}"
            ));
            continue;
        }
        if DIFFERENCES.iter().any(|(i, _, _)| *i == index) {
            // A documented difference: our body is an error object or a success object.
            assert!(ours.is_object(), "#{index}: {ours}");
            continue;
        }
        let mut diffs = Vec::new();
        shape_diff(&entry["response"], &ours, "$", &mut diffs);
        if !diffs.is_empty() {
            failures.push(format!("#{index} {method} {path}: {}", diffs.join("; ")));
        }
    }
    assert!(replayed >= 45, "replayed only {replayed} entries");
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Missing path: nothing created.
    assert!(!harness.dir.path().join("agents/missing.adf").exists());
    let dir = harness.stop().await;
    assert!(common::sidecars(&dir.path().join("agents/e2e.adf")).is_empty());
}
