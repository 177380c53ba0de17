//! The meta tools through the whole call pipeline: `sys_get_meta`, `sys_set_meta`,
//! `sys_delete_meta` for the model, unauthorized code and authorized code (MET-08..MET-19).
use crate::common;

use adf_runtime::tools::ErrorCode;
use adf_store::{AdfFile, MetaProtection};
use common::{
    authorized, call, call_approved, code, digest, model, new_agent, refused, refused_write,
};
use serde_json::{Value, json};

fn owner_meta(file: &mut AdfFile, key: &str, value: &str, protection: MetaProtection) {
    file.meta_set(adf_store::Caller::Owner, key, value, Some(protection))
        .unwrap();
}

fn value_of(file: &AdfFile, key: &str) -> Option<String> {
    file.meta_get(key).unwrap().map(|e| e.value)
}

fn protection_of(file: &AdfFile, key: &str) -> String {
    file.meta_get(key).unwrap().unwrap().protection.to_string()
}

fn task_count(file: &AdfFile) -> i64 {
    adf_store::test_support::tables(file)
        .count("adf_tasks")
        .unwrap()
}

fn set(key: &str, value: Value) -> Value {
    json!({ "key": key, "value": value })
}

#[test]
fn met_08_reserved_adf_keys_are_readonly_without_an_approval_request() {
    let (_dir, _path, mut file) = new_agent();
    let name = value_of(&file, "adf_name").unwrap();
    let before = digest(&file);
    for caller in [model(), code(), authorized()] {
        let error = call_approved(
            &mut file,
            &caller,
            "sys_set_meta",
            set("adf_name", json!("Evil")),
        )
        .unwrap_err();
        assert_eq!(error.code, ErrorCode::WriteError);
        assert_eq!(
            error.message,
            "Cannot write to \"adf_name\": key is readonly (adf_ keys are reserved for the runtime)."
        );
        let error = call_approved(
            &mut file,
            &caller,
            "sys_delete_meta",
            json!({ "key": "adf_name" }),
        )
        .unwrap_err();
        assert_eq!(error.code, ErrorCode::WriteError);
        let inc = json!({ "key": "adf_counter", "value": 1, "inc": true });
        assert_eq!(
            call_approved(&mut file, &caller, "sys_set_meta", inc)
                .unwrap_err()
                .code,
            ErrorCode::WriteError
        );
    }
    assert_eq!(digest(&file), before, "no task, no write");
    assert_eq!(value_of(&file, "adf_name").unwrap(), name);
}

#[test]
fn met_08_readonly_key_asks_the_model_and_refuses_code() {
    let (_dir, _path, mut file) = new_agent();
    owner_meta(&mut file, "deployment", "2.1.0", MetaProtection::Readonly);

    let error = call(
        &mut file,
        &model(),
        "sys_set_meta",
        set("deployment", json!("3")),
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::Denied);
    assert_eq!(value_of(&file, "deployment").unwrap(), "2.1.0");
    assert_eq!(task_count(&file), 1);

    let error = refused(
        &mut file,
        &code(),
        "sys_set_meta",
        set("deployment", json!("3")),
    );
    assert_eq!(error.code, ErrorCode::WriteError);
    assert_eq!(
        error.message,
        "Cannot write to \"deployment\": key is readonly."
    );
    assert_eq!(error.protection.as_ref().unwrap().level, "readonly");

    // An approved override works once and says so.
    let result = call_approved(
        &mut file,
        &model(),
        "sys_set_meta",
        set("deployment", json!("3")),
    )
    .unwrap();
    assert_eq!(
        result,
        json!("Set deployment = 3 (⚠ protection override: readonly, owner-approved).")
    );
    assert_eq!(protection_of(&file, "deployment"), "readonly");
    let before = digest(&file);
    assert_eq!(
        call(
            &mut file,
            &code(),
            "sys_set_meta",
            set("deployment", json!("4"))
        )
        .unwrap_err()
        .code,
        ErrorCode::WriteError
    );
    assert_eq!(digest(&file), before);
}

