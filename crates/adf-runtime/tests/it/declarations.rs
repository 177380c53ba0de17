//! The declarations of every built-in tool (name, description, argument schema) against a
//! snapshot taken before the last of them moved to `declare_tool!`: models see the same tools,
//! byte for byte.

#[test]
fn builtin_tool_declarations_match_their_snapshot() {
    let tools = adf_runtime::tools::builtin::all();
    assert!(
        tools.len() > 30,
        "only {} built-in tools were listed",
        tools.len()
    );
    adf_testkit::snapshot::assert_declarations_snapshot(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/tool-declarations.json"
        ),
        tools
            .iter()
            .map(|tool| (tool.name(), tool.description(), tool.parameters())),
    );
}
