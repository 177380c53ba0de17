//! Timer tools (`sys_set_timer`, `sys_list_timers`, `sys_delete_timer`) and the pure schedule
//! resolver they share with the scheduler (spec §7.6, §7.7, tools guide "Timer Tools").
use crate::common;

use adf_runtime::schedule::{Schedule, next_fire_after_in, parse_cron};
use adf_runtime::tools::{ErrorCode, ToolCaller};
use adf_store::AdfFile;
use adf_store::time::now_ms;
use chrono::{FixedOffset, Utc};
use common::{authorized, call, code, digest, model, new_agent, refused};
use serde_json::{Value, json};

/// 2027-01-15T08:00:00Z, a Friday.
const NOW: i64 = 1_800_000_000_000;
const MINUTE: i64 = 60_000;
const HOUR: i64 = 3_600_000;
const DAY: i64 = 86_400_000;

fn resolve(input: Value) -> (Value, i64) {
    let (schedule, first) = Schedule::resolve_in(&input, NOW, &Utc).unwrap();
    (schedule.to_stored(), first)
}

fn resolve_err(input: Value) -> String {
    Schedule::resolve_in(&input, NOW, &Utc).unwrap_err().0
}

fn inner(loop_name: &str) -> ToolCaller {
    ToolCaller::Model {
        loop_name: loop_name.into(),
    }
}

fn timer_row(file: &AdfFile, id: i64) -> adf_store::TimerRow {
    file.timer(id).unwrap().expect("timer row")
}

/// The populated reference fixture (schema 28, migrated on open): timers 1 (once, agent),
/// 2 (interval, system lambda) and 3 (cron, agent, locked).
fn fixture() -> (tempfile::TempDir, AdfFile) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("populated.adf");
    std::fs::copy(common::fixture("populated-runtime.adf"), &path).unwrap();
    let file = AdfFile::open(&path).unwrap();
    (dir, file)
}

// ---------------------------------------------------------------------------------------------
// Schedule resolution with a fixed clock
// ---------------------------------------------------------------------------------------------

#[test]
fn trg_20_every_input_type_resolves_to_its_stored_mode() {
    assert_eq!(
        resolve(json!({"type": "once", "at": NOW + HOUR})),
        (json!({"mode": "once", "at": NOW + HOUR}), NOW + HOUR)
    );
    // A delay is stored as the absolute once it resolves to.
    assert_eq!(
        resolve(json!({"type": "delay", "delay_ms": 300_000})),
        (json!({"mode": "once", "at": NOW + 300_000}), NOW + 300_000)
    );
    // The tools guide's "once with delay_ms" reads the same.
    assert_eq!(
        resolve(json!({"type": "once", "delay_ms": 5_000})),
        (json!({"mode": "once", "at": NOW + 5_000}), NOW + 5_000)
    );
    // Optional fields absent or null are omitted from the stored form.
    assert_eq!(
        resolve(
            json!({"type": "interval", "every_ms": HOUR, "start_at": null, "end_at": null, "max_runs": null})
        ),
        (json!({"mode": "interval", "every_ms": HOUR}), NOW + HOUR)
    );
    assert_eq!(
        resolve(
            json!({"type": "interval", "every_ms": MINUTE, "start_at": NOW + DAY, "end_at": NOW + 2 * DAY, "max_runs": 3})
        ),
        (
            json!({"mode": "interval", "every_ms": MINUTE, "start_at": NOW + DAY, "end_at": NOW + 2 * DAY, "max_runs": 3}),
            NOW + DAY
        )
    );
    // 09:00 UTC on the same Friday, one hour after NOW.
    assert_eq!(
        resolve(json!({"type": "cron", "cron": "0 9 * * 1-5", "max_runs": 5})),
        (
            json!({"mode": "cron", "cron": "0 9 * * 1-5", "max_runs": 5}),
            NOW + HOUR
        )
    );
    // A stored schedule passed back in (discriminant `mode`) is accepted as input.
    assert_eq!(
        resolve(json!({"mode": "interval", "every_ms": 1000})),
        (json!({"mode": "interval", "every_ms": 1000}), NOW + 1000)
    );
}

