//! The built-in tools, one module per family. Each module exposes `tools()`.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::Tool;

/// Writes the declaration half of a [`Tool`] impl (name, description, argument schema) from
/// one block, so each tool states what it is in a few lines and only its behaviour is code.
/// `parameters` is any expression that evaluates to the JSON Schema `Value`.
macro_rules! declare_tool {
    (name: $name:literal, description: $description:expr, parameters: $parameters:expr $(,)?) => {
        fn name(&self) -> &'static str {
            $name
        }

        fn description(&self) -> &'static str {
            $description
        }

        fn parameters(&self) -> serde_json::Value {
            $parameters
        }
    };
}

/// The argument schema of a tool that takes exactly one argument, required, and nothing else.
fn one_argument(name: &str, schema: Value) -> Value {
    let mut properties = Map::new();
    properties.insert(name.to_owned(), schema);
    json!({
        "type": "object",
        "properties": properties,
        "required": [name],
        "additionalProperties": false
    })
}

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
