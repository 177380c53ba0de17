//! Field validation of `sys_update_config` (§5.17 step 10): the rules the runtime adds on top
//! of the stored-config schema.
//!
//! Two kinds. Leaf rules (`state`, `model.temperature`, `logging.*`, `name`) judge the written
//! value whenever it changes, however the path reached it. Structural rules (routes, trigger
//! targets, loops, the hook, taps, packages, compute targets, adapter policies, limits) are
//! computed over the whole config and, like the schema check of step 12, only a violation the
//! change introduces blocks it, so an already-invalid config stays editable. Each structural
//! message names the element it is about, so a second bad route is new even when the first one
//! was already there.

use std::collections::BTreeSet;

use serde_json::Value;

/// States `sys_update_config` may write (§5.17; `suspended` is the runtime's).
pub const UPDATABLE_STATES: [&str; 4] = ["active", "idle", "hibernate", "off"];

/// First path segments served by the mesh protocol, so no route or shared file may use them.
const RESERVED_SEGMENTS: [&str; 3] = ["inbox", "card", "health"];

/// Tools an inner loop may never hold (§6.4).
const LOOP_FORBIDDEN_TOOLS: [&str; 3] = ["sys_update_config", "loop_manage", "sys_create_adf"];

/// The §5.7 limits that are positive integers (`max_active_turns` may also be null).
const POSITIVE_LIMITS: [&str; 10] = [
    "execution_timeout_ms",
    "max_file_read_tokens",
    "max_file_write_bytes",
    "max_tool_result_tokens",
    "max_tool_result_preview_chars",
    "max_active_turns",
    "max_image_size_bytes",
    "max_audio_size_bytes",
    "max_video_size_bytes",
    "suspend_timeout_ms",
];

/// The first leaf rule the change breaks, as an error message.
pub(crate) fn leaf_error(before: &Value, after: &Value) -> Option<String> {
    let changed = |pointer: &str| {
        let value = after.pointer(pointer);
        (value != before.pointer(pointer)).then_some(value)
    };
    if let Some(state) = changed("/state") {
        match state.and_then(Value::as_str) {
            Some(s) if UPDATABLE_STATES.contains(&s) => {}
            _ => {
                return Some(format!(
                    "state must be one of: {}",
                    UPDATABLE_STATES.join(", ")
                ));
            }
        }
    }
    if let Some(temperature) = changed("/model/temperature")
        && !temperature
            .and_then(Value::as_f64)
            .is_some_and(|t| (0.0..=2.0).contains(&t))
    {
        return Some("model.temperature must be a number between 0 and 2".into());
    }
    if let Some(level) = changed("/logging/default_level")
        && !matches!(
            level.and_then(Value::as_str),
            Some("debug" | "info" | "warn" | "error")
        )
    {
        return Some("logging.default_level must be one of: debug, info, warn, error".into());
    }
    if let Some(rows) = changed("/logging/max_rows") {
        let ok = match rows {
            Some(Value::Null) => true,
            Some(value) => value.as_u64().is_some_and(|n| n >= 1),
            None => true,
        };
        if !ok {
            return Some("logging.max_rows must be a positive integer or null (unlimited)".into());
        }
    }
    if let Some(name) = changed("/name") {
        return name_error(name);
    }
    None
}

/// The agent's name becomes its file name, so it must be one on every platform (\[C28\]).
fn name_error(name: Option<&Value>) -> Option<String> {
    let Some(name) = name.and_then(Value::as_str) else {
        return Some("name must be a non-empty string".into());
    };
    let trimmed = name.trim();
    if trimmed.is_empty() {
        return Some("name must be a non-empty string".into());
    }
    if name.chars().count() > 100 {
        return Some("name must be at most 100 characters".into());
    }
    if name
        .chars()
        .any(|c| c.is_control() || "<>:\"/\\|?*".contains(c))
        || trimmed.ends_with('.')
    {
        return Some(
            "name contains characters not allowed in file names (<>:\"/\\|?*, control characters, a trailing dot)"
                .into(),
        );
    }
    None
}

/// The structural violations `after` has and `before` had not.
pub(crate) fn new_structural(before: &Value, after: &Value) -> Vec<String> {
    let old: BTreeSet<String> = structural(before).into_iter().collect();
    structural(after)
        .into_iter()
        .filter(|v| !old.contains(v))
        .collect()
}

fn structural(config: &Value) -> Vec<String> {
    let mut out = Vec::new();
    routes(config, &mut out);
    targets(config, &mut out);
    loops(config, &mut out);
    hook(config, &mut out);
    taps(config, &mut out);
    misc(config, &mut out);
    out
}

