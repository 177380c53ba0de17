//! Built-in tools: config. `sys_get_config` reads the config (secrets redacted) or one section
//! of it; `sys_update_config` changes one dot path, deciding the agent-facing rules of
//! missing-tables §5.17 in their documented order and handing the result to the store.
//!
//! Who is bound by what: the model and all code meet the hard denials (steps 3–5) and
//! declaration integrity (step 11) with no way around them. Locks (step 9) stop the model and
//! unauthorized code with a protection the owner may lift once (the pipeline turns a model's
//! refusal into that request); authorized code and owner-approved calls pass, logged, with a
//! `⚠ protection override` marker. The owner calling the tool is the runtime's own control and
//! meets only what binds every writer: the path mechanics, field rules and the schema.

mod redact;
mod rules;

use std::collections::BTreeMap;
use std::sync::Arc;

use adf_store::config::{
    KNOWN_TOP_LEVEL, Segment, apply_path, get_path, new_violations, parse_path, resolve_segments,
};
use adf_store::protection::{self, Change, ConfigLock, Decision};
use adf_store::{ConfigAction, Protection, StoreError};
use serde_json::{Value, json};

use crate::tools::{ErrorCode, ProtectionHit, Tool, ToolContext, ToolError, ToolRegistry, access};

pub use redact::{REDACTED, is_secret_name, redact};
pub use rules::UPDATABLE_STATES;
/// The field rules of step 10, shared with `sys_create_adf`, which validates a child's config
/// against the defaults the same way.
pub(crate) use rules::{leaf_error, new_structural};

/// The tools of this family.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(GetConfig), Arc::new(UpdateConfig)]
}

const INSPECT_HINT: &str = " Use sys_get_config to inspect the current configuration.";

/// `sys_get_config`.
struct GetConfig;