#[test]
fn trg_21_once_and_interval_start_must_be_in_the_future() {
    assert!(
        resolve_err(json!({"type": "once", "at": NOW - 1}))
            .contains("schedule.at must be in the future")
    );
    assert!(resolve_err(json!({"type": "once", "at": NOW})).contains("in the future"));
    assert!(
        resolve_err(json!({"type": "interval", "every_ms": 1000, "start_at": NOW - 5}))
            .contains("schedule.start_at must be in the future")
    );
    // Default first fire is now + every_ms.
    assert_eq!(
        resolve(json!({"type": "interval", "every_ms": 250})).1,
        NOW + 250
    );
}

#[test]
fn trg_22_cron_must_be_a_valid_five_field_expression() {
    for bad in [
        "* * *",
        "* * * * * *",
        "0 0 9 * * 1 2027",
        "61 * * * *",
        "* 25 * * *",
        "banana",
        "",
    ] {
        let message = resolve_err(json!({"type": "cron", "cron": bad}));
        assert!(message.contains("cron"), "{bad:?}: {message}");
    }
    assert!(resolve_err(json!({"type": "cron"})).contains("needs schedule.cron"));
    // Lists, ranges, steps and names are the dialect.
    for good in [
        "*/15 * * * *",
        "0 9-17 * * MON-FRI",
        "30 2 1,15 * *",
        "0 0 L * *",
        "@daily",
    ] {
        assert!(parse_cron(good).is_ok(), "{good}");
    }
    // A pattern that never matches never fires.
    assert!(resolve_err(json!({"type": "cron", "cron": "0 0 30 2 *"})).contains("never fire"));
}

#[test]
fn trg_21_missing_and_malformed_fields_are_named() {
    assert!(resolve_err(json!({})).contains("schedule.type is required"));
    assert!(resolve_err(json!({"type": "weekly"})).contains("once, delay, interval or cron"));
    assert!(resolve_err(json!({"type": "once"})).contains("needs schedule.at"));
    assert!(resolve_err(json!({"type": "delay"})).contains("needs schedule.delay_ms"));
    assert!(resolve_err(json!({"type": "delay", "delay_ms": 0})).contains("positive"));
    assert!(resolve_err(json!({"type": "interval"})).contains("needs schedule.every_ms"));
    assert!(resolve_err(json!({"type": "interval", "every_ms": -5})).contains("positive"));
    assert!(
        resolve_err(json!({"type": "interval", "every_ms": "60000"}))
            .contains("must be an integer")
    );
    assert!(
        resolve_err(json!({"type": "interval", "every_ms": 1.5})).contains("must be an integer")
    );
    assert!(
        resolve_err(json!({"type": "interval", "every_ms": 10, "max_runs": 0}))
            .contains("max_runs")
    );
    assert!(
        resolve_err(json!({"type": "interval", "mode": "cron", "every_ms": 10}))
            .contains("disagree")
    );
    assert!(resolve_err(json!("delay 5m")).contains("must be an object"));
}

#[test]
fn trg_21_end_at_must_follow_start_and_allow_a_fire() {
    let message = resolve_err(
        json!({"type": "interval", "every_ms": MINUTE, "start_at": NOW + DAY, "end_at": NOW + HOUR}),
    );
    assert!(
        message.contains("end_at") && message.contains("before schedule.start_at"),
        "{message}"
    );
    assert!(
        resolve_err(json!({"type": "interval", "every_ms": MINUTE, "end_at": NOW - 1}))
            .contains("end_at must be in the future")
    );
    // First fire (now + 1 h) after end_at (now + 1 min): it would never fire.
    assert!(
        resolve_err(json!({"type": "interval", "every_ms": HOUR, "end_at": NOW + MINUTE}))
            .contains("never fire")
    );
    assert!(
        resolve_err(json!({"type": "cron", "cron": "0 9 * * *", "end_at": NOW + MINUTE}))
            .contains("never fire")
    );
}

