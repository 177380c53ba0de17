//! System prompt assembly and templating (spec §5.1) against real files.
use crate::common;

use adf_runtime::prompt::{
    LoopView, PromptTexts, TurnFacts, build_system_prompt, dynamic_instructions,
};
use adf_store::{AdfFile, Caller, ConfigAction, FileWrite};
use serde_json::{Value, json};

fn set(file: &mut AdfFile, path: &str, value: Value) {
    file.config_set_path(Caller::Owner, path, ConfigAction::Set, value)
        .unwrap();
}

fn put(file: &mut AdfFile, path: &str, content: &str) {
    file.file_write(
        Caller::Owner,
        path,
        content.as_bytes(),
        &FileWrite::default(),
    )
    .unwrap();
}

fn prompt(file: &AdfFile) -> String {
    build_system_prompt(
        file,
        &file.config().unwrap(),
        &PromptTexts::default(),
        LoopView::main(),
    )
    .unwrap()
    .text
}

#[test]
fn prm_11_default_base_prompt_carries_mind_md_and_identity() {
    let (_dir, _path, mut file) = common::new_agent();
    put(&mut file, "mind.md", "# Mind\nremember the milk");
    set(&mut file, "instructions", json!("Help the owner."));
    let text = prompt(&file);
    assert!(text.contains("remember the milk"), "{text}");
    assert!(text.contains("Help the owner."));
    assert!(
        text.contains("## Your Identity\n\nYour name is \"agent\"."),
        "{text}"
    );
    assert!(!text.contains("{{"), "every placeholder resolved: {text}");
}

#[test]
fn prm_05_prm_08_placeholders_resolve_only_against_files() {
    let (_dir, _path, mut file) = common::new_agent();
    set(&mut file, "bare_prompt", json!(true));
    set(
        &mut file,
        "instructions",
        json!("A={{adf_meta}} B={{config}} C={{nope.md}} D={{README.md}}"),
    );
    let text = prompt(&file);
    let readme = String::from_utf8(file.file_read("README.md").unwrap().unwrap().content).unwrap();
    assert_eq!(
        text,
        format!(
            "A=[missing file: adf_meta] B=[missing file: config] C=[missing file: nope.md] D={readme}"
        )
    );
}

#[test]
fn prm_06_single_pass_does_not_rescan_inserted_content() {
    let (_dir, _path, mut file) = common::new_agent();
    put(&mut file, "mind.md", "see {{soul.md}}");
    set(&mut file, "bare_prompt", json!(true));
    set(&mut file, "instructions", json!("{{mind.md}}"));
    let built = build_system_prompt(
        &file,
        &file.config().unwrap(),
        &PromptTexts::default(),
        LoopView::main(),
    )
    .unwrap();
    assert_eq!(built.text, "see {{soul.md}}");
    assert_eq!(built.referenced_files, vec!["mind.md"]);
}

#[test]
fn prm_09_templating_works_with_fs_read_disabled() {
    let (_dir, _path, mut file) = common::new_agent();
    set(&mut file, "tools.fs_read.enabled", json!(false));
    set(&mut file, "bare_prompt", json!(true));
    set(&mut file, "instructions", json!("{{soul.md}}"));
    let soul = String::from_utf8(file.file_read("soul.md").unwrap().unwrap().content).unwrap();
    assert_eq!(prompt(&file), soul);
}

#[test]
fn prm_12_prm_13_prm_16_bare_prompt_is_the_resolved_instructions_alone() {
    let (_dir, _path, mut file) = common::new_agent();
    set(&mut file, "bare_prompt", json!(true));
    set(&mut file, "include_base_prompt", json!(true));
    set(&mut file, "autonomous", json!(true));
    set(&mut file, "model.multimodal", json!({ "image": true }));
    put(&mut file, "policy/tone.md", "Be brief.");
    set(&mut file, "instructions", json!("Tone: {{policy/tone.md}}"));
    assert_eq!(prompt(&file), "Tone: Be brief.");
}

#[test]
fn prm_14_include_base_prompt_false_keeps_identity_multimodal_and_autonomous_blocks() {
    let (_dir, _path, mut file) = common::new_agent();
    let texts = PromptTexts::default();
    set(&mut file, "include_base_prompt", json!(false));
    set(&mut file, "autonomous", json!(true));
    set(&mut file, "model.multimodal", json!({ "image": true }));
    set(&mut file, "instructions", json!("Do the thing."));
    let text = prompt(&file);
    assert!(!text.contains(&texts.base[..40]), "no base prompt");
    assert!(
        !text.contains("## Skills") && !text.contains("## Tool Best Practices"),
        "no conditional sections"
    );
    assert!(text.starts_with("Do the thing."), "{text}");
    assert!(
        text.contains("## Your Identity")
            && text.contains("## Media")
            && text.contains(&texts.autonomous)
    );
}