impl Tool for GetConfig {
    declare_tool! {
        name: "sys_get_config",
        description: "Read your configuration with secret values shown as __redacted__. section: \"config\" \
         (default, everything), \"tools\" (every tool with its flags and JSON Schema, hidden and \
         disabled ones included), \"limits\", \"card\" (your agent card, when served on the mesh) \
         or \"provider_status\".",
        parameters: json!({
            "type": "object",
            "properties": {
                "section": {
                    "type": "string",
                    "enum": ["config", "card", "provider_status", "tools", "limits"],
                    "description": "Which part to return; the whole config when omitted."
                }
            },
            "additionalProperties": false
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let config = cx.file.config()?;
        match args
            .get("section")
            .and_then(Value::as_str)
            .unwrap_or("config")
        {
            "config" => Ok(redact(&config)),
            "limits" => Ok(redact(
                config
                    .get("limits")
                    .unwrap_or(&Value::Object(Default::default())),
            )),
            "tools" => Ok(Value::Array(describe_tools(cx.registry, &config))),
            "provider_status" => Ok(provider_status(&config)),
            "card" => Err(ToolError::new(
                ErrorCode::MeshNotEnabled,
                "the agent card is only available while the agent is served on the mesh, and this agent is not being served",
            )),
            other => Err(ToolError::invalid(format!("unknown section '{other}'"))),
        }
    }
}

/// Every declared tool with its effective flags, where it comes from and its schema, as the
/// registry running the call resolves them (an MCP tool is implemented when its binary
/// attached the MCP source).
fn describe_tools(registry: &ToolRegistry, config: &Value) -> Vec<Value> {
    let mut tools = registry.describe(config);
    for tool in &mut tools {
        let source = if tool
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| n.starts_with("mcp_"))
        {
            "mcp"
        } else {
            "builtin"
        };
        if let Some(object) = tool.as_object_mut() {
            object.insert("source".into(), Value::String(source.into()));
        }
    }
    tools
}

/// Rate-limit and usage metadata is reported only by subscription providers, none of which
/// this runtime speaks yet: the section says which provider is in use and that it reports
/// nothing, rather than failing.
fn provider_status(config: &Value) -> Value {
    let model = config.get("model");
    let field = |name: &str| {
        model
            .and_then(|m| m.get(name))
            .cloned()
            .unwrap_or(Value::Null)
    };
    json!({
        "provider": field("provider"),
        "model_id": field("model_id"),
        "status": null,
        "message": "this provider reports no rate-limit or usage status"
    })
}

/// `sys_update_config`.
struct UpdateConfig;

impl Tool for UpdateConfig {
    declare_tool! {
        name: "sys_update_config",
        description: "Update your configuration at a dot path. action \"set\" (default) replaces the value, \
         \"append\" pushes onto an array, \"remove\" deletes the array element at index. Address \
         named array elements by name (\"tools.fs_read.enabled\", or id for providers, \
         ws_connections and stream_bindings); numeric segments index arrays. Locked fields and \
         items need the owner's approval; restricted, locked and guard settings are the owner's \
         alone. Use sys_get_config first.",
        parameters: json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Dot path, e.g. \"description\", \"model.temperature\", \"tools.sys_code.enabled\", \"triggers.on_chat.enabled\", \"serving.api.0.warm\"."
                },
                "value": { "description": "The new value: any JSON. Required for set and append." },
                "action": { "type": "string", "enum": ["set", "append", "remove"] },
                "index": {
                    "type": ["integer", "string"],
                    "description": "Array index for action \"remove\"."
                }
            },
            "required": ["path"],
            "additionalProperties": false
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let request = Request::parse(&args)?;
        update(cx, request)
    }

    /// Every rule but the write, so a change that would be refused is refused before the
    /// owner is asked to approve it. A protection hit passes: lifting it is the owner's
    /// one-time decision, asked when the call runs.
    fn check(&self, cx: &ToolContext<'_>, args: &Value) -> Result<(), ToolError> {
        match plan_update(cx, Request::parse(args)?) {
            Err(error) if error.protection.is_none() => Err(error),
            _ => Ok(()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Set,
    Append,
    Remove,
}

#[derive(Debug)]
struct Request {
    path: String,
    value: Option<Value>,
    action: Action,
    index: Option<usize>,
}

impl Request {
    fn parse(args: &Value) -> Result<Self, ToolError> {
        let path = args
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::invalid("path is required"))?
            .to_owned();
        let action = match args.get("action").and_then(Value::as_str) {
            None | Some("set") => Action::Set,
            Some("append") => Action::Append,
            Some("remove") => Action::Remove,
            Some(other) => {
                return Err(ToolError::invalid(format!(
                    "action must be set, append or remove, not '{other}'"
                )));
            }
        };
        let index = match args.get("index") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => Some(n.as_u64().ok_or_else(bad_index)?),
            Some(Value::String(s)) => Some(s.trim().parse::<u64>().map_err(|_| bad_index())?),
            Some(_) => return Err(bad_index()),
        };
        let index = index
            .map(usize::try_from)
            .transpose()
            .map_err(|_| bad_index())?;
        // Step 1: models send JSON scalars as strings.
        let value = args.get("value").cloned().map(|v| coerce(v, &path));
        Ok(Self {
            path,
            value,
            action,
            index,
        })
    }
}

fn bad_index() -> ToolError {
    ToolError::invalid("index must be a non-negative integer")
}

/// §5.17 step 1: `"true"`/`"false"` become booleans everywhere; numeric strings become numbers
/// only where the leaf name says the field is numeric.
fn coerce(value: Value, path: &str) -> Value {
    let Value::String(text) = &value else {
        return value;
    };
    match text.as_str() {
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        _ => {}
    }
    let leaf = path.rsplit('.').next().unwrap_or(path);
    if is_numeric_leaf(leaf) {
        if let Ok(integer) = text.parse::<i64>() {
            return json!(integer);
        }
        if let Ok(float) = text.parse::<f64>()
            && float.is_finite()
        {
            return json!(float);
        }
    }
    value
}

