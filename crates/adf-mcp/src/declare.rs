//! Discovery → declarations (§5.4, §5.11): each tool a server lists becomes the
//! `config.tools` entry `mcp_<server>_<tool>` carrying `mcp_tool_hash` (the definition the
//! owner last reviewed), `mcp_tool_status` (`new` | `changed` | `removed`) and
//! `mcp_tool_definition` (the description and input schema the server gave last, so the
//! model's tool list needs no running server).

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::spec::{ServerSpec, new_tools_restricted};

/// The extra field of a declaration holding the last discovered definition.
pub const DEFINITION_FIELD: &str = "mcp_tool_definition";

/// One tool as a server lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct DiscoveredTool {
    /// The server's own name for it.
    pub name: String,
    /// Its description, empty when the server gave none.
    pub description: String,
    /// Its input JSON Schema.
    pub input_schema: Value,
}

impl DiscoveredTool {
    /// The hash of the definition the owner reviews: description and input schema, keys in
    /// sorted order so a server that reorders keys does not look changed.
    pub fn hash(&self) -> String {
        definition_hash(&self.definition())
    }

    /// The stored definition.
    pub fn definition(&self) -> Value {
        json!({ "description": self.description, "input_schema": self.input_schema })
    }
}

/// The SHA-256 (hex) of a stored definition in canonical (sorted-key) JSON.
pub fn definition_hash(definition: &Value) -> String {
    let digest = Sha256::digest(canonical(definition).as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let body: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&map[k])))
                .collect();
            format!("{{{}}}", body.join(","))
        }
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// The declaration name of `tool` of `server`.
pub fn declaration_name(server: &str, tool: &str) -> String {
    format!("mcp_{server}_{tool}")
}

/// What one discovery changed in the declarations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoveryReport {
    /// Declarations added (`new`).
    pub added: Vec<String>,
    /// Declarations whose definition changed (`changed`: disabled and restricted).
    pub changed: Vec<String>,
    /// Declarations whose tool the server no longer lists (`removed`).
    pub removed: Vec<String>,
    /// Declarations whose definition is as reviewed.
    pub unchanged: Vec<String>,
}

/// Folds a discovery of `spec`'s tools into `config.tools`, keeping the owner's choices
/// (enabled, visible, restricted, locked) of tools whose definition did not change (TOL-40).
pub fn apply_discovery(
    config: &mut Value,
    spec: &ServerSpec,
    discovered: &[DiscoveredTool],
) -> DiscoveryReport {
    let restrict_new = new_tools_restricted(config) || spec.restricted;
    let mut report = DiscoveryReport::default();
    let Some(object) = config.as_object_mut() else {
        return report;
    };
    let tools = object
        .entry("tools")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !tools.is_array() {
        *tools = Value::Array(Vec::new());
    }
    let Some(tools) = tools.as_array_mut() else {
        return report;
    };
    let listed: Vec<&DiscoveredTool> = discovered
        .iter()
        .filter(|t| spec.available_tools.is_empty() || spec.available_tools.contains(&t.name))
        .collect();
    let prefix = format!("mcp_{}_", spec.name);
    for tool in &listed {
        let name = declaration_name(&spec.name, &tool.name);
        let hash = tool.hash();
        let existing = tools
            .iter_mut()
            .find(|d| d.get("name").and_then(Value::as_str) == Some(name.as_str()))
            .and_then(Value::as_object_mut);
        match existing {
            None => {
                tools.push(json!({
                    "name": name,
                    "enabled": true,
                    "visible": true,
                    "restricted": restrict_new,
                    "locked": false,
                    "mcp_tool_hash": hash,
                    "mcp_tool_status": "new",
                    DEFINITION_FIELD: tool.definition(),
                }));
                report.added.push(name);
            }
            Some(declaration) => {
                declaration.insert(DEFINITION_FIELD.into(), tool.definition());
                if spec.restricted {
                    declaration.insert("restricted".into(), Value::Bool(true));
                }
                let reviewed = declaration.get("mcp_tool_hash").and_then(Value::as_str);
                if reviewed == Some(hash.as_str()) {
                    if status(declaration) == Some("removed") {
                        declaration.remove("mcp_tool_status");
                    }
                    report.unchanged.push(name);
                } else if reviewed.is_none() {
                    // A declaration written by hand (or by another runtime) with no hash:
                    // this definition becomes the reviewed one.
                    declaration.insert("mcp_tool_hash".into(), Value::String(hash));
                    report.unchanged.push(name);
                } else {
                    declaration.insert("mcp_tool_status".into(), json!("changed"));
                    declaration.insert("enabled".into(), Value::Bool(false));
                    declaration.insert("restricted".into(), Value::Bool(true));
                    report.changed.push(name);
                }
            }
        }
    }
    for declaration in tools.iter_mut().filter_map(Value::as_object_mut) {
        let Some(name) = declaration.get("name").and_then(Value::as_str) else {
            continue;
        };
        let Some(tool) = name.strip_prefix(&prefix) else {
            continue;
        };
        if listed.iter().any(|t| t.name == tool) {
            continue;
        }
        let name = name.to_owned();
        declaration.insert("mcp_tool_status".into(), json!("removed"));
        report.removed.push(name);
    }
    report
}