fn array<'a>(config: &'a Value, pointer: &str) -> &'a [Value] {
    config
        .pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn first_segment(path: &str) -> &str {
    path.trim_start_matches('/').split('/').next().unwrap_or("")
}

/// §5.14: routes need a `/` path off the reserved segments, a known method and a lambda.
fn routes(config: &Value, out: &mut Vec<String>) {
    for route in array(config, "/serving/api") {
        let path = route.get("path").and_then(Value::as_str);
        let label = path.unwrap_or("?");
        match path {
            None => out.push("serving.api[]: every route needs a path".into()),
            Some(p) if !p.starts_with('/') => {
                out.push(format!("serving.api[{label}]: route path must start with \"/\""));
            }
            Some(p) if RESERVED_SEGMENTS.contains(&first_segment(p)) => out.push(format!(
                "serving.api[{label}]: route path must not use the reserved segment \"{}\" (inbox/card/health are protocol mailboxes)",
                first_segment(p)
            )),
            Some(_) => {}
        }
        if let Some(method) = route.get("method")
            && !matches!(
                method.as_str(),
                Some("GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "WS")
            )
        {
            out.push(format!(
                "serving.api[{label}]: method must be GET, POST, PUT, PATCH, DELETE or WS"
            ));
        }
        match route.get("lambda").and_then(Value::as_str) {
            None => out.push(format!("serving.api[{label}]: every route needs a lambda")),
            Some(lambda) if !is_lambda_ref(lambda) => out.push(format!(
                "serving.api[{label}]: lambda must be in the form \"file.ts:functionName\""
            )),
            Some(_) => {}
        }
    }
    for pattern in array(config, "/serving/shared/patterns") {
        if let Some(p) = pattern.as_str()
            && RESERVED_SEGMENTS.contains(&first_segment(p))
        {
            out.push(format!(
                "serving.shared.patterns[{p}]: must not start with a reserved segment (inbox/card/health)"
            ));
        }
    }
}

fn is_lambda_ref(lambda: &str) -> bool {
    lambda
        .rfind(':')
        .is_some_and(|i| i > 0 && i + 1 < lambda.len())
}

/// §7.2: code fields only on system scope, `lambda` xor `command`, one timing modifier,
/// `batch_count` with `batch_ms`, timings positive integers.
fn targets(config: &Value, out: &mut Vec<String>) {
    let Some(triggers) = config.get("triggers").and_then(Value::as_object) else {
        return;
    };
    for (kind, trigger) in triggers {
        for (i, target) in array(trigger, "/targets").iter().enumerate() {
            let at = format!("triggers.{kind}.targets[{i}]");
            let system = target.get("scope").and_then(Value::as_str) == Some("system");
            let has = |field: &str| target.get(field).is_some_and(|v| !v.is_null());
            if !system && (has("lambda") || has("command") || has("warm")) {
                out.push(format!(
                    "{at}: lambda, command and warm are only allowed on system scope targets"
                ));
            }
            if has("lambda") && has("command") {
                out.push(format!("{at}: set lambda or command, not both"));
            }
            let timings = ["debounce_ms", "interval_ms", "batch_ms"];
            if timings.iter().filter(|t| has(t)).count() > 1 {
                out.push(format!(
                    "{at}: only one timing modifier (debounce_ms, interval_ms, batch_ms) is allowed per target"
                ));
            }
            if has("batch_count") && !has("batch_ms") {
                out.push(format!("{at}: batch_count requires batch_ms"));
            }
            for timing in timings.iter().chain(&["batch_count"]) {
                if let Some(v) = target.get(*timing).filter(|v| !v.is_null())
                    && v.as_u64().is_none_or(|n| n == 0)
                {
                    out.push(format!("{at}: {timing} must be a positive integer"));
                }
            }
        }
    }
}

/// §6.4: loop names, uniqueness, goal and tool bounds.
fn loops(config: &Value, out: &mut Vec<String>) {
    let mut seen = BTreeSet::new();
    for declared in array(config, "/loops") {
        let name = declared.get("name").and_then(Value::as_str).unwrap_or("");
        let at = format!("loops[{name}]");
        if name == "main" {
            out.push(format!(
                "{at}: 'main' always exists and must not be declared"
            ));
        } else if !is_loop_name(name) {
            out.push(format!(
                "{at}: loop names must match ^[a-z0-9][a-z0-9_-]{{0,31}}$"
            ));
        }
        if !seen.insert(name.to_lowercase()) {
            out.push(format!(
                "{at}: loop names must be unique (case-insensitively)"
            ));
        }
        if declared
            .get("goal")
            .and_then(Value::as_str)
            .is_some_and(|g| g.chars().count() > 4000)
        {
            out.push(format!("{at}: goal must be at most 4000 characters"));
        }
        let tools = array(declared, "/tools");
        if tools.len() > 64 {
            out.push(format!("{at}: at most 64 tools"));
        }
        for tool in tools.iter().filter_map(Value::as_str) {
            if LOOP_FORBIDDEN_TOOLS.contains(&tool) {
                out.push(format!("{at}: an inner loop may not hold {tool}"));
            }
        }
    }
}

fn is_loop_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 32
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
}

