//! The declarations of `mcp_install`, `mcp_restart` and `mcp_uninstall` (name, description,
//! argument schema) against a snapshot taken before they moved to
//! `adf_runtime::declare_tool!`: models see the same tools, byte for byte.

use serde_json::json;

use adf_mcp::tools::MANAGEMENT_TOOLS;
use adf_mcp::{McpSource, Supervisor};
use adf_runtime::tools::ToolSource as _;

#[test]
fn management_tool_declarations_match_their_snapshot() {
    let source = McpSource::new(Supervisor::default(), None);
    let tools: Vec<_> = MANAGEMENT_TOOLS
        .iter()
        .map(|name| {
            let tool = source.tool(&json!({}), name).unwrap();
            assert_eq!(tool.name(), *name);
            tool
        })
        .collect();
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