#[test]
fn trg_26_next_fire_after_ends_once_max_runs_and_end_at() {
    let once = Schedule::from_stored(&json!({"mode": "once", "at": NOW})).unwrap();
    // A missed once still fires (on load) while it has not run, and never after.
    assert_eq!(next_fire_after_in(&once, NOW + DAY, 0, &Utc), Some(NOW));
    assert_eq!(next_fire_after_in(&once, NOW, 1, &Utc), None);

    let interval = Schedule::from_stored(&json!({"mode": "interval", "every_ms": MINUTE, "start_at": NOW + HOUR, "end_at": NOW + HOUR + 3 * MINUTE, "max_runs": 3})).unwrap();
    assert_eq!(
        next_fire_after_in(&interval, NOW, 0, &Utc),
        Some(NOW + HOUR)
    );
    assert_eq!(
        next_fire_after_in(&interval, NOW + HOUR, 1, &Utc),
        Some(NOW + HOUR + MINUTE)
    );
    assert_eq!(
        next_fire_after_in(&interval, NOW + HOUR + MINUTE, 2, &Utc),
        Some(NOW + HOUR + 2 * MINUTE)
    );
    assert_eq!(
        next_fire_after_in(&interval, NOW + HOUR + 2 * MINUTE, 3, &Utc),
        None,
        "max_runs reached"
    );
    let by_end = Schedule::from_stored(
        &json!({"mode": "interval", "every_ms": MINUTE, "end_at": NOW + 90_000}),
    )
    .unwrap();
    assert_eq!(
        next_fire_after_in(&by_end, NOW, 1, &Utc),
        Some(NOW + MINUTE)
    );
    assert_eq!(
        next_fire_after_in(&by_end, NOW + MINUTE, 2, &Utc),
        None,
        "next would pass end_at"
    );
    // Readers accept null optional fields (§7.6).
    let nulls = Schedule::from_stored(
        &json!({"mode": "cron", "cron": "*/10 * * * *", "end_at": null, "max_runs": null}),
    )
    .unwrap();
    assert_eq!(
        next_fire_after_in(&nulls, NOW + 1, 4, &Utc),
        Some(NOW + 10 * MINUTE)
    );
    let capped =
        Schedule::from_stored(&json!({"mode": "cron", "cron": "*/10 * * * *", "max_runs": 2}))
            .unwrap();
    assert_eq!(next_fire_after_in(&capped, NOW, 2, &Utc), None);
}

#[test]
fn trg_30_trg_31_a_missed_interval_schedules_one_interval_past_the_late_fire() {
    // Offline for ten intervals: the fire on load is followed by the next occurrence, not by
    // the nine missed ones.
    let interval = Schedule::from_stored(&json!({"mode": "interval", "every_ms": MINUTE})).unwrap();
    let late = NOW + 10 * MINUTE + 7;
    assert_eq!(
        next_fire_after_in(&interval, late, 5, &Utc),
        Some(late + MINUTE)
    );
    let cron = Schedule::from_stored(&json!({"mode": "cron", "cron": "* * * * *"})).unwrap();
    assert_eq!(
        next_fire_after_in(&cron, late, 5, &Utc),
        Some(NOW + 11 * MINUTE)
    );
}

#[test]
fn trg_22_cron_is_evaluated_in_the_given_zone_across_days() {
    // Friday 08:00Z; weekdays at 09:00 in UTC+10 is 23:00Z the day before: Monday's is next.
    let plus_ten = FixedOffset::east_opt(10 * 3600).unwrap();
    let schedule = Schedule::from_stored(&json!({"mode": "cron", "cron": "0 9 * * 1-5"})).unwrap();
    let next = next_fire_after_in(&schedule, NOW, 0, &plus_ten).unwrap();
    // Sunday 2027-01-17T23:00:00Z = Monday 09:00 at +10:00.
    assert_eq!(next, NOW + 2 * DAY + 15 * HOUR);
    assert_eq!(
        next_fire_after_in(&schedule, NOW, 0, &Utc),
        Some(NOW + HOUR)
    );
}

// ---------------------------------------------------------------------------------------------
// sys_set_timer
// ---------------------------------------------------------------------------------------------