/// §5.21.
fn hook(config: &Value, out: &mut Vec<String>) {
    let Some(hook) = config.get("pre_llm_hook").filter(|h| !h.is_null()) else {
        return;
    };
    let scope = hook.get("scope").and_then(Value::as_str).unwrap_or("all");
    if !matches!(scope, "all" | "main" | "loops") {
        out.push("pre_llm_hook.scope: must be all, main or loops".into());
    }
    let loops = array(hook, "/loops");
    if loops.iter().any(|l| l.as_str() == Some("main")) {
        out.push("pre_llm_hook.loops: must not contain main (use include_main)".into());
    }
    if scope == "loops" && loops.is_empty() {
        out.push("pre_llm_hook.loops: required when scope is loops".into());
    }
    if let Some(timeout) = hook.get("timeout_ms").filter(|v| !v.is_null())
        && !timeout
            .as_u64()
            .is_some_and(|t| (1000..=300_000).contains(&t))
    {
        out.push("pre_llm_hook.timeout_ms: must be 1000-300000".into());
    }
}

/// §5.24: a wildcard tap must say so.
fn taps(config: &Value, out: &mut Vec<String>) {
    for tap in array(config, "/umbilical_taps") {
        let name = tap.get("name").and_then(Value::as_str).unwrap_or("?");
        let filter = tap.get("filter");
        let types = filter
            .and_then(|f| f.get("event_types"))
            .and_then(Value::as_array);
        // Absent event_types default to ["*"].
        let wildcard = types.is_none_or(|types| {
            types
                .iter()
                .filter_map(Value::as_str)
                .any(|t| t == "*" || t.ends_with(".*"))
        });
        let allowed = filter
            .and_then(|f| f.get("allow_wildcard"))
            .and_then(Value::as_bool)
            == Some(true);
        if wildcard && !allowed {
            out.push(format!(
                "umbilical_taps[{name}]: wildcard event_types require filter.allow_wildcard: true"
            ));
        }
    }
}

/// §5.7, §5.9, §5.12, §5.13.
fn misc(config: &Value, out: &mut Vec<String>) {
    if array(config, "/code_execution/packages").len() > 50 {
        out.push("code_execution.packages: at most 50 packages".into());
    }
    if let Some(target) = config
        .pointer("/compute/default_target")
        .and_then(Value::as_str)
        && let Some(allowed) = config
            .pointer("/compute/allowed_targets")
            .and_then(Value::as_array)
        && !allowed.iter().any(|t| t.as_str() == Some(target))
    {
        out.push(format!(
            "compute.default_target: '{target}' must be one of allowed_targets"
        ));
    }
    if let Some(adapters) = config.get("adapters").and_then(Value::as_object) {
        for (kind, adapter) in adapters {
            for (field, allowed) in [
                ("dm", ["all", "allowlist", "none"]),
                ("groups", ["all", "mention", "none"]),
            ] {
                if let Some(value) = adapter.pointer(&format!("/policy/{field}"))
                    && !value.as_str().is_some_and(|v| allowed.contains(&v))
                {
                    out.push(format!(
                        "adapters.{kind}.policy.{field}: must be one of {}",
                        allowed.join(", ")
                    ));
                }
            }
        }
    }
    for limit in POSITIVE_LIMITS {
        if let Some(value) = config.pointer(&format!("/limits/{limit}")) {
            let nullable = limit == "max_active_turns";
            let ok = (nullable && value.is_null()) || value.as_u64().is_some_and(|n| n > 0);
            if !ok {
                out.push(format!(
                    "limits.{limit}: must be a positive integer{}",
                    if nullable { " or null" } else { "" }
                ));
            }
        }
    }
}