#[test]
fn prm_17_empty_sections_are_omitted() {
    let (_dir, _path, mut file) = common::new_agent();
    set(&mut file, "instructions", json!("   "));
    let texts = PromptTexts {
        skills: "  \n ".into(),
        ..PromptTexts::default()
    };
    let built =
        build_system_prompt(&file, &file.config().unwrap(), &texts, LoopView::main()).unwrap();
    assert!(
        !built.text.contains("\n\n\n\n"),
        "no empty section left a gap: {:?}",
        built.text
    );
    assert!(!built.text.contains("## Skills"));
    assert!(
        !built
            .referenced_files
            .contains(&"skills-registry.json".to_owned())
    );
}

#[test]
fn prm_35_conditional_sections_follow_enabled_features() {
    let (_dir, _path, mut file) = common::new_agent();
    let with_code = prompt(&file);
    assert!(with_code.contains("## Code Execution & Lambdas"));
    assert!(with_code.contains("## Tool Best Practices") && !with_code.contains("## Shell"));
    assert!(
        with_code.contains("## Skills") && with_code.contains("\"skills\""),
        "the catalog is injected"
    );
    set(&mut file, "tools.sys_code.enabled", json!(false));
    set(&mut file, "tools.sys_lambda.enabled", json!(false));
    set(&mut file, "tools.adf_shell.enabled", json!(true));
    let without_code = prompt(&file);
    assert!(!without_code.contains("## Code Execution & Lambdas"));
    assert!(without_code.contains("## Shell") && !without_code.contains("## Tool Best Practices"));
    assert!(!without_code.contains("## HTTP Serving"));
    set(&mut file, "serving.public.enabled", json!(true));
    assert!(prompt(&file).contains("## HTTP Serving"));
}

#[test]
fn prm_15_prm_32_dynamic_instructions_ignore_bare_prompt() {
    let (_dir, _path, mut file) = common::new_agent();
    set(&mut file, "bare_prompt", json!(true));
    let message = json!({ "id": "m1", "from": "did:key:z6Mkx", "content": "hi", "received_at": 1 });
    file.message_insert(
        adf_store::messages::Mailbox::Inbox,
        message.as_object().unwrap(),
        None,
    )
    .unwrap();
    let config = file.config().unwrap();
    let hints = dynamic_instructions(&file, &config, LoopView::main(), TurnFacts::default())
        .unwrap()
        .unwrap();
    assert!(hints.contains("1 unread message"), "{hints}");
    assert!(
        !hints.contains("sys_set_state"),
        "no idle reminder for a non-autonomous agent"
    );
    set(&mut file, "autonomous", json!(true));
    let config = file.config().unwrap();
    let hints = dynamic_instructions(&file, &config, LoopView::main(), TurnFacts::default())
        .unwrap()
        .unwrap();
    assert!(hints.contains("sys_set_state"));
    set(
        &mut file,
        "context.dynamic_instructions.inbox_hints",
        json!(false),
    );
    set(
        &mut file,
        "context.dynamic_instructions.idle_reminder",
        json!(false),
    );
    let config = file.config().unwrap();
    assert_eq!(
        dynamic_instructions(&file, &config, LoopView::main(), TurnFacts::default()).unwrap(),
        None
    );
}

#[test]
fn prm_31_context_warning_fires_once_near_the_threshold() {
    let (_dir, _path, mut file) = common::new_agent();
    set(&mut file, "context.compact_threshold", json!(100_000));
    let config = file.config().unwrap();
    let near = TurnFacts {
        context_tokens: 90_000,
        context_warning_given: false,
    };
    let far = TurnFacts {
        context_tokens: 50_000,
        context_warning_given: false,
    };
    let given = TurnFacts {
        context_tokens: 90_000,
        context_warning_given: true,
    };
    let warn = |facts| {
        dynamic_instructions(&file, &config, LoopView::main(), facts)
            .unwrap()
            .unwrap_or_default()
    };
    assert!(warn(near).contains("compacted soon"));
    assert!(!warn(far).contains("compacted soon"));
    assert!(!warn(given).contains("compacted soon"));
}
