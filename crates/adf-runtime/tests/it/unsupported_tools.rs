//! `adf_store::unsupported::UNIMPLEMENTED_TOOLS` (what `adf check`, `adf review` and the
//! load warnings call "not implemented") matches the registry: every default tool is either
//! registered or on the list, and nothing on the list is registered.
//! Also: removed tools stay out of the catalog (TOL-14) and the turn tools keep their parameter
//! names (TOL-59).
use adf_runtime::tools::ToolRegistry;
use adf_store::defaults::DEFAULT_TOOLS;
use adf_store::unsupported::UNIMPLEMENTED_TOOLS;

#[test]
fn the_unimplemented_tool_list_matches_the_registry() {
    let registry = ToolRegistry::with_builtins();
    let registered: Vec<&str> = registry.names().collect();
    for name in UNIMPLEMENTED_TOOLS {
        assert!(
            !registered.contains(&name),
            "{name} is implemented now: take it off UNIMPLEMENTED_TOOLS"
        );
    }
    for (name, ..) in DEFAULT_TOOLS {
        // agent_discover exists only with a mesh, and the ws_* and stream_* tools only with
        // the daemon's sockets (adf-net): all are in the daemon's registry. adf_shell is a
        // capability crate the binaries register (adf-runtime cannot name it), and so are
        // compute_exec and fs_transfer (adf-compute).
        if name == "agent_discover"
            || name == "adf_shell"
            || name == "compute_exec"
            || name == "fs_transfer"
            || name.starts_with("ws_")
            || name.starts_with("stream_")
        {
            continue;
        }
        // The MCP management tools come from adf-mcp's tool source, which the binaries attach.
        if name.starts_with("mcp_") {
            continue;
        }
        assert!(
            registered.contains(&name) || UNIMPLEMENTED_TOOLS.contains(&name),
            "{name} is neither registered nor listed as unimplemented"
        );
    }
}

#[test]
fn tol_14_removed_tools_are_neither_registered_nor_declared() {
    let registry = ToolRegistry::with_builtins();
    let registered: Vec<&str> = registry.names().collect();
    let declared: Vec<&str> = DEFAULT_TOOLS.iter().map(|(name, ..)| *name).collect();
    for removed in ["respond", "loop_read", "loop_stats", "archive_read"] {
        assert!(!registered.contains(&removed), "{removed} is registered");
        assert!(
            !declared.contains(&removed),
            "{removed} is a default declaration"
        );
    }
}

#[test]
fn tol_59_say_takes_message_and_ask_takes_question() {
    let registry = ToolRegistry::with_builtins();
    for (tool, parameter) in [("say", "message"), ("ask", "question")] {
        let schema = registry
            .get(tool)
            .unwrap_or_else(|| panic!("{tool} is not registered"))
            .parameters();
        assert!(
            schema["properties"].get(parameter).is_some(),
            "{tool} lacks `{parameter}`: {schema}"
        );
        let required = schema["required"].as_array().cloned().unwrap_or_default();
        assert!(
            required.iter().any(|r| r == parameter),
            "{tool} does not require `{parameter}`: {schema}"
        );
    }
}