fn is_numeric_leaf(leaf: &str) -> bool {
    const NAMES: [&str; 8] = [
        "temperature",
        "top_p",
        "level",
        "port",
        "chain_id",
        "max_rows",
        "max_events",
        "index",
    ];
    const SUFFIXES: [&str; 15] = [
        "_ms",
        "_bytes",
        "_tokens",
        "_chars",
        "_count",
        "_rows",
        "_events",
        "_turns",
        "_threshold",
        "_budget",
        "_sec",
        "_size",
        "_runs",
        "_port",
        "_delay",
    ];
    NAMES.contains(&leaf) || SUFFIXES.iter().any(|s| leaf.ends_with(s))
}

/// Segments no agent write may touch (step 3).
const OWNER_ONLY_SEGMENTS: [&str; 4] = [
    "locked",
    "locked_fields",
    "restricted",
    "restricted_methods",
];
/// Top-level fields no agent write may touch (step 4).
const DENIED_TOP_LEVEL: [&str; 5] = [
    "adf_version",
    "id",
    "metadata",
    "locked_fields",
    "providers",
];
/// `security` switches that decide what needs approval at all (step 5): every path at or
/// below them is hard-denied.
const GUARD_SWITCHES: [&str; 4] = [
    "allow_unsigned",
    "require_middleware_authorization",
    "middleware",
    "fetch_middleware",
];
/// Arrays of declarations whose elements are identified by `name` or `id` (step 11).
const DECLARATION_ARRAYS: [(&str, &str); 6] = [
    ("/tools", "name"),
    ("/serving/api", "name"),
    ("/ws_connections", "id"),
    ("/stream_bindings", "id"),
    ("/umbilical_taps", "name"),
    ("/mcp/servers", "name"),
];

fn hard_denial(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorCode::WriteError, message)
}

fn key_of(segment: &Segment) -> Option<&str> {
    match segment {
        Segment::Key(key) => Some(key),
        Segment::Index(_) => None,
    }
}

/// A config change that passed every rule and awaits only its write.
struct PlannedUpdate {
    after: Value,
    /// The locked path an authorized or owner-approved write overrides.
    bypassed: Option<String>,
}

fn update(cx: &mut ToolContext<'_>, request: Request) -> Result<Value, ToolError> {
    let (path, action, index) = (request.path.clone(), request.action, request.index);
    let PlannedUpdate { after, bypassed } = plan_update(cx, request)?;

    // Step 13.
    cx.file
        .config_write_checked(cx.store_caller(), after, bypassed.as_deref())?;
    let mut result = match action {
        Action::Set => format!("Updated {path}."),
        Action::Append => format!("Appended to {path}."),
        Action::Remove => format!("Removed index {} from {path}.", index.unwrap_or_default()),
    };
    if bypassed.is_some() {
        result.push_str(" ⚠ protection override");
    }
    Ok(Value::String(result))
}