fn status(declaration: &Map<String, Value>) -> Option<&str> {
    declaration.get("mcp_tool_status").and_then(Value::as_str)
}

/// An MCP declaration awaiting the owner's review (`new` or `changed`), as `adf review`
/// shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingReview {
    /// The declaration name.
    pub name: String,
    /// `new` or `changed`.
    pub status: String,
}

/// The MCP declarations whose definition the owner has not reviewed.
pub fn pending_reviews(config: &Value) -> Vec<PendingReview> {
    config
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|d| {
            let name = d.get("name")?.as_str()?;
            let status = d.get("mcp_tool_status")?.as_str()?;
            (name.starts_with("mcp_") && matches!(status, "new" | "changed")).then(|| {
                PendingReview {
                    name: name.to_owned(),
                    status: status.to_owned(),
                }
            })
        })
        .collect()
}

/// The owner accepts every pending definition: each `new`/`changed` declaration records the
/// hash of its current definition and loses its status; a `changed` one is enabled again
/// (it stays restricted: lifting that is a separate choice). Returns the accepted names.
pub fn accept_reviews(config: &mut Value) -> Vec<String> {
    let mut accepted = Vec::new();
    let Some(tools) = config.get_mut("tools").and_then(Value::as_array_mut) else {
        return accepted;
    };
    for declaration in tools.iter_mut().filter_map(Value::as_object_mut) {
        let Some(name) = declaration.get("name").and_then(Value::as_str) else {
            continue;
        };
        if !name.starts_with("mcp_") {
            continue;
        }
        let name = name.to_owned();
        let was = status(declaration).map(str::to_owned);
        if !matches!(was.as_deref(), Some("new" | "changed")) {
            continue;
        }
        if let Some(definition) = declaration.get(DEFINITION_FIELD) {
            let hash = definition_hash(definition);
            declaration.insert("mcp_tool_hash".into(), Value::String(hash));
        }
        declaration.remove("mcp_tool_status");
        if was.as_deref() == Some("changed") {
            declaration.insert("enabled".into(), Value::Bool(true));
        }
        accepted.push(name);
    }
    accepted
}

/// Removes server `name` and every `mcp_<name>_*` declaration (TOL-41). Returns whether the
/// server was declared.
pub fn remove_server(config: &mut Value, name: &str) -> bool {
    let prefix = format!("mcp_{name}_");
    if let Some(tools) = config.get_mut("tools").and_then(Value::as_array_mut) {
        tools.retain(|d| {
            !d.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| n.starts_with(&prefix))
        });
    }
    let Some(servers) = config
        .pointer_mut("/mcp/servers")
        .and_then(Value::as_array_mut)
    else {
        return false;
    };
    let before = servers.len();
    servers.retain(|s| s.get("name").and_then(Value::as_str) != Some(name));
    before != servers.len()
}

