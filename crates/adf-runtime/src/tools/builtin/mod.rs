//! The built-in tools, one module per family. Each module exposes `tools()`.

use std::sync::Arc;

use super::{Tool, ToolRegistry};

/// Writes the declaration half of a [`Tool`] impl (name, description, argument schema) from
/// one block, so each tool states what it is in a few lines and only its behaviour is code.
///
/// Used inside `impl Tool for …`: `name` and `description` are `&'static str` expressions (a
/// literal or a constant), `parameters` any expression that evaluates to the JSON Schema
/// [`serde_json::Value`] (the calling crate names `serde_json`, as `json!` needs anyway).
/// Tools of other crates (adf-net, adf-mcp, adf-shell) declare themselves with it too, so
/// every tool a model sees is declared the same way.
///
/// ```
/// use adf_runtime::declare_tool;
/// use adf_runtime::tools::{Tool, ToolContext, ToolError};
/// use serde_json::{Value, json};
///
/// struct Ping;
///
/// impl Tool for Ping {
///     declare_tool! {
///         name: "ping",
///         description: "Answers pong.",
///         parameters: json!({ "type": "object", "properties": {} }),
///     }
///
///     fn run(&self, _cx: &mut ToolContext<'_>, _args: Value) -> Result<Value, ToolError> {
///         Ok(json!("pong"))
///     }
/// }
///
/// assert_eq!(Ping.name(), "ping");
/// assert_eq!(Ping.parameters()["type"], "object");
/// ```
#[macro_export]
macro_rules! declare_tool {
    (name: $name:expr, description: $description:expr, parameters: $parameters:expr $(,)?) => {
        fn name(&self) -> &'static str {
            $name
        }

        fn description(&self) -> &'static str {
            $description
        }

        fn parameters(&self) -> ::serde_json::Value {
            $parameters
        }
    };
}

mod args;
pub mod code;
pub mod config;
pub mod create_adf;
pub mod db;
pub mod fetch;
pub mod files;
pub mod loops;
pub mod mesh;
pub mod messages;
pub mod meta;
pub mod state;
pub mod timers;
pub mod turn;

/// Every built-in tool this runtime implements.
pub fn all() -> Vec<Arc<dyn Tool>> {
    let families = [
        files::tools(),
        code::tools(),
        fetch::tools(),
        meta::tools(),
        state::tools(),
        db::tools(),
        config::tools(),
        create_adf::tools(),
        timers::tools(),
        messages::tools(),
        mesh::tools(),
        turn::tools(),
        loops::tools(),
    ];
    families.into_iter().flatten().collect()
}

impl ToolRegistry {
    /// A registry holding every built-in tool this runtime implements.
    pub fn with_builtins() -> Self {
        let mut registry = Self::default();
        for tool in all() {
            registry.register(tool);
        }
        registry
    }

    /// Every built-in tool, with the messaging tools connected to `mesh` (the daemon's): bare
    /// handles, same-runtime delivery and `agent_discover`.
    pub fn with_builtins_and_mesh(
        mesh: Arc<dyn crate::messaging::Mesh>,
        home: Option<crate::home::RuntimeHome>,
    ) -> Self {
        let mut registry = Self::with_builtins();
        for tool in mesh::with_mesh(mesh, home) {
            registry.register(tool);
        }
        registry
    }
}