/// Steps 2 to 12 of §5.17: everything but the write, reading the file only.
fn plan_update(cx: &ToolContext<'_>, request: Request) -> Result<PlannedUpdate, ToolError> {
    let Request {
        path,
        value,
        action,
        index,
    } = request;
    let bound_by_agent_rules = cx.store_caller() != adf_store::Caller::Owner;

    // Step 2.
    let segments = parse_path(&path)?;
    let first = segments.first().and_then(key_of).unwrap_or_default();

    if bound_by_agent_rules {
        agent_path_rules(&segments, first, action)?;
    } else if matches!(first, "id" | "adf_version") {
        return Err(ToolError::invalid(format!("config.{first} never changes")));
    }
    let (store_action, value) = what_to_write(action, index, value)?;

    let before = cx.file.config()?;

    // Step 7.
    if action != Action::Remove && !KNOWN_TOP_LEVEL.contains(&first) && before.get(first).is_none()
    {
        return Err(ToolError::invalid(format!(
            "'{first}' is not a config section; known sections: {}",
            KNOWN_TOP_LEVEL.join(", ")
        )));
    }

    // Step 8.
    let resolved = resolve_segments(&before, &segments).map_err(|error| match error {
        StoreError::NotFound { name, .. } => ToolError::not_found(format!(
            "no element named '{}' in '{}' (a name segment selects the array element with that name, or id for providers, ws_connections and stream_bindings).{INSPECT_HINT}",
            name.rsplit('.').next().unwrap_or(&name),
            name.rsplit_once('.').map_or("", |(parent, _)| parent),
        )),
        other => other.into(),
    })?;

    let bypassed = if bound_by_agent_rules {
        lock_bypass(cx, &before, &resolved, action, index, &path)?
    } else {
        None
    };

    let mut after = before.clone();
    apply(&mut after, &path, action, store_action, value)?;
    check_written_config(
        &before,
        &after,
        &resolved,
        &path,
        action,
        bound_by_agent_rules,
    )?;
    Ok(PlannedUpdate { after, bypassed })
}

/// Steps 3 to 5: the paths an agent may never write, whatever the value.
fn agent_path_rules(segments: &[Segment], first: &str, action: Action) -> Result<(), ToolError> {
    // Step 3.
    for key in segments.iter().filter_map(key_of) {
        if OWNER_ONLY_SEGMENTS.contains(&key) {
            let what = if key.starts_with("locked") {
                "locking"
            } else {
                "restriction"
            };
            return Err(hard_denial(format!(
                "cannot modify {what} configuration ('{key}' is the owner's to change)"
            )));
        }
    }
    // Step 4.
    if DENIED_TOP_LEVEL.contains(&first) {
        return Err(hard_denial(format!(
            "'{first}' cannot be modified by the agent; ask your owner to change it"
        )));
    }
    // Step 5.
    if first == "security" {
        let switch = segments.get(1).and_then(key_of);
        if segments.len() == 1 && action == Action::Set {
            return Err(hard_denial(
                "the whole 'security' object cannot be replaced by the agent; change individual fields or ask your owner",
            ));
        }
        if let Some(switch) = switch.filter(|s| GUARD_SWITCHES.contains(s)) {
            return Err(hard_denial(format!(
                "'security.{switch}' decides what needs approval and is not agent-writable; ask your owner to change it in the app"
            )));
        }
    }
    Ok(())
}

/// Step 6 (and its twin: set and append need something to write).
fn what_to_write(
    action: Action,
    index: Option<usize>,
    value: Option<Value>,
) -> Result<(ConfigAction, Value), ToolError> {
    let store_action = match (action, index) {
        (Action::Remove, None) => {
            return Err(ToolError::invalid("action \"remove\" requires index"));
        }
        (Action::Remove, Some(index)) => ConfigAction::Remove { index },
        (Action::Set, _) => ConfigAction::Set,
        (Action::Append, _) => ConfigAction::Append,
    };
    let value = match (action, value) {
        (Action::Remove, _) => Value::Null,
        (_, Some(value)) => value,
        (_, None) => {
            return Err(ToolError::invalid(
                "value is required for action \"set\" and \"append\"",
            ));
        }
    };
    Ok((store_action, value))
}

