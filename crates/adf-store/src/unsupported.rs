//! The one list of config sections this runtime stores but does not act on yet.
//!
//! A file may declare channel adapters, served routes, WebSocket connections,
//! stream bindings, a pre-LLM hook and more (spec §5.11–§5.24). The runtime keeps every such
//! declaration (§15: they are declarations stored in the file) but does not run them yet, and
//! accepting them silently would let an owner believe, say, a route's auth middleware guards
//! something. Each surface that shows an agent to its owner names what is not run: the daemon
//! and `adf chat`/`adf run` warn when they open the file, `adf check` reports a finding and
//! `adf review` lists them. They all read [`unsupported_sections`], so the list lives here
//! only (adf-store is the crate every one of those surfaces depends on).
//!
//! A section counts only when it would do something: a non-empty list, an `enabled: true`
//! switch, a set hook. The defaults a new file is written with never count.

use serde::Serialize;
use serde_json::Value;

/// Tool names a config may declare (§14.3 defaults) for which this runtime has no
/// implementation. A declaration with `enabled` and `visible` true is reported (the owner meant
/// the model to have it). Calling one fails with "unknown tool".
pub const UNIMPLEMENTED_TOOLS: [&str; 0] = [];

/// The channel adapter types the daemon runs (`adf-adapters`); other enabled types are listed.
pub const RUN_ADAPTERS: [&str; 5] = ["telegram", "discord", "slack", "email", "whatsapp"];

/// One declared section the runtime does not run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnsupportedSection {
    /// The config path, such as `compute` or `tools.ws_connect`.
    pub path: String,
    /// What is not run, for the owner.
    pub what: &'static str,
}

impl std::fmt::Display for UnsupportedSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.path, self.what)
    }
}

/// A value that says something: not absent, null, `false`, `""`, `[]` or `{}`.
fn is_set(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(s)) => !s.trim().is_empty(),
        Some(Value::Array(items)) => !items.is_empty(),
        Some(Value::Object(map)) => !map.is_empty(),
        Some(_) => true,
    }
}

/// Every section of `config` that declares something this runtime does not run yet, in
/// config order of the spec's §5.
pub fn unsupported_sections(config: &Value) -> Vec<UnsupportedSection> {
    let mut found = Vec::new();
    let mut add = |path: &str, what: &'static str| {
        found.push(UnsupportedSection {
            path: path.to_owned(),
            what,
        });
    };
    // `code_execution.packages` are installed by `npm_install` and imported by agent code
    // (adf-packages), so they are not listed.
    // `compute` is run by adf-compute (`compute_exec`, `fs_transfer`), so it is not listed;
    // a target this machine lacks fails its call with what to install.
    // The daemon runs the adapter types of `RUN_ADAPTERS` (adf-adapters); other types stay
    // listed.
    if let Some(adapters) = config.get("adapters").and_then(Value::as_object) {
        for (name, adapter) in adapters {
            if adapter.get("enabled").and_then(Value::as_bool) != Some(false)
                && !RUN_ADAPTERS.contains(&name.as_str())
            {
                add(
                    &format!("adapters.{name}"),
                    "this channel adapter type is not supported yet",
                );
            }
        }
    }
    // `serving` (routes, WebSocket routes, public/ and shared files) is run by the daemon
    // (adf-net), so it is not listed.
    // `ws_connections` are opened by the daemon at load (adf-net), so they are not listed.
    // `stream_bindings` are materialized by the daemon at load (adf-net), so they are not
    // listed.
    if is_set(config.get("pre_llm_hook")) {
        add(
            "pre_llm_hook",
            "the hook is not called; model requests go out untransformed",
        );
    }
    // `umbilical.stream_deltas` is emitted by the daemon's turns (`turn.delta`), so it is not
    // listed.
    // `umbilical.log` is kept by the daemon (adf-net's replay log), so it is not listed.
    for tool in config
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
        let on = |flag: &str| tool.get(flag).and_then(Value::as_bool) == Some(true);
        if UNIMPLEMENTED_TOOLS.contains(&name) && on("enabled") && on("visible") {
            add(
                &format!("tools.{name}"),
                "this tool is not implemented: the model is not offered it and a call fails as an unknown tool",
            );
        }
    }
    found
}

/// One line naming every section, for a warning; `None` when there is none.
pub fn warning_line(config: &Value) -> Option<String> {
    let sections = unsupported_sections(config);
    if sections.is_empty() {
        return None;
    }
    let listed: Vec<String> = sections.iter().map(ToString::to_string).collect();
    Some(format!(
        "this runtime does not run these configured sections yet: {}",
        listed.join("; ")
    ))
}