#[test]
fn trg_20_trg_23_set_timer_stores_the_resolved_row() {
    let (_dir, _path, mut file) = new_agent();
    let before = now_ms();
    let result = call(
        &mut file,
        &code(),
        "sys_set_timer",
        json!({"schedule": {"type": "delay", "delay_ms": 60_000}, "payload": "check the import"}),
    )
    .unwrap();
    let after = now_ms();
    let id = result["id"].as_i64().unwrap();
    let row = timer_row(&file, id);
    assert_eq!(row.schedule["mode"], "once");
    let at = row.schedule["at"].as_i64().unwrap();
    assert!(at >= before + 60_000 && at <= after + 60_000);
    assert_eq!(row.next_wake_at, at);
    assert_eq!(row.scope, json!(["system"]), "scope defaults to system");
    assert_eq!(row.payload.as_deref(), Some("check the import"));
    assert_eq!(
        (row.lambda, row.warm, row.locked, row.expired, row.run_count),
        (None, false, false, false, 0)
    );
    assert_eq!(result["next_wake_at"], json!(at));
    assert_eq!(result["schedule"], json!({"mode": "once", "at": at}));

    let result = call(
        &mut file,
        &code(),
        "sys_set_timer",
        json!({
            "schedule": {"type": "interval", "every_ms": 3_600_000, "max_runs": 4},
            "scope": ["system", "agent", "system"],
            "lambda": "lib/poller.ts:check",
            "warm": true
        }),
    )
    .unwrap();
    let row = timer_row(&file, result["id"].as_i64().unwrap());
    assert_eq!(row.scope, json!(["system", "agent"]));
    assert_eq!(row.lambda.as_deref(), Some("lib/poller.ts:check"));
    assert!(row.warm);
    assert_eq!(
        row.schedule,
        json!({"mode": "interval", "every_ms": 3_600_000, "max_runs": 4})
    );

    // A shell script path is a lambda too; a bare scope string is one scope.
    let result = call(
        &mut file,
        &code(),
        "sys_set_timer",
        json!({"schedule": {"type": "cron", "cron": "* * * * *"}, "scope": "system", "lambda": "jobs/task.sh"}),
    )
    .unwrap();
    let row = timer_row(&file, result["id"].as_i64().unwrap());
    assert_eq!(row.scope, json!(["system"]));
    let now = now_ms();
    assert!(row.next_wake_at > now - 1000 && row.next_wake_at <= now + MINUTE);
    assert_eq!(row.next_wake_at % MINUTE, 0, "cron fires on a whole minute");
}

#[test]
fn trg_23_lambda_and_warm_need_system_scope() {
    let (_dir, _path, mut file) = new_agent();
    let before = digest(&file);
    for args in [
        json!({"schedule": {"type": "delay", "delay_ms": 1000}, "scope": ["agent"], "lambda": "lib/a.ts:f"}),
        json!({"schedule": {"type": "delay", "delay_ms": 1000}, "scope": ["agent"], "warm": true}),
        json!({"schedule": {"type": "delay", "delay_ms": 1000}, "scope": []}),
        json!({"schedule": {"type": "delay", "delay_ms": 1000}, "scope": ["document"]}),
        json!({"schedule": {"type": "delay", "delay_ms": 1000}, "lambda": "  "}),
    ] {
        let error = call(&mut file, &code(), "sys_set_timer", args.clone()).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidInput, "{args}: {error}");
    }
    assert_eq!(digest(&file), before);
}

#[test]
fn trg_21_trg_22_invalid_schedules_leave_the_file_unchanged() {
    let (_dir, _path, mut file) = new_agent();
    let before = digest(&file);
    let now = now_ms();
    let cases = [
        (json!({}), "schedule"),
        (
            json!({"schedule": {"type": "once", "at": now - 1000}}),
            "in the future",
        ),
        (
            json!({"schedule": {"type": "cron", "cron": "* * *"}}),
            "5 fields",
        ),
        (
            json!({"schedule": {"type": "cron", "cron": "99 * * * *"}}),
            "invalid cron",
        ),
        (json!({"schedule": {"type": "interval"}}), "every_ms"),
        (
            json!({"schedule": {"type": "interval", "every_ms": 1000, "start_at": now + 2 * DAY, "end_at": now + DAY}}),
            "before schedule.start_at",
        ),
        (
            json!({"schedule": {"type": "delay", "delay_ms": 0}}),
            "at least 1",
        ),
        (json!({"schedule": {"type": "fortnightly"}}), "type"),
    ];
    for (args, needle) in cases {
        let error = call(&mut file, &model(), "sys_set_timer", args.clone()).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidInput, "{args}");
        assert!(error.message.contains(needle), "{args}: {}", error.message);
    }
    assert_eq!(digest(&file), before);
    assert!(file.timers().unwrap().is_empty());
}