/// Adds (or replaces) the server declaration `server` under `config.mcp.servers`.
pub fn upsert_server(config: &mut Value, server: Value) {
    let Some(object) = config.as_object_mut() else {
        return;
    };
    let mcp = object.entry("mcp").or_insert_with(|| json!({}));
    if !mcp.is_object() {
        *mcp = json!({});
    }
    let Some(mcp) = mcp.as_object_mut() else {
        return;
    };
    let servers = mcp.entry("servers").or_insert_with(|| json!([]));
    if !servers.is_array() {
        *servers = json!([]);
    }
    let Some(servers) = servers.as_array_mut() else {
        return;
    };
    let name = server.get("name").cloned();
    match servers.iter_mut().find(|s| s.get("name") == name.as_ref()) {
        Some(existing) => *existing = server,
        None => servers.push(server),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn spec(config: &Value) -> ServerSpec {
        ServerSpec::parse(&config["mcp"]["servers"][0]).unwrap()
    }

    fn tool(name: &str, schema: Value) -> DiscoveredTool {
        DiscoveredTool {
            name: name.into(),
            description: format!("{name} things"),
            input_schema: schema,
        }
    }

    fn declaration<'a>(config: &'a Value, name: &str) -> &'a Value {
        config["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == name)
            .unwrap()
    }

    #[test]
    fn tol_12_tol_39_discovery_declares_mcp_server_tool_enabled_visible_restricted() {
        let mut config = json!({"tools": [], "mcp": {"servers": [{"name": "gh", "command": "x"}]}});
        let s = spec(&config);
        let report = apply_discovery(
            &mut config,
            &s,
            &[tool("list_issues", json!({"type": "object"}))],
        );
        assert_eq!(report.added, vec!["mcp_gh_list_issues"]);
        let d = declaration(&config, "mcp_gh_list_issues");
        assert_eq!(
            (
                &d["enabled"],
                &d["visible"],
                &d["restricted"],
                &d["mcp_tool_status"]
            ),
            (&json!(true), &json!(true), &json!(true), &json!("new"))
        );
    }

    #[test]
    fn tol_13_new_tools_restricted_false_declares_unrestricted_tools() {
        let mut config = json!({"mcp": {"new_tools_restricted": false, "servers": [{"name": "a", "command": "x"}]}});
        let s = spec(&config);
        apply_discovery(&mut config, &s, &[tool("t", json!({"type": "object"}))]);
        assert_eq!(declaration(&config, "mcp_a_t")["restricted"], json!(false));
    }

    #[test]
    fn tol_10_a_restricted_server_restricts_its_tools_even_when_new_tools_are_not() {
        let mut config = json!({"mcp": {"new_tools_restricted": false, "servers": [{"name": "a", "command": "x", "restricted": true}]}});
        let s = spec(&config);
        apply_discovery(&mut config, &s, &[tool("t", json!({"type": "object"}))]);
        assert_eq!(declaration(&config, "mcp_a_t")["restricted"], json!(true));
    }

    #[test]
    fn tol_11_changed_schema_forces_disabled_restricted_until_reviewed() {
        let mut config = json!({"mcp": {"new_tools_restricted": false, "servers": [{"name": "a", "command": "x"}]}});
        let s = spec(&config);
        apply_discovery(
            &mut config,
            &s,
            &[
                tool("t", json!({"type": "object"})),
                tool("u", json!({"type": "object"})),
            ],
        );
        accept_reviews(&mut config);
        let report = apply_discovery(
            &mut config,
            &s,
            &[
                tool(
                    "t",
                    json!({"type": "object", "properties": {"x": {"type": "string"}}}),
                ),
                tool("u", json!({"type": "object"})),
            ],
        );
        assert_eq!(report.changed, vec!["mcp_a_t"]);
        assert_eq!(report.unchanged, vec!["mcp_a_u"]);
        let t = declaration(&config, "mcp_a_t");
        assert_eq!(
            (&t["enabled"], &t["restricted"], &t["mcp_tool_status"]),
            (&json!(false), &json!(true), &json!("changed"))
        );
        let u = declaration(&config, "mcp_a_u");
        assert_eq!(
            (&u["enabled"], &u["restricted"]),
            (&json!(true), &json!(false))
        );
        assert_eq!(pending_reviews(&config).len(), 1);
        assert_eq!(accept_reviews(&mut config), vec!["mcp_a_t"]);
        let t = declaration(&config, "mcp_a_t");
        assert_eq!(t["enabled"], json!(true));
        assert_eq!(
            t["mcp_tool_hash"],
            json!(definition_hash(&t[DEFINITION_FIELD]))
        );
        assert!(t.get("mcp_tool_status").is_none());
    }

    #[test]
    fn tol_40_rediscovery_keeps_owner_choices_and_marks_removed_tools() {
        let mut config = json!({"mcp": {"servers": [{"name": "a", "command": "x", "available_tools": ["t", "u"]}]}});
        let s = spec(&config);
        apply_discovery(
            &mut config,
            &s,
            &[
                tool("t", json!({})),
                tool("u", json!({})),
                tool("v", json!({})),
            ],
        );
        assert!(
            config["tools"]
                .as_array()
                .unwrap()
                .iter()
                .all(|d| d["name"] != "mcp_a_v"),
            "available_tools filters"
        );
        config["tools"][0]["enabled"] = json!(false);
        let report = apply_discovery(&mut config, &s, &[tool("t", json!({}))]);
        assert_eq!(report.removed, vec!["mcp_a_u"]);
        assert_eq!(config["tools"][0]["enabled"], json!(false));
        assert_eq!(
            declaration(&config, "mcp_a_u")["mcp_tool_status"],
            json!("removed")
        );
    }

    #[test]
    fn tol_41_remove_server_drops_its_declarations_only() {
        let mut config = json!({"tools": [{"name": "mcp_a_t"}, {"name": "mcp_ab_t"}, {"name": "fs_read"}], "mcp": {"servers": [{"name": "a"}, {"name": "ab"}]}});
        assert!(remove_server(&mut config, "a"));
        assert_eq!(
            config["tools"],
            json!([{"name": "mcp_ab_t"}, {"name": "fs_read"}])
        );
        assert_eq!(config["mcp"]["servers"], json!([{"name": "ab"}]));
    }

    #[test]
    fn hash_ignores_key_order() {
        let a = tool("t", json!({"type": "object", "properties": {}}));
        let b = tool(
            "t",
            serde_json::from_str(r#"{"properties": {}, "type": "object"}"#).unwrap(),
        );
        assert_eq!(a.hash(), b.hash());
        assert_ne!(a.hash(), tool("t", json!({"type": "string"})).hash());
    }
}
