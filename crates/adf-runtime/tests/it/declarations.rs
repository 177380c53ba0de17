//! The declarations of every built-in tool (name, description, argument schema) against a
//! snapshot taken before the last of them moved to `declare_tool!`: models see the same tools,
//! byte for byte.

use serde_json::{Value, json};

#[test]
fn builtin_tool_declarations_match_their_snapshot() {
    let tools = adf_runtime::tools::builtin::all();
    assert!(
        tools.len() > 30,
        "only {} built-in tools were listed",
        tools.len()
    );
    let declarations: Value = tools
        .iter()
        .map(|tool| {
            json!({
                "name": tool.name(),
                "description": tool.description(),
                "parameters": tool.parameters(),
            })
        })
        .collect();
    adf_testkit::snapshot::assert_json_snapshot(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/tool-declarations.json"
        ),
        &declarations,
    );
}
