//! Built-in inner-loop tools: `loop_send`, `loop_list`, `loop_manage` (tools guide "Inner Loop
//! Tools", spec §6.4, missing-tables §6.4 and §10.7).
//!
//! The tools change the file only (a row in the target loop, `config.loops`, audit snapshots,
//! timers). Running loops is the executor's business, so results carry what it must act on in
//! data, not prose: `loop_send` returns `"wake": true` when the target should run,
//! `loop_manage` returns `"wake"` for an autostarting new loop and `"stopped"` for a deleted or
//! disabled one. Result formats are ours (Appendix B #13).
//!
//! Choices (Appendix C): a `loop_send` to a disabled loop lands the row, says so, and never
//! wakes it (item 9); a loop created without `tools` gets `loop_send`, `loop_list`,
//! `sys_set_state` (item 8, the spec list).

use std::collections::BTreeSet;
use std::sync::Arc;

use adf_store::{ConfigAction, NewLog, NewLoopRow};
use serde_json::{Map, Value, json};

use crate::tools::{ErrorCode, Tool, ToolCaller, ToolContext, ToolError, access};

/// `loop_send` content cap, the same bound `loop_inject` uses.
pub const MAX_LOOP_SEND_CHARS: usize = 48_000;
/// Inner loops an agent may declare.
pub const MAX_INNER_LOOPS: usize = 16;
/// Tools of a loop created without a list (Appendix C item 8).
pub const DEFAULT_LOOP_TOOLS: [&str; 3] = ["loop_send", "loop_list", "sys_set_state"];
/// Fields `loop_manage update` may patch.
const PATCHABLE: [&str; 7] = [
    "goal",
    "enabled",
    "autostart",
    "autonomous",
    "model",
    "compact_threshold",
    "tools",
];

// ---- Effective tools of an inner loop (spec §6.4, STL-25..27) ----
//
// effective = (`loops[].tools` ∩ the agent's enabled declarations)
//           − {`sys_update_config`, `loop_manage`, `sys_create_adf`} − restricted tools
//           − tools of restricted MCP servers
//           + {`loop_compact`, `loop_clear`} unless the agent disabled or restricted them.
// One function, used by the executor to advertise tools and to refuse calls outside the set.

/// Tools an inner loop never holds, whatever its list says (`LOOP_PROHIBITED_TOOLS`).
pub const LOOP_PROHIBITED_TOOLS: [&str; 3] = ["sys_update_config", "loop_manage", "sys_create_adf"];

/// The tools every inner loop gets unless the agent disabled or restricted them.
pub const LOOP_TRANSCRIPT_TOOLS: [&str; 2] = ["loop_compact", "loop_clear"];

/// The `config.loops[]` entry named `name`, if declared.
pub fn loop_config<'a>(config: &'a Value, name: &str) -> Option<&'a Value> {
    config
        .get("loops")
        .and_then(Value::as_array)?
        .iter()
        .find(|l| l.get("name").and_then(Value::as_str) == Some(name))
}

