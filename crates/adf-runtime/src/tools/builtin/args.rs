//! Schema helpers the built-in tools share (a leaf: the built-ins import it, it imports none
//! of them).

use serde_json::{Map, Value, json};

/// The argument schema of a tool that takes exactly one argument, required, and nothing else.
pub(super) fn one_argument(name: &str, schema: Value) -> Value {
    let mut properties = Map::new();
    properties.insert(name.to_owned(), schema);
    json!({
        "type": "object",
        "properties": properties,
        "required": [name],
        "additionalProperties": false
    })
}