#[test]
fn met_09_increment_keys_take_only_greater_numbers() {
    let (_dir, _path, mut file) = new_agent();
    let create = json!({ "key": "runs", "value": 5, "protection": "increment" });
    assert_eq!(
        call(&mut file, &code(), "sys_set_meta", create).unwrap(),
        json!("Set runs = 5.")
    );
    assert_eq!(protection_of(&file, "runs"), "increment");
    assert_eq!(
        call(&mut file, &code(), "sys_set_meta", set("runs", json!(6))).unwrap(),
        json!("Set runs = 6.")
    );

    let before = digest(&file);
    let error = call(&mut file, &code(), "sys_set_meta", set("runs", json!(6))).unwrap_err();
    assert_eq!(error.code, ErrorCode::WriteError);
    assert_eq!(
        error.message,
        "Cannot update \"runs\": new value (6) must be greater than current value (6)."
    );
    let error = call(
        &mut file,
        &code(),
        "sys_set_meta",
        set("runs", json!("4.5")),
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::WriteError);
    for not_a_number in ["x", "", "NaN", "inf"] {
        let error = call(
            &mut file,
            &model(),
            "sys_set_meta",
            set("runs", json!(not_a_number)),
        )
        .unwrap_err();
        assert_eq!(
            error.code,
            ErrorCode::InvalidInput,
            "{not_a_number}: no approval question"
        );
        assert_eq!(
            error.message,
            format!("Cannot update \"runs\": increment keys hold numbers, not \"{not_a_number}\".")
        );
    }
    let bad_create = json!({ "key": "fresh", "value": "x", "protection": "increment" });
    assert_eq!(
        call(&mut file, &code(), "sys_set_meta", bad_create)
            .unwrap_err()
            .code,
        ErrorCode::InvalidInput
    );
    assert_eq!(digest(&file), before);
    assert_eq!(value_of(&file, "runs").unwrap(), "6");
}

#[test]
fn met_10_readonly_and_increment_keys_cannot_be_deleted_by_the_agent() {
    let (_dir, _path, mut file) = new_agent();
    owner_meta(&mut file, "ro", "1", MetaProtection::Readonly);
    owner_meta(&mut file, "counter", "1", MetaProtection::Increment);
    owner_meta(&mut file, "free", "1", MetaProtection::None);
    for (key, level) in [("ro", "readonly"), ("counter", "increment")] {
        let args = json!({ "key": key });
        let message = format!("Cannot delete \"{key}\": key is {level}.");
        refused_write(
            &mut file,
            &code(),
            "sys_delete_meta",
            args.clone(),
            &message,
        );
        let error = call(&mut file, &model(), "sys_delete_meta", args).unwrap_err();
        assert_eq!(error.code, ErrorCode::Denied);
        assert!(value_of(&file, key).is_some());
    }
    assert_eq!(
        call(
            &mut file,
            &model(),
            "sys_delete_meta",
            json!({ "key": "free" })
        )
        .unwrap(),
        json!("Deleted meta key free.")
    );
    let error = refused(
        &mut file,
        &model(),
        "sys_delete_meta",
        json!({ "key": "free" }),
    );
    assert_eq!(error.code, ErrorCode::NotFound);
}

#[test]
fn met_11_inc_adds_atomically_creates_at_the_amount_and_returns_the_total() {
    let (_dir, _path, mut file) = new_agent();
    let inc = json!({ "key": "llm_tokens_total", "value": 1200, "inc": true });
    assert_eq!(
        call(&mut file, &code(), "sys_set_meta", inc).unwrap(),
        json!(1200)
    );
    assert_eq!(protection_of(&file, "llm_tokens_total"), "none");
    let inc = json!({ "key": "llm_tokens_total", "value": "300", "inc": true });
    assert_eq!(
        call(&mut file, &model(), "sys_set_meta", inc).unwrap(),
        json!(1500)
    );

    for _ in 0..50 {
        call(
            &mut file,
            &code(),
            "sys_set_meta",
            json!({ "key": "hits", "value": 1, "inc": true }),
        )
        .unwrap();
    }
    assert_eq!(value_of(&file, "hits").unwrap(), "50");

    // A new counter can be created protected.
    let inc = json!({ "key": "visits", "value": 1, "inc": true, "protection": "increment" });
    assert_eq!(
        call(&mut file, &code(), "sys_set_meta", inc).unwrap(),
        json!(1)
    );
    assert_eq!(protection_of(&file, "visits"), "increment");

    let before = digest(&file);
    file.meta_set(adf_store::Caller::Owner, "label", "blue", None)
        .unwrap();
    let after_label = digest(&file);
    assert_ne!(before, after_label);
    for bad in [
        json!({ "key": "label", "value": 1, "inc": true }),
        json!({ "key": "hits", "value": "abc", "inc": true }),
        json!({ "key": "hits", "inc": true }),
        json!({ "key": "hits" }),
        json!({ "key": "hits", "value": true }),
        json!({ "key": "", "value": "x" }),
        json!({ "key": "hits", "value": 1, "protection": "sealed" }),
    ] {
        let error = call(&mut file, &code(), "sys_set_meta", bad.clone()).unwrap_err();
        assert_eq!(
            error.code,
            ErrorCode::InvalidInput,
            "{bad}: {}",
            error.message
        );
    }
    assert_eq!(digest(&file), after_label);
}

