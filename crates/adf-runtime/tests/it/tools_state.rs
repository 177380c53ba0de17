//! `sys_set_state` through the call pipeline: who may set which state (§6.2), the stored value,
//! the end-of-turn signal, and inner loops (STL-01, STL-07, STL-13, STL-14).
use crate::common;

use adf_runtime::tools::{ErrorCode, ToolCaller};
use adf_store::{AdfFile, ConfigAction};
use common::{authorized, call, code, digest, model, new_agent, refused};
use serde_json::{Value, json};

fn stored_state(file: &AdfFile) -> Value {
    file.config().unwrap()["state"].clone()
}

#[test]
fn stl_13_the_model_sets_idle_hibernate_or_off_and_nothing_else() {
    let (_dir, _path, mut file) = new_agent();
    assert_eq!(stored_state(&file), "active");
    let before = digest(&file);
    for forbidden in ["active", "suspended", "error", "sleeping", ""] {
        let error = call(
            &mut file,
            &model(),
            "sys_set_state",
            json!({ "state": forbidden }),
        )
        .unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidInput, "{forbidden}");
        assert_eq!(
            error.message, "'state' must be one of \"idle\", \"hibernate\", \"off\"",
            "{forbidden}"
        );
    }
    let error = call(&mut file, &model(), "sys_set_state", json!({})).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidInput);
    assert_eq!(digest(&file), before);

    let mut previous = "active";
    for state in ["idle", "hibernate", "off"] {
        let result = call(
            &mut file,
            &model(),
            "sys_set_state",
            json!({ "state": state }),
        )
        .unwrap();
        assert_eq!(
            result,
            json!({ "state": state, "previous_state": previous, "scope": "agent", "ends_turn": true })
        );
        assert_eq!(stored_state(&file), state);
        previous = state;
    }
}

#[test]
fn stl_14_every_call_ends_the_turn_even_without_a_change() {
    let (_dir, _path, mut file) = new_agent();
    call(
        &mut file,
        &model(),
        "sys_set_state",
        json!({ "state": "idle" }),
    )
    .unwrap();
    let before = digest(&file);
    let result = call(
        &mut file,
        &model(),
        "sys_set_state",
        json!({ "state": "idle" }),
    )
    .unwrap();
    assert_eq!(result["ends_turn"], true);
    assert_eq!(result["previous_state"], "idle");
    assert_eq!(
        digest(&file),
        before,
        "setting the current state writes nothing"
    );
}

#[test]
fn stl_13_code_may_set_the_same_states() {
    let (_dir, _path, mut file) = new_agent();
    for caller in [code(), authorized()] {
        call(
            &mut file,
            &caller,
            "sys_set_state",
            json!({ "state": "hibernate" }),
        )
        .unwrap();
        assert_eq!(stored_state(&file), "hibernate");
        call(
            &mut file,
            &caller,
            "sys_set_state",
            json!({ "state": "off" }),
        )
        .unwrap();
        assert_eq!(stored_state(&file), "off");
        let error = call(
            &mut file,
            &caller,
            "sys_set_state",
            json!({ "state": "active" }),
        )
        .unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidInput);
        assert_eq!(stored_state(&file), "off");
    }
}

#[test]
fn stl_07_an_inner_loop_changes_only_its_own_executor() {
    let (_dir, _path, mut file) = new_agent();
    let before = digest(&file);
    let inner = ToolCaller::Model {
        loop_name: "triage".into(),
    };
    let result = call(
        &mut file,
        &inner,
        "sys_set_state",
        json!({ "state": "off" }),
    )
    .unwrap();
    assert_eq!(
        result,
        json!({ "state": "off", "scope": "loop", "loop": "triage", "ends_turn": true })
    );
    assert_eq!(stored_state(&file), "active");
    assert_eq!(digest(&file), before);
}

#[test]
fn stl_01_state_is_written_by_the_runtime_not_bound_by_config_locks() {
    let (_dir, _path, mut file) = new_agent();
    file.config_set_path(
        adf_store::Caller::Owner,
        "locked_fields",
        ConfigAction::Set,
        json!(["state"]),
    )
    .unwrap();
    call(
        &mut file,
        &model(),
        "sys_set_state",
        json!({ "state": "idle" }),
    )
    .unwrap();
    assert_eq!(stored_state(&file), "idle");
    let config = file.config().unwrap();
    assert_eq!(
        config["locked_fields"],
        json!(["state"]),
        "the rest of the config is untouched"
    );
    assert_eq!(
        file.meta_get("adf_updated_at").unwrap().unwrap().value,
        config["metadata"]["updated_at"].as_str().unwrap(),
        "a config write like any other"
    );
    // Only §6.1 values are ever stored.
    assert!(
        ["active", "idle", "hibernate", "suspended", "off"]
            .contains(&stored_state(&file).as_str().unwrap())
    );
}

#[test]
fn stl_13_a_disabled_sys_set_state_is_refused() {
    let (_dir, _path, mut file) = new_agent();
    file.config_set_path(
        adf_store::Caller::Owner,
        "tools.sys_set_state.enabled",
        ConfigAction::Set,
        json!(false),
    )
    .unwrap();
    let error = refused(
        &mut file,
        &model(),
        "sys_set_state",
        json!({ "state": "idle" }),
    );
    assert_eq!(error.code, ErrorCode::Disabled);
}
