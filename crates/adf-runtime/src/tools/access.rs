//! The access model: who may call which tool (spec §5.4, §8.6, §8.7, tools guide "Access
//! Matrix"). Each question has exactly one function here; call sites never re-derive them.

use serde::Serialize;
use serde_json::Value;

/// Who is calling a tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToolCaller {
    /// The model, from a turn of `loop_name`.
    Model {
        /// The loop whose turn made the call (`main` for the main loop).
        loop_name: String,
    },
    /// Agent code: `sys_code`, a lambda, a trigger or a route. `authorized` is the source
    /// file's flag (§8.6); `source` names the lambda (`path:function`) when there is one.
    Code {
        /// The source file is authorized (§4.3), so restricted tools run without approval.
        authorized: bool,
        /// The lambda reference (`path:function`); `None` for inline `sys_code`.
        source: Option<String>,
    },
    /// The owner (CLI, Studio, daemon API) or the runtime acting for it.
    Owner,
}

impl ToolCaller {
    /// The call comes from a model turn.
    pub fn is_model(&self) -> bool {
        matches!(self, Self::Model { .. })
    }

    /// The call comes from code whose source file is authorized.
    pub fn is_authorized_code(&self) -> bool {
        matches!(
            self,
            Self::Code {
                authorized: true,
                ..
            }
        )
    }

    /// The loop a model caller runs in; `None` for code and the owner.
    pub fn loop_name(&self) -> Option<&str> {
        match self {
            Self::Model { loop_name } => Some(loop_name),
            _ => None,
        }
    }

    /// The inner loop a model caller runs in: `None` for `main` (whose rows leave `loop`
    /// NULL, §6.4), code and the owner.
    pub fn inner_loop(&self) -> Option<&str> {
        self.loop_name().filter(|name| *name != "main")
    }

    /// The store-level caller whose protections apply.
    pub fn store_caller(&self) -> adf_store::Caller {
        match self {
            Self::Model { .. }
            | Self::Code {
                authorized: false, ..
            } => adf_store::Caller::Agent,
            Self::Code {
                authorized: true, ..
            } => adf_store::Caller::AuthorizedCode,
            Self::Owner => adf_store::Caller::Owner,
        }
    }

    /// A short label for task origins and logs.
    pub fn label(&self) -> String {
        match self {
            Self::Model { loop_name } => format!("model:{loop_name}"),
            Self::Code { authorized, source } => {
                let trust = if *authorized { "authorized" } else { "code" };
                source
                    .as_ref()
                    .map_or_else(|| trust.to_owned(), |s| format!("{trust}:{s}"))
            }
            Self::Owner => "owner".to_owned(),
        }
    }
}

/// One effective tool declaration after duplicates collapsed (§5.4).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Declaration {
    /// The tool's name, e.g. `fs_read`.
    pub name: String,
    /// The tool may be called at all.
    pub enabled: bool,
    /// The tool is advertised to the model (when also enabled).
    pub visible: bool,
    /// A call needs the owner's approval unless authorized code makes it.
    pub restricted: bool,
    /// Owner lock: the agent cannot change this declaration.
    pub locked: bool,
}

/// Declarations of `config.tools`, duplicates collapsed: the first wins for ordinary fields,
/// `restricted` and `locked` are sticky-true. Returns the names that were declared twice, for
/// the `duplicate_tool_declaration` warning.
pub fn declarations(config: &Value) -> (Vec<Declaration>, Vec<String>) {
    let mut out: Vec<Declaration> = Vec::new();
    let mut duplicates = Vec::new();
    let flag = |tool: &Value, key: &str| tool.get(key).and_then(Value::as_bool);
    for tool in config
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(name) = tool.get("name").and_then(Value::as_str) else {
            continue;
        };
        // Legacy name read as its successor (\[C28\]).
        let name = if name == "msg_list_agents" {
            "agent_discover"
        } else {
            name
        };
        let restricted = flag(tool, "restricted").unwrap_or(false);
        let locked = flag(tool, "locked").unwrap_or(false);
        if let Some(existing) = out.iter_mut().find(|d| d.name == name) {
            existing.restricted |= restricted;
            existing.locked |= locked;
            if !duplicates.iter().any(|d| d == name) {
                duplicates.push(name.to_owned());
            }
            continue;
        }
        let enabled = flag(tool, "enabled").unwrap_or(false);
        // \[C28\]: a declaration without `visible` is visible exactly when enabled.
        let visible = flag(tool, "visible").unwrap_or(enabled);
        out.push(Declaration {
            name: name.to_owned(),
            enabled,
            visible,
            restricted,
            locked,
        });
    }
    (out, duplicates)
}

