//! Replays all of the reference daemon's recorded requests
//! (`daemon-transcripts/http-transcript.json`) against our daemon over real HTTP, in order, and
//! compares each answer strictly with the reference's: the status code, and the shape — per
//! object, the keys missing AND the keys extra, recursively, and every value's JSON type (all
//! numbers are one type; `null` is a type of its own). Array elements are compared pairwise.
//!
//! Each entry's status/shape agreement is printed with the totals. The agreement counts are a
//! floor (a regression fails), and every entry that does not agree must be listed, with its
//! reason, in `docs/reference/api-differences.md` ("Replay of the recorded traffic"), and every
//! entry listed there must still differ — so the document stays true both ways.
use crate::common;

use std::collections::BTreeSet;

use reqwest::Method;
use serde_json::Value;

use common::{Harness, transcripts};

/// Entries answering with the reference's status, and with its status and shape: floors.
const STATUS_AGREEMENT_FLOOR: usize = 66;
const SHAPE_AGREEMENT_FLOOR: usize = 52;

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
        (Value::Object(r), Value::Object(o)) => {
            for (key, rv) in r {
                match o.get(key) {
                    None => out.push(format!("{at}.{key}: missing")),
                    Some(ov) => shape_diff(rv, ov, &format!("{at}.{key}"), out),
                }
            }
            for key in o.keys().filter(|key| !r.contains_key(*key)) {
                out.push(format!("{at}.{key}: extra"));
            }
        }
        (Value::Array(r), Value::Array(o)) => {
            if o.is_empty() != r.is_empty() {
                out.push(format!(
                    "{at}: ours has {} elements, the reference {}",
                    o.len(),
                    r.len()
                ));
            }
            for (i, (rv, ov)) in r.iter().zip(o.iter()).enumerate() {
                shape_diff(rv, ov, &format!("{at}[{i}]"), out);
            }
        }
        (r, o) if json_type(r) == json_type(o) => {}
        (r, o) => out.push(format!(
            "{at}: reference {} vs ours {}",
            json_type(r),
            json_type(o)
        )),
    }
}

/// The entry numbers `docs/reference/api-differences.md` lists in its replay table (rows
/// beginning `| #N |`).
fn documented_entries() -> BTreeSet<usize> {
    let doc = common::repo_root().join("docs/reference/api-differences.md");
    let text = std::fs::read_to_string(doc).unwrap();
    let section = text
        .split("## Replay of the recorded traffic")
        .nth(1)
        .expect("api-differences.md has a replay section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| #"))
        .filter_map(|rest| rest.split(' ').next()?.parse().ok())
        .collect()
}

#[test]
fn strict_shape_rule_flags_missing_extra_and_type_changes() {
    let reference =
        serde_json::json!({"a": 1, "list": [{"x": 1, "opt": true}, {"x": 2}], "n": null});
    let same = serde_json::json!({"a": 2.5, "list": [{"x": 1, "opt": false}, {"x": 3}], "n": null});
    let mut out = Vec::new();
    shape_diff(&reference, &same, "$", &mut out);
    assert!(out.is_empty(), "{out:?}");
    // The old rule intersected keys across rows and let `opt` go missing, and allowed extras.
    let loose = serde_json::json!({"a": 1, "list": [{"x": 1}, {"x": 2}], "n": null, "extra": 1});
    shape_diff(&reference, &loose, "$", &mut out);
    assert_eq!(out, ["$.list[0].opt: missing", "$.extra: extra"]);
    out.clear();
    let bad = serde_json::json!({"a": "1", "list": [], "n": "text"});
    shape_diff(&reference, &bad, "$", &mut out);
    assert_eq!(out.len(), 3, "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_reference_transcript_status_codes_and_shapes() {
    let harness = Harness::start().await;
    // The mock provider the transcripts' README describes (its port is never reached here).
    // No meshPort: entry 45 must answer the reference's default without it.
    std::fs::write(
        harness.dir.path().join("home/settings.json"),
        r#"{"providers": [{"id": "mock-local", "type": "openai-compatible", "name": "Mock", "baseUrl": "http://127.0.0.1:9/v1", "apiKey": "x", "defaultModel": "mock-model"}]}"#,
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
    let mut report = Vec::new();
    let mut differing = BTreeSet::new();
    let mut token_diffs = Vec::new();
    let (mut same_status, mut same_shape) = (0, 0);
    for (index, entry) in entries.iter().enumerate() {
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
        let expected = entry["status"].as_u64().unwrap() as u16;
        let verdict = if status != expected {
            differing.insert(index);
            format!("status DIFF (reference {expected}, ours {status})")
        } else {
            same_status += 1;
            let mut diffs = Vec::new();
            shape_diff(&entry["response"], &ours, "$", &mut diffs);
            if diffs.is_empty() {
                same_shape += 1;
                "status same, shape same".to_owned()
            } else {
                differing.insert(index);
                // Entries 5 and 7 differ by their rows (data), but a loop row's `tokens` object
                // itself must always have the reference's keys, stored or not.
                token_diffs.extend(
                    diffs
                        .iter()
                        .filter(|diff| diff.contains(".tokens."))
                        .map(|diff| format!("#{index} {diff}")),
                );
                format!("status same, shape DIFF: {}", diffs.join("; "))
            }
        };
        report.push(format!("#{index} {method} {}: {verdict}", entry["path"]));
    }
    let total = entries.len();
    println!("{}", report.join("\n"));
    println!(
        "replay: {same_status}/{total} same status, {same_shape}/{total} same status and shape"
    );
    assert_eq!(total, 75, "the transcript holds 75 recorded requests");
    assert!(
        same_status >= STATUS_AGREEMENT_FLOOR && same_shape >= SHAPE_AGREEMENT_FLOOR,
        "agreement fell: {same_status} status (floor {STATUS_AGREEMENT_FLOOR}), {same_shape} shape (floor {SHAPE_AGREEMENT_FLOOR})\n{}",
        report.join("\n")
    );
    assert!(token_diffs.is_empty(), "loop tokens shape: {token_diffs:?}");
    let documented = documented_entries();
    let undocumented: Vec<&String> = differing
        .iter()
        .filter(|i| !documented.contains(i))
        .map(|i| &report[*i])
        .collect();
    let stale: Vec<&usize> = documented.difference(&differing).collect();
    assert!(
        undocumented.is_empty() && stale.is_empty(),
        "api-differences.md must list exactly the differing entries.\nNot listed: {undocumented:#?}\nListed but now agreeing (drop them, raise the floors): {stale:?}"
    );

    // Missing path: nothing created.
    assert!(!harness.dir.path().join("agents/missing.adf").exists());
    let dir = harness.stop().await;
    assert!(common::sidecars(&dir.path().join("agents/e2e.adf")).is_empty());
}