#[test]
fn met_12_positive_inc_on_an_increment_key_never_asks() {
    let (_dir, _path, mut file) = new_agent();
    owner_meta(&mut file, "score", "10", MetaProtection::Increment);
    // `call` denies every approval: success proves none was asked.
    let inc = json!({ "key": "score", "value": 1, "inc": true });
    assert_eq!(
        call(&mut file, &model(), "sys_set_meta", inc).unwrap(),
        json!(11)
    );
    assert_eq!(task_count(&file), 0);

    let before = digest(&file);
    for amount in [0, -1] {
        let inc = json!({ "key": "score", "value": amount, "inc": true });
        let error = call(&mut file, &code(), "sys_set_meta", inc).unwrap_err();
        assert_eq!(error.code, ErrorCode::WriteError);
        assert_eq!(
            error.message,
            format!(
                "Cannot update \"score\": the amount ({amount}) must be positive; this key can only increase."
            )
        );
    }
    assert_eq!(digest(&file), before);
    // The model's non-positive add is an approval question.
    let inc = json!({ "key": "score", "value": -1, "inc": true });
    assert_eq!(
        call_approved(&mut file, &model(), "sys_set_meta", inc).unwrap(),
        json!(10)
    );
}

#[test]
fn met_13_legacy_delta_is_inc() {
    let (_dir, _path, mut file) = new_agent();
    owner_meta(&mut file, "n", "3", MetaProtection::None);
    let legacy = json!({ "key": "n", "value": "100", "delta": 2 });
    assert_eq!(
        call(&mut file, &model(), "sys_set_meta", legacy).unwrap(),
        json!(5)
    );
    assert_eq!(value_of(&file, "n").unwrap(), "5");
    let legacy = json!({ "key": "m", "delta": 4 });
    assert_eq!(
        call(&mut file, &model(), "sys_set_meta", legacy).unwrap(),
        json!(4)
    );
}

#[test]
fn met_14_met_15_protection_is_chosen_at_creation_only_and_defaults_to_none() {
    let (_dir, _path, mut file) = new_agent();
    assert_eq!(
        call(
            &mut file,
            &model(),
            "sys_set_meta",
            set("mood", json!("calm"))
        )
        .unwrap(),
        json!("Set mood = calm.")
    );
    assert_eq!(protection_of(&file, "mood"), "none");
    let update = json!({ "key": "mood", "value": "busy", "protection": "readonly" });
    assert_eq!(
        call(&mut file, &model(), "sys_set_meta", update).unwrap(),
        json!("Set mood = busy; protection stays none (it applies only when a key is created).")
    );
    assert_eq!(protection_of(&file, "mood"), "none");
    assert_eq!(value_of(&file, "mood").unwrap(), "busy");
    let create = json!({ "key": "sealed", "value": "v", "protection": "readonly" });
    call(&mut file, &model(), "sys_set_meta", create).unwrap();
    assert_eq!(protection_of(&file, "sealed"), "readonly");
}