/// Step 9: a locked path refuses the agent, unless authorized code or the owner's approval
/// is writing; then the write goes through and names the path it overrode. Which lock covers
/// the change, and whom it binds, the store's protection module decides.
fn lock_bypass(
    cx: &ToolContext<'_>,
    before: &Value,
    resolved: &[Segment],
    action: Action,
    index: Option<usize>,
    path: &str,
) -> Result<Option<String>, ToolError> {
    let change = match action {
        Action::Set => ConfigAction::Set,
        Action::Append => ConfigAction::Append,
        Action::Remove => ConfigAction::Remove {
            index: index.unwrap_or_default(),
        },
    };
    let locked = match protection::config_lock(before, resolved, &change) {
        ConfigLock::Free => return Ok(None),
        ConfigLock::Refused(message) => return Err(hard_denial(message)),
        ConfigLock::Locked(sentence) => sentence,
    };
    match protection::decide(cx.store_caller(), Protection::ConfigLocked, Change::Write) {
        Decision::Refuse | Decision::OnlyIncrease => Err(ToolError {
            code: ErrorCode::WriteError,
            message: format!(
                "{locked} Your owner may approve this change once; it was not applied."
            ),
            protection: Some(ProtectionHit {
                kind: adf_store::ProtectedKind::Config.to_string(),
                target: path.to_owned(),
                level: Protection::ConfigLocked,
                why: None,
            }),
        }),
        Decision::Bypass | Decision::Allow => Ok(Some(path.to_owned())),
    }
}

/// Steps 10 to 12: the changed config keeps its leaves' types, adds no structural error,
/// loosens nothing the path rules protect (agents) and adds no schema violation.
fn check_written_config(
    before: &Value,
    after: &Value,
    resolved: &[Segment],
    path: &str,
    action: Action,
    bound_by_agent_rules: bool,
) -> Result<(), ToolError> {
    // Step 10.
    if let Some(message) = rules::leaf_error(before, after) {
        return Err(ToolError::invalid(message));
    }
    let structural = rules::new_structural(before, after);
    if !structural.is_empty() {
        return Err(ToolError::invalid(structural.join("; ")));
    }

    // Step 11, and the value side of step 3: a written value may not loosen what the path
    // rules protect.
    if bound_by_agent_rules {
        if action == Action::Set {
            guard_values_kept(before, after, resolved, path)?;
        }
        if action != Action::Remove {
            declaration_integrity(before, after)?;
        }
    }

    // Step 12.
    reject_new_violations(before, after)
}

/// Applies the change; `append` to a missing array creates it, as the reference does.
fn apply(
    config: &mut Value,
    path: &str,
    action: Action,
    store_action: ConfigAction,
    value: Value,
) -> Result<(), ToolError> {
    if action == Action::Append && get_path(config, path)?.is_none() {
        apply_path(config, path, ConfigAction::Set, Value::Array(vec![value]))?;
    } else {
        apply_path(config, path, store_action, value)?;
    }
    Ok(())
}

/// The name a path uses for an array element: its `name`, else its `id`.
fn element_label(element: &Value) -> Option<String> {
    ["name", "id"]
        .iter()
        .find_map(|k| element.get(*k).and_then(Value::as_str))
        .map(str::to_owned)
}

/// The protection-deciding fields below `value`, keyed by name-form path: lists
/// (`restricted_methods`, `locked_fields`) with their value, and `locked`/`restricted` flags
/// that are true.
fn guard_entries(value: &Value, prefix: &str, out: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let at = format!("{prefix}.{key}");
                match key.as_str() {
                    "restricted_methods" | "locked_fields" => {
                        out.insert(at, child.clone());
                    }
                    "locked" | "restricted" if child.as_bool() == Some(true) => {
                        out.insert(at, child.clone());
                    }
                    _ => guard_entries(child, &at, out),
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let label = element_label(item).unwrap_or_else(|| i.to_string());
                guard_entries(item, &format!("{prefix}.{label}"), out);
            }
        }
        _ => {}
    }
}

