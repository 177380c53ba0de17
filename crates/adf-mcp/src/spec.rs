//! One `mcp.servers[]` entry (§5.11) read into a typed view. The config itself stays a
//! `serde_json::Value` (unknown fields survive); this is only what the runtime acts on.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::McpError;

/// `tool_call_timeout_ms` when the server does not set it (DEF-25).
pub const DEFAULT_TOOL_CALL_TIMEOUT_MS: u64 = 60_000;

/// How the runtime reaches a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        /// The program (a bare name is looked up on the runtime's `PATH`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// Streamable HTTP at `url`, dialled through the agent's egress policy.
    Http {
        /// The endpoint.
        url: String,
        /// Static, non-secret headers.
        headers: BTreeMap<String, String>,
        /// Headers whose value is the credential named `env` (`header_env`).
        header_env: Vec<(String, String)>,
        /// `bearer_token_env_var`: the credential sent as `Authorization: Bearer …`.
        bearer_token_env: Option<String>,
    },
}

/// One credential a server needs (`env_schema[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvKey {
    /// The variable name the server reads.
    pub key: String,
    /// The call fails, naming the fix, when the credential is missing.
    pub required: bool,
}

/// The typed view of one server declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    /// `name`: the `<server>` of `mcp_<server>_<tool>`.
    pub name: String,
    /// stdio or http.
    pub transport: Transport,
    /// Static, non-secret environment (`env`; secret values live in `adf_identity`).
    pub env: BTreeMap<String, String>,
    /// Credentials from `adf_identity` (`mcp:<server>:<KEY>`).
    pub env_schema: Vec<EnvKey>,
    /// `tool_call_timeout_ms`.
    pub timeout: Duration,
    /// `restricted`: every tool of the server needs approval.
    pub restricted: bool,
    /// `available_tools`: when non-empty, only these tools are declared.
    pub available_tools: Vec<String>,
    /// `run_location` (`host` needs `compute.host_access`).
    pub run_location: Option<String>,
    /// `source` (`npm:<pkg>`, `pypi:<pkg>`, `custom`): where the runtime finds the program.
    pub source: Option<String>,
}

impl Transport {
    /// The server object's transport: `transport`, or `http` when it has a `url`, else `stdio`.
    fn parse(server: &Value, name: &str) -> Result<Transport, McpError> {
        let url = server.get("url").and_then(Value::as_str);
        let kind = server
            .get("transport")
            .and_then(Value::as_str)
            .unwrap_or(if url.is_some() { "http" } else { "stdio" });
        Ok(match kind {
            "stdio" => {
                let command = server
                    .get("command")
                    .and_then(Value::as_str)
                    .filter(|c| !c.is_empty())
                    .ok_or_else(|| {
                        McpError::Config(format!("MCP server '{name}' (stdio) has no command"))
                    })?;
                Transport::Stdio {
                    command: command.to_owned(),
                    args: strings(server, "args"),
                }
            }
            "http" | "streamable-http" | "streamable_http" => {
                let url = url.filter(|u| !u.is_empty()).ok_or_else(|| {
                    McpError::Config(format!("MCP server '{name}' (http) has no url"))
                })?;
                Transport::Http {
                    url: url.to_owned(),
                    headers: string_map(server, "headers"),
                    header_env: header_env(server),
                    bearer_token_env: server
                        .get("bearer_token_env_var")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                }
            }
            other => {
                return Err(McpError::Config(format!(
                    "MCP server '{name}': transport '{other}' is not supported (stdio or http)"
                )));
            }
        })
    }
}