#[test]
fn met_16_authorized_code_bypasses_every_meta_protection_visibly() {
    let (_dir, _path, mut file) = new_agent();
    owner_meta(&mut file, "ro", "a", MetaProtection::Readonly);
    owner_meta(&mut file, "counter", "10", MetaProtection::Increment);
    owner_meta(&mut file, "plain", "p", MetaProtection::None);
    let bypasses = |file: &AdfFile| -> usize {
        let logs = adf_store::test_support::tables(file).logs().unwrap();
        logs.iter()
            .filter(|l| l.origin.as_deref() == Some("protection"))
            .filter(|l| l.event.as_deref() == Some("bypass"))
            .count()
    };

    assert_eq!(
        call(
            &mut file,
            &authorized(),
            "sys_set_meta",
            set("ro", json!("b"))
        )
        .unwrap(),
        json!("Set ro = b (⚠ protection override: readonly, authorized code).")
    );
    assert_eq!(
        call(
            &mut file,
            &authorized(),
            "sys_set_meta",
            set("counter", json!(3))
        )
        .unwrap(),
        json!("Set counter = 3 (⚠ protection override: increment, authorized code).")
    );
    assert_eq!(value_of(&file, "counter").unwrap(), "3");
    let relevel = json!({ "key": "plain", "value": "q", "protection": "readonly" });
    assert_eq!(
        call(&mut file, &authorized(), "sys_set_meta", relevel).unwrap(),
        json!("Set plain = q; protection none -> readonly.")
    );
    assert_eq!(protection_of(&file, "plain"), "readonly");
    assert_eq!(
        call(
            &mut file,
            &authorized(),
            "sys_delete_meta",
            json!({ "key": "ro" })
        )
        .unwrap(),
        json!("Deleted meta key ro (⚠ protection override: readonly, authorized code).")
    );
    assert!(value_of(&file, "ro").is_none());
    assert_eq!(bypasses(&file), 3);
}

#[test]
fn met_18_get_meta_returns_a_value_or_tab_separated_lines() {
    let (_dir, _path, mut file) = new_agent();
    owner_meta(&mut file, "color", "blue", MetaProtection::None);
    owner_meta(&mut file, "multi", "a\tb\nc", MetaProtection::None);
    assert_eq!(
        call(
            &mut file,
            &model(),
            "sys_get_meta",
            json!({ "key": "color" })
        )
        .unwrap(),
        json!("blue")
    );
    assert_eq!(
        call(
            &mut file,
            &code(),
            "sys_get_meta",
            json!({ "key": "multi" })
        )
        .unwrap(),
        json!("a\tb\nc")
    );
    let listing = call(&mut file, &model(), "sys_get_meta", json!({})).unwrap();
    let listing = listing.as_str().unwrap();
    let expected: Vec<String> = file
        .meta_list()
        .unwrap()
        .into_iter()
        .map(|e| {
            let value = e.value.replace('\n', "\\n").replace('\t', "\\t");
            format!("{}\t{value}", e.key)
        })
        .collect();
    assert_eq!(listing, expected.join("\n"));
    assert!(listing.lines().any(|l| l == "color\tblue"));
    assert!(listing.lines().any(|l| l == "multi\ta\\tb\\nc"));
    assert!(listing.lines().any(|l| l == "status\t"));
    for line in listing.lines() {
        assert_eq!(line.matches('\t').count(), 1, "{line}");
    }
    let error = refused(
        &mut file,
        &model(),
        "sys_get_meta",
        json!({ "key": "nope" }),
    );
    assert_eq!(error.code, ErrorCode::NotFound);
    assert_eq!(error.message, "Meta key \"nope\" not found.");
}

#[test]
fn met_19_counters_stay_integral() {
    let (_dir, _path, mut file) = new_agent();
    for _ in 0..2 {
        call(
            &mut file,
            &code(),
            "sys_set_meta",
            json!({ "key": "half", "value": 0.5, "inc": true }),
        )
        .unwrap();
    }
    assert_eq!(value_of(&file, "half").unwrap(), "1");
    call(
        &mut file,
        &code(),
        "sys_set_meta",
        set("big", json!(999_999)),
    )
    .unwrap();
    let total = call(
        &mut file,
        &code(),
        "sys_set_meta",
        json!({ "key": "big", "value": 1, "inc": true }),
    )
    .unwrap();
    assert_eq!(total, json!(1_000_000));
    assert_eq!(value_of(&file, "big").unwrap(), "1000000");
    call(&mut file, &code(), "sys_set_meta", set("float", json!(5.0))).unwrap();
    assert_eq!(value_of(&file, "float").unwrap(), "5");
    call(&mut file, &code(), "sys_set_meta", set("frac", json!(2.5))).unwrap();
    assert_eq!(value_of(&file, "frac").unwrap(), "2.5");
}