/// A `set` may replace a subtree only if every `locked`/`restricted` flag that was true stays
/// true and every `restricted_methods`/`locked_fields` list stays exactly as it was (an added
/// list replaces a default, so it counts as a change).
fn guard_values_kept(
    before: &Value,
    after: &Value,
    resolved: &[Segment],
    path: &str,
) -> Result<(), ToolError> {
    let at = |config: &Value| {
        let mut node = Some(config);
        for segment in resolved {
            node = match (node, segment) {
                (Some(Value::Object(map)), Segment::Key(key)) => map.get(key),
                (Some(Value::Array(items)), Segment::Index(i)) => items.get(*i),
                _ => None,
            };
        }
        node.cloned().unwrap_or(Value::Null)
    };
    let (mut old, mut new) = (BTreeMap::new(), BTreeMap::new());
    guard_entries(&at(before), "", &mut old);
    guard_entries(&at(after), "", &mut new);
    let is_list =
        |key: &String| key.ends_with(".restricted_methods") || key.ends_with(".locked_fields");
    let loosened = old.iter().any(|(k, v)| new.get(k) != Some(v))
        || new.keys().any(|k| is_list(k) && !old.contains_key(k));
    if loosened {
        return Err(hard_denial(format!(
            "the value written to '{path}' would change locked, restricted, locked_fields or restricted_methods settings, which are the owner's to change"
        )));
    }
    Ok(())
}

/// Whether the effective declaration `name` in `array` has `flag` true: the current one, else
/// (tools only) the built-in default (§5.17 step 11).
fn effective_flag(before: &Value, array: &str, key: &str, name: &str, flag: &str) -> bool {
    if array == "/tools" {
        let (declarations, _) = access::declarations(before);
        if let Some(d) = declarations.iter().find(|d| d.name == name) {
            return if flag == "restricted" {
                d.restricted
            } else {
                d.locked
            };
        }
        return flag == "restricted"
            && adf_store::defaults::default_tool(name).is_some_and(|t| t.3);
    }
    before
        .pointer(array)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|e| e.get(key).and_then(Value::as_str) == Some(name))
        .any(|e| e.get(flag).and_then(Value::as_bool) == Some(true))
}

/// §5.17 step 11: no new duplicate `name`/`id`, and no new or rewritten declaration without a
/// `restricted`/`locked` flag its effective declaration has (an absent flag reads as false, so
/// leaving it out is the same as writing `false`).
fn declaration_integrity(before: &Value, after: &Value) -> Result<(), ToolError> {
    let elements = |config: &Value, pointer: &str| -> Vec<Value> {
        config
            .pointer(pointer)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    for (pointer, key) in DECLARATION_ARRAYS {
        let old = elements(before, pointer);
        let new = elements(after, pointer);
        if old == new {
            continue;
        }
        let count = |items: &[Value], name: &str| {
            items
                .iter()
                .filter(|e| e.get(key).and_then(Value::as_str) == Some(name))
                .count()
        };
        let array = pointer.trim_start_matches('/').replace('/', ".");
        // An exact copy of an existing element is a duplicate too, so every name is counted.
        for name in new
            .iter()
            .filter_map(|e| e.get(key).and_then(Value::as_str))
        {
            let now = count(&new, name);
            if now > 1 && now > count(&old, name) {
                return Err(hard_denial(format!(
                    "{array} already has an element with {key} '{name}'; a duplicate would shadow it, so update the existing entry instead"
                )));
            }
        }
        for element in new.iter().filter(|e| !old.contains(e)) {
            let Some(name) = element.get(key).and_then(Value::as_str) else {
                continue;
            };
            for flag in ["restricted", "locked"] {
                if effective_flag(before, pointer, key, name, flag)
                    && element.get(flag).and_then(Value::as_bool) != Some(true)
                {
                    return Err(hard_denial(format!(
                        "'{name}' in {array} is {flag}; it cannot be re-declared with {flag}: false (only the owner changes {flag})"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Refuses `after` when it has schema violations `before` did not (existing ones are the
/// owner's to fix and never block an unrelated change).
pub(crate) fn reject_new_violations(before: &Value, after: &Value) -> Result<(), ToolError> {
    let added = new_violations(before, after);
    if added.is_empty() {
        return Ok(());
    }
    Err(ToolError::invalid(format!(
        "config rejected: {}",
        added
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    )))
}