/// The strings of the array `field` (others skipped; none when it is missing).
pub(crate) fn strings(value: &Value, field: &str) -> Vec<String> {
    value
        .get(field)
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The string values of the object `field` (others skipped; empty when it is missing).
pub(crate) fn string_map(value: &Value, field: &str) -> BTreeMap<String, String> {
    value
        .get(field)
        .and_then(Value::as_object)
        .map(|items| {
            items
                .iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// `header_env`: `(header, credential name)` for each `{header, env}` item.
pub(crate) fn header_env(value: &Value) -> Vec<(String, String)> {
    value
        .get("header_env")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|h| {
                    Some((
                        h.get("header")?.as_str()?.to_owned(),
                        h.get("env")?.as_str()?.to_owned(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

impl ServerSpec {
    /// Reads one server object.
    pub fn parse(server: &Value) -> Result<ServerSpec, McpError> {
        let name = server
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| valid_server_name(n))
            .ok_or_else(|| {
                McpError::Config(
                    "every MCP server needs a name of letters, digits, '-' or '_' (it becomes part of mcp_<server>_<tool>)"
                        .into(),
                )
            })?
            .to_owned();
        let transport = Transport::parse(server, &name)?;
        let env_schema = server
            .get("env_schema")
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(|item| {
                        Some(EnvKey {
                            key: item.get("key")?.as_str()?.to_owned(),
                            required: item.get("required").and_then(Value::as_bool) == Some(true),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(ServerSpec {
            transport,
            env: string_map(server, "env"),
            env_schema,
            timeout: Duration::from_millis(
                server
                    .get("tool_call_timeout_ms")
                    .and_then(Value::as_u64)
                    .unwrap_or(DEFAULT_TOOL_CALL_TIMEOUT_MS),
            ),
            restricted: server.get("restricted").and_then(Value::as_bool) == Some(true),
            available_tools: strings(server, "available_tools"),
            run_location: server
                .get("run_location")
                .and_then(Value::as_str)
                .map(str::to_owned),
            source: server
                .get("source")
                .and_then(Value::as_str)
                .map(str::to_owned),
            name,
        })
    }

    /// The credential names this server reads from `adf_identity`, each with whether it is
    /// required: `env_schema` keys, `header_env` variables and the bearer token variable.
    pub fn credential_keys(&self) -> Vec<EnvKey> {
        let mut keys = self.env_schema.clone();
        if let Transport::Http {
            header_env,
            bearer_token_env,
            ..
        } = &self.transport
        {
            for (_, env) in header_env {
                keys.push(EnvKey {
                    key: env.clone(),
                    required: true,
                });
            }
            if let Some(env) = bearer_token_env {
                keys.push(EnvKey {
                    key: env.clone(),
                    required: true,
                });
            }
        }
        keys.dedup_by(|a, b| a.key == b.key);
        keys
    }

    /// The identity purpose holding credential `key` of this server (IDN-38).
    pub fn purpose(&self, key: &str) -> String {
        credential_purpose(&self.name, key)
    }
}

/// `mcp:<server>:<KEY>`, where a server's credentials live in `adf_identity` (IDN-38).
pub fn credential_purpose(server: &str, key: &str) -> String {
    format!("mcp:{server}:{key}")
}

/// A server name usable inside `mcp_<server>_<tool>`.
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Every server declared in `config.mcp.servers` (entries that do not parse are skipped and
/// reported by the caller that needs them).
pub fn servers(config: &Value) -> Vec<Value> {
    config
        .pointer("/mcp/servers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The declaration of server `name`, parsed.
pub fn find_server(config: &Value, name: &str) -> Result<ServerSpec, McpError> {
    let server = config
        .pointer("/mcp/servers")
        .and_then(Value::as_array)
        .and_then(|servers| {
            servers
                .iter()
                .find(|s| s.get("name").and_then(Value::as_str) == Some(name))
        })
        .ok_or_else(|| {
            McpError::NotFound(format!("no MCP server named '{name}' in mcp.servers"))
        })?;
    ServerSpec::parse(server)
}

/// `mcp.new_tools_restricted` (default true, DEF-25).
pub fn new_tools_restricted(config: &Value) -> bool {
    config
        .pointer("/mcp/new_tools_restricted")
        .and_then(Value::as_bool)
        != Some(false)
}

/// The `(server, tool)` of a declaration name `mcp_<server>_<tool>` for a server declared in
/// `config` (server names may hold `_`, so the longest declared prefix wins).
pub fn split_tool_name<'a>(config: &Value, name: &'a str) -> Option<(String, &'a str)> {
    let rest = name.strip_prefix("mcp_")?;
    let mut best: Option<(String, &'a str)> = None;
    for server in servers(config) {
        let Some(server_name) = server.get("name").and_then(Value::as_str) else {
            continue;
        };
        if let Some(tool) = rest
            .strip_prefix(server_name)
            .and_then(|r| r.strip_prefix('_'))
            .filter(|t| !t.is_empty())
            && best
                .as_ref()
                .is_none_or(|(b, _)| b.len() < server_name.len())
        {
            best = Some((server_name.to_owned(), tool));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn def_25_timeout_defaults_to_sixty_seconds_and_new_tools_are_restricted() {
        let spec = ServerSpec::parse(&json!({"name": "fs", "command": "node"})).unwrap();
        assert_eq!(spec.timeout, Duration::from_millis(60_000));
        assert!(new_tools_restricted(&json!({})));
        assert!(!new_tools_restricted(
            &json!({"mcp": {"new_tools_restricted": false}})
        ));
    }

    #[test]
    fn split_prefers_the_longest_declared_server() {
        let config = json!({"mcp": {"servers": [{"name": "a"}, {"name": "a_b"}]}});
        assert_eq!(
            split_tool_name(&config, "mcp_a_b_c"),
            Some(("a_b".to_owned(), "c"))
        );
        assert_eq!(
            split_tool_name(&config, "mcp_a_x"),
            Some(("a".to_owned(), "x"))
        );
        assert_eq!(split_tool_name(&config, "mcp_z_x"), None);
    }
}