/// Names of MCP servers the agent declares restricted.
fn restricted_mcp_servers(config: &Value) -> Vec<String> {
    config
        .pointer("/mcp/servers")
        .and_then(Value::as_array)
        .map(|servers| {
            servers
                .iter()
                .filter(|s| s.get("restricted").and_then(Value::as_bool) == Some(true))
                .filter_map(|s| s.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The effective tool set of the inner loop declared by `loop_cfg` (see the module docs).
pub fn effective_loop_tools(config: &Value, loop_cfg: &Value) -> BTreeSet<String> {
    let (declarations, _) = access::declarations(config);
    let restricted_servers = restricted_mcp_servers(config);
    let usable = |name: &str| {
        declarations
            .iter()
            .find(|d| d.name == name)
            .is_some_and(|d| d.enabled && !d.restricted)
    };
    let mut tools: BTreeSet<String> = loop_cfg
        .get("tools")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|name| !LOOP_PROHIBITED_TOOLS.contains(name))
        .filter(|name| usable(name))
        .filter(|name| {
            !restricted_servers
                .iter()
                .any(|server| name.starts_with(&format!("mcp_{server}_")))
        })
        .map(str::to_owned)
        .collect();
    for name in LOOP_TRANSCRIPT_TOOLS {
        if usable(name) {
            tools.insert(name.to_owned());
        }
    }
    tools
}

/// The tools of this family.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(LoopSend), Arc::new(LoopList), Arc::new(LoopManage)]
}

fn caller_loop(caller: &ToolCaller) -> String {
    caller.loop_name().unwrap_or("main").to_owned()
}

fn loops_of(config: &Value) -> Vec<Value> {
    config
        .get("loops")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn loop_name_of(l: &Value) -> &str {
    l.get("name").and_then(Value::as_str).unwrap_or_default()
}

/// The first line of a goal, at most 120 characters.
fn summary(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut out: String = line.chars().take(120).collect();
    if line.chars().count() > 120 {
        out.push('…');
    }
    out
}

struct LoopSend;

impl Tool for LoopSend {
    declare_tool! {
        name: "loop_send",
        description: "Send a message to another loop of this agent (\"main\" is the outward-facing loop). wake: true makes the target read it soon; otherwise it waits until the target next runs.",
        parameters: json!({
            "type": "object",
            "properties": {
                "to_loop": { "type": "string", "description": "Target loop name (loop_list shows them)." },
                "content": { "type": "string", "description": "The message, at most 48,000 characters." },
                "wake": { "type": "boolean", "description": "Run the target soon (default false)." }
            },
            "required": ["to_loop", "content"],
            "additionalProperties": false
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let sender = caller_loop(cx.caller);
        let to = args
            .get("to_loop")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let content = args
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let wake = args.get("wake").and_then(Value::as_bool).unwrap_or(false);
        let chars = content.chars().count();
        if chars > MAX_LOOP_SEND_CHARS {
            return Err(ToolError::invalid(format!(
                "content is {chars} characters; loop_send carries at most {MAX_LOOP_SEND_CHARS}"
            )));
        }
        if to == sender {
            return Err(ToolError::invalid(format!(
                "'{to}' is the loop you are in; loop_send goes to another loop"
            )));
        }
        let enabled = if to == "main" {
            true
        } else {
            let Some(target) = loop_config(cx.config, &to) else {
                return Err(ToolError::not_found(format!(
                    "this agent has no loop named '{to}'; loop_list shows its loops"
                )));
            };
            target.get("enabled").and_then(Value::as_bool) == Some(true)
        };
        let row = json!([{ "type": "text", "text": format!("[from loop:{sender}] {content}") }]);
        let seq = cx.file.loop_append(&NewLoopRow {
            r#loop: &to,
            role: "user",
            content: &row,
            model: None,
            tokens: None,
        })?;
        let mut result = json!({
            "delivered": true,
            "to_loop": to,
            "seq": seq,
            "wake": wake && enabled,
        });
        if !enabled {
            result["note"] = json!(format!(
                "loop '{to}' is disabled: the message is stored but will not be read until the loop is enabled"
            ));
        }
        Ok(result)
    }
}

struct LoopList;

impl Tool for LoopList {
    declare_tool! {
        name: "loop_list",
        description: "List this agent's loops: name, goal summary, whether each is enabled and running, and which one you are.",
        parameters: json!({ "type": "object", "properties": {}, "additionalProperties": false }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, _args: Value) -> Result<Value, ToolError> {
        let me = caller_loop(cx.caller);
        let instructions = cx
            .config
            .get("instructions")
            .and_then(Value::as_str)
            .unwrap_or("");
        let main_goal = if instructions.trim().is_empty() {
            "The agent's outward-facing loop.".to_owned()
        } else {
            summary(instructions)
        };
        // "running" is what this process knows from inside the call: the caller's loop is.
        let mut loops = vec![json!({
            "name": "main",
            "goal": main_goal,
            "enabled": true,
            "running": me == "main",
            "you": me == "main",
        })];
        for l in loops_of(cx.config) {
            let name = loop_name_of(&l).to_owned();
            loops.push(json!({
                "name": name,
                "goal": summary(l.get("goal").and_then(Value::as_str).unwrap_or("")),
                "enabled": l.get("enabled").and_then(Value::as_bool).unwrap_or(false),
                "running": me == name,
                "you": me == name,
            }));
        }
        Ok(json!({ "loops": loops }))
    }
}

struct LoopManage;

fn valid_loop_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 32
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
}

/// Checks the fields of a loop definition (missing-tables §6.4 table).
fn check_fields(config: &Value, fields: &Map<String, Value>) -> Result<(), ToolError> {
    if let Some(goal) = fields.get("goal") {
        let Some(goal) = goal.as_str().filter(|g| !g.trim().is_empty()) else {
            return Err(ToolError::invalid("goal must be a non-empty string"));
        };
        if goal.chars().count() > 4000 {
            return Err(ToolError::invalid("goal is at most 4000 characters"));
        }
    }
    for flag in ["enabled", "autostart", "autonomous"] {
        if let Some(v) = fields.get(flag)
            && !v.is_boolean()
        {
            return Err(ToolError::invalid(format!("{flag} must be true or false")));
        }
    }
    if let Some(t) = fields.get("compact_threshold")
        && !(t.is_null() || t.as_u64().is_some_and(|n| n > 0))
    {
        return Err(ToolError::invalid(
            "compact_threshold must be a positive number of tokens",
        ));
    }
    if let Some(tools) = fields.get("tools") {
        let Some(tools) = tools.as_array() else {
            return Err(ToolError::invalid("tools must be an array of tool names"));
        };
        if tools.len() > 64 {
            return Err(ToolError::invalid("a loop lists at most 64 tools"));
        }
        let (declarations, _) = crate::tools::access::declarations(config);
        for t in tools {
            let Some(name) = t.as_str() else {
                return Err(ToolError::invalid("tools must be an array of tool names"));
            };
            if LOOP_PROHIBITED_TOOLS.contains(&name) {
                return Err(ToolError::invalid(format!(
                    "an inner loop cannot hold {name}"
                )));
            }
            let known = declarations.iter().any(|d| d.name == name)
                || adf_store::defaults::default_tool(name).is_some();
            if !known {
                return Err(ToolError::not_found(format!("unknown tool '{name}'")));
            }
        }
    }
    Ok(())
}

fn loops_locked(config: &Value) -> bool {
    config
        .get("locked_fields")
        .and_then(Value::as_array)
        .is_some_and(|fields| {
            fields
                .iter()
                .filter_map(Value::as_str)
                .any(|f| f == "loops" || f.starts_with("loops."))
        })
}

impl Tool for LoopManage {
    declare_tool! {
        name: "loop_manage",
        description: "Create, inspect, update or delete this agent's inner loops (main only; at most 16). config holds goal, enabled, autostart, autonomous, model, compact_threshold, tools.",
        parameters: json!({
            "type": "object",
            "properties": {
                "action": { "type": "string", "enum": ["create", "get", "update", "delete"] },
                "name": { "type": "string", "description": "The loop's name." },
                "config": { "type": "object", "description": "Loop fields for create and update." }
            },
            "required": ["action"],
            "additionalProperties": false
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        if caller_loop(cx.caller) != "main" {
            return Err(ToolError::new(
                ErrorCode::Disabled,
                "loop_manage is available only in main",
            ));
        }
        let action = args
            .get("action")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let patch = args
            .get("config")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let name = args
            .get("name")
            .and_then(Value::as_str)
            .or_else(|| patch.get("name").and_then(Value::as_str))
            .ok_or_else(|| ToolError::invalid("name is required"))?
            .to_owned();
        if name.eq_ignore_ascii_case("main") {
            return Err(ToolError::invalid(
                "main is implicit: loop_manage cannot create, read, update or delete it",
            ));
        }
        let loops = loops_of(cx.config);
        let index = loops.iter().position(|l| loop_name_of(l) == name);
        if action != "get" && loops_locked(cx.config) {
            return Err(ToolError::new(ErrorCode::Disabled, "'loops' is locked."));
        }
        let existing =
            || index.ok_or_else(|| ToolError::not_found(format!("no loop named '{name}'")));
        match action {
            "get" => get_loop(cx, &loops[existing()?], &name),
            "create" => create_loop(cx, loops, index, &name, &patch),
            "update" => update_loop(cx, loops, existing()?, &name, &patch),
            "delete" => delete_loop(cx, loops, existing()?, &name),
            other => Err(ToolError::invalid(format!(
                "action must be create, get, update or delete, not '{other}'"
            ))),
        }
    }
}

fn get_loop(cx: &mut ToolContext<'_>, l: &Value, name: &str) -> Result<Value, ToolError> {
    Ok(json!({
        "loop": l,
        "effective_tools": effective_loop_tools(cx.config, l),
        "rows": cx.file.loop_rows(name)?.len(),
    }))
}

/// Declares a new inner loop (defaults: enabled, autostart, the default loop tools); an
/// autostarting loop gets its kickoff message and is woken.
fn create_loop(
    cx: &mut ToolContext<'_>,
    mut loops: Vec<Value>,
    index: Option<usize>,
    name: &str,
    patch: &Map<String, Value>,
) -> Result<Value, ToolError> {
    if index.is_some()
        || loops
            .iter()
            .any(|l| loop_name_of(l).eq_ignore_ascii_case(name))
    {
        return Err(ToolError::invalid(format!("a loop named '{name}' exists")));
    }
    if !valid_loop_name(name) {
        return Err(ToolError::invalid(
            "loop names match ^[a-z0-9][a-z0-9_-]{0,31}$",
        ));
    }
    if loops.len() >= MAX_INNER_LOOPS {
        return Err(ToolError::invalid(format!(
            "an agent has at most {MAX_INNER_LOOPS} inner loops"
        )));
    }
    if !patch.contains_key("goal") {
        return Err(ToolError::invalid("config.goal is required"));
    }
    check_fields(cx.config, patch)?;
    let mut l = Map::new();
    l.insert("name".into(), json!(name));
    for key in PATCHABLE {
        if let Some(v) = patch.get(key) {
            l.insert(key.into(), v.clone());
        }
    }
    l.entry("enabled").or_insert(json!(true));
    l.entry("autostart").or_insert(json!(true));
    l.entry("tools").or_insert(json!(DEFAULT_LOOP_TOOLS));
    let l = Value::Object(l);
    loops.push(l.clone());
    write_loops(cx, loops)?;
    let autostart = l.get("autostart").and_then(Value::as_bool) == Some(true)
        && l.get("enabled").and_then(Value::as_bool) == Some(true);
    if autostart {
        let goal = l.get("goal").and_then(Value::as_str).unwrap_or_default();
        let kickoff = json!([{ "type": "text", "text": format!("[from loop:main] You were just created. Your goal: {goal}") }]);
        cx.file.loop_append(&NewLoopRow {
            r#loop: name,
            role: "user",
            content: &kickoff,
            model: None,
            tokens: None,
        })?;
    }
    Ok(json!({ "created": name, "loop": l, "wake": autostart }))
}

/// Patches a loop's fields (never its name); the loop restarts, or stops when disabled.
fn update_loop(
    cx: &mut ToolContext<'_>,
    mut loops: Vec<Value>,
    i: usize,
    name: &str,
    patch: &Map<String, Value>,
) -> Result<Value, ToolError> {
    if let Some(new_name) = patch.get("name").and_then(Value::as_str)
        && new_name != name
    {
        return Err(ToolError::invalid("loops cannot be renamed"));
    }
    if let Some(bad) = patch
        .keys()
        .find(|k| *k != "name" && !PATCHABLE.contains(&k.as_str()))
    {
        return Err(ToolError::invalid(format!(
            "'{bad}' is not a loop field (patchable: {})",
            PATCHABLE.join(", ")
        )));
    }
    check_fields(cx.config, patch)?;
    if let Some(obj) = loops[i].as_object_mut() {
        for (k, v) in patch {
            if k != "name" {
                obj.insert(k.clone(), v.clone());
            }
        }
    }
    let l = loops[i].clone();
    write_loops(cx, loops)?;
    let stopped = l.get("enabled").and_then(Value::as_bool) != Some(true);
    Ok(json!({ "updated": name, "loop": l, "restarted": !stopped, "stopped": stopped }))
}

/// Removes a loop: its transcript is archived, its unlocked timers deleted (locked ones
/// kept), and both are logged.
fn delete_loop(
    cx: &mut ToolContext<'_>,
    mut loops: Vec<Value>,
    i: usize,
    name: &str,
) -> Result<Value, ToolError> {
    loops.remove(i);
    write_loops(cx, loops)?;
    let archived = cx.file.loop_archive_and_delete(name)?;
    let mut dropped = 0;
    let mut kept = 0;
    for timer in cx.file.timers()? {
        if timer.r#loop.as_deref() != Some(name) {
            continue;
        }
        if timer.locked {
            kept += 1;
        } else {
            cx.file.timer_delete(adf_store::Caller::Owner, timer.id)?;
            dropped += 1;
        }
    }
    if dropped > 0 || kept > 0 {
        cx.file.log(&NewLog {
            level: "info",
            origin: Some("executor"),
            event: Some("loop_timers_dropped"),
            target: Some(name),
            message: &format!(
                "deleted {dropped} unlocked timer(s) of loop '{name}', kept {kept} locked"
            ),
            data: None,
            r#loop: None,
        })?;
    }
    cx.file.log(&NewLog {
        level: "info",
        origin: Some("executor"),
        event: Some("loop_torn_down"),
        target: Some(name),
        message: &format!("loop '{name}' deleted; transcript archived"),
        data: None,
        r#loop: None,
    })?;
    Ok(json!({
        "deleted": name,
        "archived_rows": archived.removed,
        "audit_id": archived.audit_id,
        "timers_deleted": dropped,
        "timers_kept": kept,
        "stopped": true,
    }))
}

/// Writes `config.loops` as the runtime acting for the agent: `loop_manage` checked the lock
/// and the fields itself, and the store still rejects a config that would become invalid.
fn write_loops(cx: &mut ToolContext<'_>, loops: Vec<Value>) -> Result<(), ToolError> {
    cx.file.config_set_path(
        adf_store::Caller::Owner,
        "loops",
        ConfigAction::Set,
        Value::Array(loops),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::effective_loop_tools;

    #[test]
    fn stl_25_stl_26_inner_loop_tools_follow_the_intersection_rule() {
        let config = json!({
            "tools": [
                {"name": "fs_read", "enabled": true, "visible": true},
                {"name": "fs_delete", "enabled": false, "visible": false},
                {"name": "sys_update_config", "enabled": true, "visible": true, "restricted": true},
                {"name": "db_query", "enabled": true, "visible": true, "restricted": true},
                {"name": "loop_send", "enabled": true, "visible": true},
                {"name": "loop_manage", "enabled": true, "visible": true},
                {"name": "loop_compact", "enabled": true, "visible": true},
                {"name": "loop_clear", "enabled": true, "visible": true, "restricted": true},
                {"name": "mcp_gh_issues", "enabled": true, "visible": true}
            ],
            "mcp": {"servers": [{"name": "gh", "restricted": true}]}
        });
        let lp = json!({"name": "x", "tools": [
            "fs_read", "fs_delete", "sys_update_config", "db_query", "loop_send", "loop_manage", "mcp_gh_issues"
        ]});
        let got: Vec<String> = effective_loop_tools(&config, &lp).into_iter().collect();
        assert_eq!(got, ["fs_read", "loop_compact", "loop_send"]);
    }
}