#[test]
fn trg_24_loop_column_comes_from_the_calling_loop_never_from_args() {
    let (_dir, _path, mut file) = new_agent();
    let delay = json!({"type": "delay", "delay_ms": 60_000});
    let set = |file: &mut AdfFile, caller: &ToolCaller, scope: Value| {
        let result = call(
            file,
            caller,
            "sys_set_timer",
            json!({"schedule": delay, "scope": scope, "loop": "intruder"}),
        )
        .unwrap();
        timer_row(file, result["id"].as_i64().unwrap()).r#loop
    };
    assert_eq!(
        set(&mut file, &model(), json!(["agent"])).as_deref(),
        Some("main")
    );
    assert_eq!(
        set(&mut file, &model(), json!(["system", "agent"])).as_deref(),
        Some("main")
    );
    assert_eq!(
        set(&mut file, &model(), json!(["system"])),
        None,
        "no agent scope: NULL"
    );
    assert_eq!(
        set(&mut file, &inner("research"), json!(["agent"])).as_deref(),
        Some("research")
    );
    // An inner loop owns what it sets, so its timers go when the loop is deleted (§6.4).
    assert_eq!(
        set(&mut file, &inner("research"), json!(["system"])).as_deref(),
        Some("research")
    );
    assert_eq!(
        set(&mut file, &code(), json!(["agent"])),
        None,
        "code has no loop"
    );
    assert_eq!(set(&mut file, &ToolCaller::Owner, json!(["agent"])), None);
    assert!(
        file.timers()
            .unwrap()
            .iter()
            .all(|t| t.r#loop.as_deref() != Some("intruder"))
    );
}

#[test]
fn trg_32_inner_loops_cannot_create_locked_or_lambda_timers() {
    let (_dir, _path, mut file) = new_agent();
    let before = digest(&file);
    let delay = json!({"type": "delay", "delay_ms": 60_000});
    let error = call(
        &mut file,
        &inner("worker"),
        "sys_set_timer",
        json!({"schedule": delay, "scope": ["agent"], "locked": true}),
    )
    .unwrap_err();
    assert!(
        error.message.contains("cannot create locked timers"),
        "{error}"
    );
    let error = call(
        &mut file,
        &inner("worker"),
        "sys_set_timer",
        json!({"schedule": delay, "lambda": "lib/a.ts:f"}),
    )
    .unwrap_err();
    assert!(error.message.contains("system-scope lambda"), "{error}");
    assert_eq!(digest(&file), before);
    // Main may lock its own timers.
    let result = call(
        &mut file,
        &model(),
        "sys_set_timer",
        json!({"schedule": delay, "scope": ["agent"], "locked": true}),
    )
    .unwrap();
    assert_eq!(result["locked"], json!(true));
}

// ---------------------------------------------------------------------------------------------
// sys_list_timers / sys_delete_timer
// ---------------------------------------------------------------------------------------------

#[test]
fn trg_33_list_shows_schedules_next_fire_and_run_counts() {
    let (_dir, mut file) = fixture();
    let listed = call(&mut file, &model(), "sys_list_timers", json!({})).unwrap();
    let listed = listed.as_array().unwrap();
    let ids: Vec<i64> = listed.iter().map(|t| t["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, vec![2, 1, 3], "ordered by next wake time");
    let interval = &listed[0];
    assert_eq!(
        interval["schedule"],
        json!({"mode": "interval", "every_ms": 60000, "max_runs": 10})
    );
    assert_eq!(interval["next_wake_at"], json!(1_795_999_508_246_i64));
    assert_eq!(
        interval["next_wake_at_iso"],
        json!("2026-11-30T00:45:08.246Z")
    );
    assert_eq!(interval["run_count"], json!(0));
    assert_eq!(interval["lambda"], json!("lib/tool.ts:hello"));
    assert_eq!(interval["warm"], json!(true));
    assert_eq!(interval["payload"], json!("tick"));
    assert_eq!(listed[2]["locked"], json!(true));
    assert_eq!(
        listed[2]["schedule"],
        json!({"mode": "cron", "cron": "0 9 * * 1-5"})
    );
}

#[test]
fn trg_28_expired_timers_are_listed_only_on_request() {
    let (_dir, path, mut file) = new_agent();
    call(
        &mut file,
        &code(),
        "sys_set_timer",
        json!({"schedule": {"type": "delay", "delay_ms": 60_000}}),
    )
    .unwrap();
    call(
        &mut file,
        &code(),
        "sys_set_timer",
        json!({"schedule": {"type": "delay", "delay_ms": 90_000}}),
    )
    .unwrap();
    drop(file);
    // Mark one expired the way the scheduler will, with a plain connection.
    let other_writer = adf_store::test_support::OtherConnection::open(&path).unwrap();
    let first = adf_store::test_support::RowsWhere::new("id", 1);
    for (column, value) in [("expired", 1), ("run_count", 1)] {
        let changed = other_writer
            .tables()
            .set_column("adf_timers", &first, column, &json!(value));
        assert_eq!(changed.unwrap(), 1);
    }
    drop(other_writer);
    let mut file = AdfFile::open(&path).unwrap();
    let active = call(&mut file, &model(), "sys_list_timers", json!({})).unwrap();
    assert_eq!(active.as_array().unwrap().len(), 1);
    assert_eq!(active[0]["id"], json!(2));
    let all = call(
        &mut file,
        &model(),
        "sys_list_timers",
        json!({"include_expired": true}),
    )
    .unwrap();
    let expired: Vec<&Value> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["expired"] == json!(true))
        .collect();
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0]["run_count"], json!(1));
}