/// Appendix C item 1: the surviving seed text (tools guide) lets the model call an enabled tool
/// by name even when it is not advertised; \[MD\] §8.7 would refuse. Flip here, nowhere else.
pub const MODEL_MAY_CALL_INVISIBLE_TOOLS: bool = true;

/// What the access model says about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// The call runs now.
    Allowed,
    /// The call may run once the owner (or authorized code) approves it (HIL).
    NeedsApproval,
    /// The call is refused with this code and the message the caller reads.
    Refused(super::ErrorCode, String),
}

/// Whether a declaration is shown to the model (§8.7 "advertised").
pub fn advertised(declaration: &Declaration) -> bool {
    declaration.enabled && declaration.visible
}

/// The §8.7 / tools-guide access matrix for one caller and one declaration (`None` when the
/// tool is not declared at all).
pub fn access(caller: &ToolCaller, name: &str, declaration: Option<&Declaration>) -> Access {
    use super::ErrorCode::{Disabled, RequiresAuthorizedCode};
    if *caller == ToolCaller::Owner {
        return Access::Allowed;
    }
    let Some(d) = declaration else {
        return Access::Refused(
            Disabled,
            format!("tool '{name}' is not declared in this agent's config"),
        );
    };
    match caller {
        ToolCaller::Owner => Access::Allowed,
        ToolCaller::Code {
            authorized: true, ..
        } => {
            if d.enabled || d.restricted {
                Access::Allowed
            } else {
                Access::Refused(Disabled, format!("tool '{name}' is disabled"))
            }
        }
        ToolCaller::Code {
            authorized: false, ..
        } => {
            if !d.enabled {
                Access::Refused(Disabled, format!("tool '{name}' is disabled"))
            } else if d.restricted {
                Access::Refused(
                    RequiresAuthorizedCode,
                    format!("tool '{name}' is restricted: only authorized code may call it"),
                )
            } else {
                Access::Allowed
            }
        }
        ToolCaller::Model { .. } => {
            if !d.enabled {
                Access::Refused(Disabled, format!("tool '{name}' is disabled"))
            } else if !d.visible && !MODEL_MAY_CALL_INVISIBLE_TOOLS {
                Access::Refused(
                    Disabled,
                    format!("tool '{name}' is not available to the model"),
                )
            } else if d.restricted {
                Access::NeedsApproval
            } else {
                Access::Allowed
            }
        }
    }
}

/// Whether `caller` may call the code-only method `method` (§5.9): its flag in
/// `code_execution` must not be false, and `restricted_methods` (default
/// `["attestation_issue"]`, replaced, not merged, by an explicit list) keeps it to
/// authorized code. Model-loop calls of a restricted method go to approval.
pub fn method_access(caller: &ToolCaller, config: &Value, method: &str) -> Access {
    use super::ErrorCode::{Disabled, RequiresAuthorizedCode};
    let section = config.get("code_execution");
    if section.and_then(|s| s.get(method)).and_then(Value::as_bool) == Some(false) {
        return Access::Refused(
            Disabled,
            format!("code method '{method}' is disabled in code_execution"),
        );
    }
    let always_authorized = matches!(
        method,
        "authorize_file" | "set_meta_protection" | "set_file_protection"
    );
    let restricted = always_authorized
        || match section
            .and_then(|s| s.get("restricted_methods"))
            .and_then(Value::as_array)
        {
            Some(list) => list.iter().any(|m| m.as_str() == Some(method)),
            None => method == "attestation_issue",
        };
    match caller {
        ToolCaller::Owner
        | ToolCaller::Code {
            authorized: true, ..
        } => Access::Allowed,
        _ if !restricted => Access::Allowed,
        ToolCaller::Model { .. } if !always_authorized => Access::NeedsApproval,
        _ => Access::Refused(
            RequiresAuthorizedCode,
            format!("'{method}' may only be called by authorized code"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn duplicates_collapse_first_wins_and_flags_stick() {
        let config = json!({ "tools": [
            { "name": "fs_write", "enabled": true, "visible": true },
            { "name": "fs_write", "enabled": false, "restricted": true, "locked": true },
            { "name": "fs_read", "enabled": true },
        ]});
        let (decls, duplicates) = declarations(&config);
        assert_eq!(duplicates, vec!["fs_write"]);
        let write = &decls[0];
        assert!(write.enabled && write.visible && write.restricted && write.locked);
        assert!(decls[1].visible, "visible defaults to enabled");
    }
}
