//! The declarations of the `ws_*` and `stream_*` tools (name, description, argument schema)
//! against a snapshot taken before they moved to `adf_runtime::declare_tool!`: models see the
//! same tools, byte for byte.

use std::sync::Arc;

use serde_json::Value;

use adf_net::outbound::Outbound;
use adf_net::streams::{BindingEvents, StreamTools, Streams};
use adf_net::tools::{ServingCell, WsTools};

use crate::streams::NoAgents;

struct Silent;

impl BindingEvents for Silent {
    fn emit(&self, _agent_id: &str, _event_type: &str, _payload: Value) {}
}

#[tokio::test]
async fn ws_and_stream_tool_declarations_match_their_snapshot() {
    let lookup: Arc<dyn adf_egress::Lookup> = Arc::new(adf_egress::SystemLookup);
    let serving = ServingCell::default();
    let outbound = Outbound::new(Arc::new(NoAgents), Arc::clone(&lookup), serving.clone());
    let streams = Streams::new(Arc::clone(&outbound), lookup, Arc::new(Silent));
    let mut tools = WsTools::tools(outbound, Arc::new(NoAgents), serving);
    tools.extend(StreamTools::tools(streams));
    let names: Vec<&str> = tools.iter().map(|tool| tool.name()).collect();
    assert_eq!(
        names,
        [
            "ws_connect",
            "ws_send",
            "ws_disconnect",
            "ws_connections",
            "stream_bind",
            "stream_unbind",
            "stream_bindings"
        ]
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