#[test]
fn trg_32_locked_timers_cannot_be_deleted_by_the_agent() {
    let (_dir, mut file) = fixture();
    let before = digest(&file);
    let tasks_before = file.tasks(None).unwrap().len();
    for caller in [model(), code(), authorized()] {
        let error = call(&mut file, &caller, "sys_delete_timer", json!({"id": 3})).unwrap_err();
        assert_eq!(error.code, ErrorCode::WriteError, "{caller:?}");
        assert!(error.message.contains("locked"), "{error}");
        // Final refusal: no approval request was filed for the owner.
        assert_eq!(error.protection, None);
    }
    assert_eq!(digest(&file), before, "no task row, no change");
    assert_eq!(file.tasks(None).unwrap().len(), tasks_before);
    let done = call(
        &mut file,
        &ToolCaller::Owner,
        "sys_delete_timer",
        json!({"id": 3}),
    )
    .unwrap();
    assert_eq!(done, json!("Timer 3 deleted."));
    assert!(file.timer(3).unwrap().is_none());
}

#[test]
fn trg_32_delete_accepts_numeric_string_ids() {
    let (_dir, mut file) = fixture();
    assert_eq!(
        call(&mut file, &model(), "sys_delete_timer", json!({"id": "2"})).unwrap(),
        json!("Timer 2 deleted.")
    );
    assert_eq!(
        call(&mut file, &model(), "sys_delete_timer", json!({"id": 1})).unwrap(),
        json!("Timer 1 deleted.")
    );
    let ids: Vec<i64> = file.timers().unwrap().iter().map(|t| t.id).collect();
    assert_eq!(ids, vec![3]);

    let before = digest(&file);
    let error = call(
        &mut file,
        &model(),
        "sys_delete_timer",
        json!({"id": "timer_abc123"}),
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidInput);
    let error = call(&mut file, &model(), "sys_delete_timer", json!({"id": 0})).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidInput);
    let error = call(&mut file, &model(), "sys_delete_timer", json!({"id": "99"})).unwrap_err();
    assert_eq!(error.code, ErrorCode::NotFound);
    let error = call(&mut file, &model(), "sys_delete_timer", json!({})).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidInput);
    assert_eq!(digest(&file), before);
}

#[test]
fn trg_24_inner_loops_see_and_delete_only_their_own_timers() {
    let (_dir, _path, mut file) = new_agent();
    let delay = json!({"type": "delay", "delay_ms": 60_000});
    let mains = call(
        &mut file,
        &model(),
        "sys_set_timer",
        json!({"schedule": delay, "scope": ["agent"]}),
    )
    .unwrap();
    let own = call(
        &mut file,
        &inner("worker"),
        "sys_set_timer",
        json!({"schedule": delay, "scope": ["agent"]}),
    )
    .unwrap();
    let listed = call(&mut file, &inner("worker"), "sys_list_timers", json!({})).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["id"], own["id"]);
    assert_eq!(
        call(&mut file, &model(), "sys_list_timers", json!({}))
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let error = refused(
        &mut file,
        &inner("worker"),
        "sys_delete_timer",
        json!({"id": mains["id"]}),
    );
    assert!(error.message.contains("belongs to another loop"), "{error}");
    call(
        &mut file,
        &inner("worker"),
        "sys_delete_timer",
        json!({"id": own["id"]}),
    )
    .unwrap();
    // Main may delete any unlocked timer.
    call(
        &mut file,
        &model(),
        "sys_delete_timer",
        json!({"id": mains["id"]}),
    )
    .unwrap();
    assert!(file.timers().unwrap().is_empty());
}
