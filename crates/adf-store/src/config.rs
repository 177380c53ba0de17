//! `adf_config`: the agent config as a JSON value that keeps every field it does not know
//! (§0.2, §5), dot-path access (§5.17 steps 2 and 8), and validation that warns on load and
//! rejects only new violations on write (§5).

use std::collections::BTreeSet;

use rusqlite::OptionalExtension as _;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::access::Caller;
use crate::error::{Result, StoreError};
use crate::file::AdfFile;
use crate::{meta, time};

/// One schema violation. `path` has array indices collapsed (`tools[].name`) so that
/// violations can be compared across edits (§5.17 step 12).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Violation {
    /// The dot path of the offending value, array indices collapsed to `[]`.
    pub path: String,
    /// What is wrong with the value there.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// What `config_set_path` does at the target (§5.17 `action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigAction {
    /// Write the value at the path, replacing what is there.
    Set,
    /// Push the value onto the array at the path.
    Append,
    /// Delete the element at `index` from the array at the path.
    Remove {
        /// Zero-based position of the element to delete.
        index: usize,
    },
}

/// Arrays whose elements are addressed by `id` rather than `name` in dot paths.
const ID_KEYED: [&str; 3] = ["providers", "ws_connections", "stream_bindings"];

/// A parsed dot path segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// An object key.
    Key(String),
    /// An array index.
    Index(usize),
}

/// Splits a dot path; non-negative integer segments are array indices (§5.17 step 2).
pub fn parse_path(path: &str) -> Result<Vec<Segment>> {
    if path.is_empty() {
        return Err(StoreError::invalid("empty config path"));
    }
    path.split('.')
        .map(|segment| {
            if segment.is_empty() {
                Err(StoreError::invalid(format!(
                    "config path '{path}' has an empty segment"
                )))
            } else if let Ok(index) = segment.parse::<usize>() {
                Ok(Segment::Index(index))
            } else {
                Ok(Segment::Key(segment.to_owned()))
            }
        })
        .collect()
}

/// Resolves name segments against arrays: `tools.fs_read` selects the element whose `name` is
/// `fs_read` (or `id` for id-keyed arrays). Returns index-only segments.
pub fn resolve_segments(config: &Value, segments: &[Segment]) -> Result<Vec<Segment>> {
    let mut resolved = Vec::with_capacity(segments.len());
    let mut node = Some(config);
    let mut parent_key = String::new();
    for segment in segments {
        let current = node;
        let next_segment = match (current, segment) {
            (Some(Value::Array(items)), Segment::Key(name)) => {
                let field = if ID_KEYED.contains(&parent_key.as_str()) {
                    "id"
                } else {
                    "name"
                };
                let index = items
                    .iter()
                    .position(|item| item.get(field).and_then(Value::as_str) == Some(name.as_str()))
                    .ok_or_else(|| {
                        StoreError::not_found(
                            "config array element",
                            format!("{parent_key}.{name}"),
                        )
                    })?;
                Segment::Index(index)
            }
            _ => segment.clone(),
        };
        node = match (current, &next_segment) {
            (Some(Value::Object(map)), Segment::Key(key)) => map.get(key),
            (Some(Value::Array(items)), Segment::Index(i)) => items.get(*i),
            _ => None,
        };
        if let Segment::Key(key) = &next_segment {
            parent_key.clone_from(key);
        }
        resolved.push(next_segment);
    }
    Ok(resolved)
}

/// An owner edit of `tools.NAME.…` for a tool new files leave undeclared
/// ([`crate::defaults::DECLARED_ON_DEMAND`]) declares it first.
fn declare_on_demand(config: &mut Value, path: &str) {
    let mut parts = path.split('.');
    let (Some("tools"), Some(name), Some(_)) = (parts.next(), parts.next(), parts.next()) else {
        return;
    };
    let Some(default) = crate::defaults::DECLARED_ON_DEMAND
        .iter()
        .find(|t| t.0 == name)
    else {
        return;
    };
    let Some(tools) = config.get_mut("tools").and_then(Value::as_array_mut) else {
        return;
    };
    if !tools
        .iter()
        .any(|t| t.get("name").and_then(Value::as_str) == Some(name))
    {
        tools.push(crate::defaults::tool_declaration(default));
    }
}

/// The value at a dot path, if present.
pub fn get_path<'a>(config: &'a Value, path: &str) -> Result<Option<&'a Value>> {
    let segments = resolve_segments(config, &parse_path(path)?)?;
    let mut node = config;
    for segment in &segments {
        let next = match (node, segment) {
            (Value::Object(map), Segment::Key(key)) => map.get(key),
            (Value::Array(items), Segment::Index(i)) => items.get(*i),
            _ => None,
        };
        match next {
            Some(value) => node = value,
            None => return Ok(None),
        }
    }
    Ok(Some(node))
}

/// Applies `action` at `path`, creating intermediate objects for `set`.
pub fn apply_path(
    config: &mut Value,
    path: &str,
    action: ConfigAction,
    value: Value,
) -> Result<()> {
    crate::config_depth::check_path_depth(path)?;
    let segments = resolve_segments(config, &parse_path(path)?)?;
    let Some((last, parents)) = segments.split_last() else {
        return Err(StoreError::invalid("empty config path"));
    };
    let mut node = config;
    for segment in parents {
        node = match (node, segment) {
            (Value::Object(map), Segment::Key(key)) => map
                .entry(key.clone())
                .or_insert_with(|| Value::Object(Map::new())),
            (Value::Array(items), Segment::Index(i)) => {
                let len = items.len();
                items.get_mut(*i).ok_or_else(|| {
                    StoreError::invalid(format!(
                        "index {i} is out of range (array has {len} elements) in '{path}'"
                    ))
                })?
            }
            _ => {
                return Err(StoreError::invalid(format!(
                    "'{path}' goes through a value that is not an object or array"
                )));
            }
        };
    }
    let target: &mut Value = match (node, last) {
        (Value::Object(map), Segment::Key(key)) => {
            if action == ConfigAction::Set {
                map.insert(key.clone(), value);
                return Ok(());
            }
            map.get_mut(key)
                .ok_or_else(|| StoreError::not_found("config path", path))?
        }
        (Value::Array(items), Segment::Index(i)) => {
            let len = items.len();
            let slot = items.get_mut(*i).ok_or_else(|| {
                StoreError::invalid(format!(
                    "index {i} is out of range (array has {len} elements) in '{path}'"
                ))
            })?;
            if action == ConfigAction::Set {
                *slot = value;
                return Ok(());
            }
            slot
        }
        _ => {
            return Err(StoreError::invalid(format!(
                "'{path}' goes through a value that is not an object or array"
            )));
        }
    };
    let Value::Array(items) = target else {
        return Err(StoreError::invalid(format!(
            "'{path}' is not an array; append and remove need one"
        )));
    };
    match action {
        ConfigAction::Append => items.push(value),
        ConfigAction::Remove { index } => {
            if index >= items.len() {
                return Err(StoreError::invalid(format!(
                    "index {index} is out of range (array has {} elements) in '{path}'",
                    items.len()
                )));
            }
            items.remove(index);
        }
        ConfigAction::Set => {}
    }
    Ok(())
}

/// Every top-level key the config schema knows (§5.1 field map plus tolerated legacy keys).
pub const KNOWN_TOP_LEVEL: [&str; 38] = [
    "adf_version",
    "id",
    "name",
    "description",
    "icon",
    "handle",
    "card",
    "state",
    "start_in_state",
    "autonomous",
    "autostart",
    "model",
    "instructions",
    "include_base_prompt",
    "bare_prompt",
    "context",
    "tools",
    "triggers",
    "loops",
    "security",
    "limits",
    "recovery",
    "pre_llm_hook",
    "messaging",
    "audit",
    "code_execution",
    "logging",
    "mcp",
    "compute",
    "adapters",
    "serving",
    "ws_connections",
    "stream_bind",
    "stream_bindings",
    "umbilical",
    "umbilical_taps",
    "providers",
    "locked_fields",
];

struct Checker {
    found: Vec<Violation>,
}

impl Checker {
    fn push(&mut self, path: &str, message: impl Into<String>) {
        self.found.push(Violation {
            path: path.to_owned(),
            message: message.into(),
        });
    }

    fn kind(&mut self, config: &Value, path: &str, expected: &str) -> bool {
        let Some(value) = lookup(config, path) else {
            return false;
        };
        let ok = match expected {
            "string" => value.is_string(),
            "boolean" => value.is_boolean(),
            "number" => value.is_number(),
            "integer" => value.is_i64() || value.is_u64(),
            "object" => value.is_object(),
            "array" => value.is_array(),
            "integer|null" => value.is_null() || value.is_i64() || value.is_u64(),
            _ => true,
        };
        if !ok {
            self.push(path, format!("must be {expected}"));
        }
        ok
    }

    fn one_of(&mut self, config: &Value, path: &str, allowed: &[&str]) {
        if let Some(value) = lookup(config, path) {
            match value.as_str() {
                Some(text) if allowed.contains(&text) => {}
                _ => self.push(path, format!("must be one of {}", allowed.join(", "))),
            }
        }
    }

    fn range(&mut self, config: &Value, path: &str, min: f64, max: f64) {
        if let Some(value) = lookup(config, path) {
            match value.as_f64() {
                Some(n) if (min..=max).contains(&n) => {}
                Some(_) if value.is_null() => {}
                _ if value.is_null() => {}
                _ => self.push(path, format!("must be a number from {min} to {max}")),
            }
        }
    }
}

/// `config.pointer("/" + path with '.' as '/')` without building the pointer: validation
/// looks up about a hundred paths per config, and formatting each was a fifth of its cost.
fn lookup<'a>(config: &'a Value, path: &str) -> Option<&'a Value> {
    if path.contains('~') {
        // JSON-pointer escapes: leave them to serde_json.
        return config.pointer(&format!("/{}", path.replace('.', "/")));
    }
    path.split(['.', '/'])
        .try_fold(config, |value, token| match value {
            Value::Object(map) => map.get(token),
            Value::Array(items) => array_index(token).and_then(|index| items.get(index)),
            _ => None,
        })
}

/// An array index as JSON pointers write it: digits, no sign, no leading zero.
fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// Validates a config against the schema of §5; returns every violation, sorted.
pub fn validate(config: &Value) -> Vec<Violation> {
    let mut c = Checker { found: Vec::new() };
    if !config.is_object() {
        return vec![Violation {
            path: "".into(),
            message: "the config must be a JSON object".into(),
        }];
    }
    check_identity(&mut c, config);
    check_lifecycle(&mut c, config);
    check_model(&mut c, config);
    check_tools(&mut c, config);
    check_triggers(&mut c, config);
    check_loops(&mut c, config);
    check_security(&mut c, config);
    check_limits(&mut c, config);
    check_messaging(&mut c, config);
    check_code_execution(&mut c, config);
    check_providers(&mut c, config);
    check_typed_only_sections(&mut c, config);
    c.found.sort();
    c.found.dedup();
    c.found
}

/// The identity strings: their types; name and description lengths; the handle pattern.
fn check_identity(c: &mut Checker, config: &Value) {
    for field in [
        "id",
        "name",
        "description",
        "icon",
        "handle",
        "instructions",
        "adf_version",
    ] {
        c.kind(config, field, "string");
    }
    if let Some(name) = config.get("name").and_then(Value::as_str) {
        let length = name.chars().count();
        if !(1..=100).contains(&length) {
            c.push("name", "must be 1-100 characters");
        }
    }
    if let Some(description) = config.get("description").and_then(Value::as_str)
        && description.chars().count() > 2000
    {
        c.push("description", "must be at most 2000 characters");
    }
    if let Some(handle) = config.get("handle").and_then(Value::as_str) {
        let valid = !handle.is_empty()
            && handle.len() <= 64
            && handle
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && handle
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid {
            c.push(
                "handle",
                "must match ^[a-z0-9][a-z0-9-]*$ and be at most 64 characters",
            );
        }
    }
}

/// The lifecycle states and the start-up flags.
fn check_lifecycle(c: &mut Checker, config: &Value) {
    c.one_of(
        config,
        "state",
        &["active", "idle", "hibernate", "suspended", "off"],
    );
    c.one_of(config, "start_in_state", &["active", "idle", "hibernate"]);
    for field in [
        "autonomous",
        "autostart",
        "include_base_prompt",
        "bare_prompt",
    ] {
        c.kind(config, field, "boolean");
    }
}

/// `model`: provider, model id and the sampling and reasoning settings.
fn check_model(c: &mut Checker, config: &Value) {
    if c.kind(config, "model", "object") {
        c.kind(config, "model.provider", "string");
        c.kind(config, "model.model_id", "string");
        c.range(config, "model.temperature", 0.0, 2.0);
        c.range(config, "model.top_p", 0.0, 1.0);
        if c.kind(config, "model.max_tokens", "integer") {
            c.range(config, "model.max_tokens", 1.0, f64::from(u32::MAX));
        }
        c.one_of(
            config,
            "model.reasoning.effort",
            &["minimal", "low", "medium", "high", "xhigh"],
        );
        c.one_of(
            config,
            "model.reasoning.summary",
            &["auto", "concise", "detailed"],
        );
    }
}

/// `tools[]`: every declaration is named and its flags are booleans.
fn check_tools(c: &mut Checker, config: &Value) {
    if let Some(tools) = config.get("tools") {
        match tools.as_array() {
            None => c.push("tools", "must be array"),
            Some(items) => {
                for tool in items {
                    match tool.get("name").and_then(Value::as_str) {
                        Some(name) if !name.is_empty() => {}
                        _ => c.push("tools[].name", "every tool declaration needs a name"),
                    }
                    for flag in ["enabled", "visible", "restricted", "locked"] {
                        if tool.get(flag).is_some_and(|v| !v.is_boolean()) {
                            c.push(&format!("tools[].{flag}"), "must be boolean");
                        }
                    }
                }
            }
        }
    }
}

/// `triggers`: known trigger types, boolean `enabled`, target scopes.
fn check_triggers(c: &mut Checker, config: &Value) {
    if let Some(triggers) = config.get("triggers") {
        match triggers.as_object() {
            None => c.push("triggers", "must be object"),
            Some(map) => {
                for (kind, trigger) in map {
                    if !crate::defaults::TRIGGER_TYPES.contains(&kind.as_str()) {
                        c.push(&format!("triggers.{kind}"), "is not a trigger type");
                        continue;
                    }
                    if trigger.get("enabled").is_some_and(|v| !v.is_boolean()) {
                        c.push(&format!("triggers.{kind}.enabled"), "must be boolean");
                    }
                    let targets = trigger.get("targets").and_then(Value::as_array);
                    for target in targets.into_iter().flatten() {
                        match target.get("scope").and_then(Value::as_str) {
                            Some("system" | "agent") => {}
                            _ => c.push(
                                &format!("triggers.{kind}.targets[].scope"),
                                "must be system or agent",
                            ),
                        }
                    }
                }
            }
        }
    }
}

/// `loops[]` and `locked_fields`.
fn check_loops(c: &mut Checker, config: &Value) {
    if c.kind(config, "loops", "array") {
        // `main` always exists and is implicit (§6.4): a declared loop may not take its name.
        let loops = config.get("loops").and_then(Value::as_array);
        for (i, lp) in loops.into_iter().flatten().enumerate() {
            let name = lp.get("name").and_then(Value::as_str).unwrap_or("");
            if name.eq_ignore_ascii_case("main") {
                c.push(
                    &format!("loops[{i}].name"),
                    "'main' is the agent's implicit loop and cannot be declared",
                );
            }
        }
    }
    if let Some(fields) = config.get("locked_fields")
        && !fields
            .as_array()
            .is_some_and(|items| items.iter().all(Value::is_string))
    {
        c.push("locked_fields", "must be an array of strings");
    }
}

/// `security`: its flags and its level.
fn check_security(c: &mut Checker, config: &Value) {
    if c.kind(config, "security", "object") {
        for flag in [
            "allow_unsigned",
            "require_signature",
            "require_payload_signature",
            "allow_local_fetch",
        ] {
            c.kind(config, &format!("security.{flag}"), "boolean");
        }
        if c.kind(config, "security.level", "integer") {
            c.range(config, "security.level", 0.0, 3.0);
        }
    }
}

/// `limits`: the numeric limits (by suffix) are non-negative integers or null.
fn check_limits(c: &mut Checker, config: &Value) {
    if c.kind(config, "limits", "object")
        && let Some(limits) = config.get("limits").and_then(Value::as_object)
    {
        for (key, value) in limits {
            let numeric = key.ends_with("_ms")
                || key.ends_with("_bytes")
                || key.ends_with("_tokens")
                || key.ends_with("_chars")
                || key.ends_with("_turns");
            if numeric && !(value.is_null() || value.as_u64().is_some()) {
                c.push(
                    &format!("limits.{key}"),
                    "must be a non-negative integer or null",
                );
            }
        }
    }
}

/// `messaging`, `logging` and `recovery`.
fn check_messaging(c: &mut Checker, config: &Value) {
    if c.kind(config, "messaging", "object") {
        c.kind(config, "messaging.receive", "boolean");
        c.kind(config, "messaging.inbox_mode", "boolean");
        c.one_of(
            config,
            "messaging.mode",
            &["proactive", "respond_only", "listen_only"],
        );
        c.one_of(
            config,
            "messaging.visibility",
            &["directory", "localhost", "lan", "public", "off"],
        );
    }
    if c.kind(config, "logging", "object") {
        c.one_of(
            config,
            "logging.default_level",
            &["debug", "info", "warn", "error"],
        );
        c.kind(config, "logging.max_rows", "integer|null");
    }
    if c.kind(config, "recovery", "object") {
        c.kind(config, "recovery.auto_retry", "boolean");
        c.range(config, "recovery.max_attempts", 0.0, 100.0);
        c.range(config, "recovery.base_delay_ms", 0.0, 3_600_000.0);
        c.range(config, "recovery.max_delay_ms", 0.0, 86_400_000.0);
        // ADF extension: the total wait between the attempts of one model request.
        c.range(config, "recovery.retry_budget_ms", 0.0, 86_400_000.0);
    }
}

/// `code_execution.restricted_methods` is an array of strings.
fn check_code_execution(c: &mut Checker, config: &Value) {
    if c.kind(config, "code_execution", "object")
        && let Some(methods) = config.pointer("/code_execution/restricted_methods")
        && !methods
            .as_array()
            .is_some_and(|items| items.iter().all(Value::is_string))
    {
        c.push(
            "code_execution.restricted_methods",
            "must be an array of strings",
        );
    }
}

/// `providers[]`: every provider has an id and a known type.
fn check_providers(c: &mut Checker, config: &Value) {
    if let Some(providers) = config.get("providers") {
        match providers.as_array() {
            None => c.push("providers", "must be array"),
            Some(items) => {
                for provider in items {
                    if provider
                        .get("id")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                    {
                        c.push("providers[].id", "every provider needs an id");
                    }
                    if let Some(kind) = provider.get("type")
                        && !matches!(
                            kind.as_str(),
                            Some("anthropic" | "openai" | "openai-compatible" | "openrouter")
                        )
                    {
                        c.push(
                            "providers[].type",
                            "must be anthropic, openai, openai-compatible or openrouter",
                        );
                    }
                }
            }
        }
    }
}

/// The sections validated only for their JSON type.
fn check_typed_only_sections(c: &mut Checker, config: &Value) {
    for array in ["ws_connections", "stream_bindings", "umbilical_taps"] {
        c.kind(config, array, "array");
    }
    for object_field in [
        "card",
        "context",
        "mcp",
        "compute",
        "adapters",
        "serving",
        "stream_bind",
        "metadata",
    ] {
        c.kind(config, object_field, "object");
    }
    // The owner's switch for the CSP sandbox on the agent's served answers (adf-net).
    c.kind(config, "serving.csp_sandbox", "boolean");
}

/// Normalizes a config as the reference does on read (§5.4, DEF-23): default tools missing
/// from `tools` are appended with their defaults, and a missing `handle` is filled from the
/// durable `adf_handle`. Returns what changed.
pub fn normalize_on_load(config: &mut Value, meta_handle: Option<&str>) -> Vec<String> {
    let mut notes = Vec::new();
    let Some(object) = config.as_object_mut() else {
        return notes;
    };
    if let Some(Value::Array(tools)) = object.get_mut("tools") {
        // One pass over the declarations: checking each default against every declaration
        // was a tenth of an open's cost.
        let declared: std::collections::HashSet<&str> = tools
            .iter()
            .filter_map(|t| t.get("name").and_then(Value::as_str))
            .collect();
        let missing: Vec<&crate::defaults::ToolDefault> = crate::defaults::DEFAULT_TOOLS
            .iter()
            .filter(|default| !declared.contains(default.0))
            .collect();
        for default in missing {
            tools.push(crate::defaults::tool_declaration(default));
            notes.push(format!("tool {} declared with its defaults", default.0));
        }
    }
    if !object.contains_key("handle")
        && let Some(handle) = meta_handle.filter(|h| !h.is_empty())
    {
        object.insert("handle".into(), Value::String(handle.to_owned()));
        notes.push(format!("config.handle filled from adf_handle ({handle})"));
    }
    notes
}

/// What opening found in the stored config: the normalizations it wrote, the violations it
/// still has, and the parsed value (for the connection's config cache).
#[derive(Debug, Default)]
pub(crate) struct ConfigOnOpen {
    /// [`normalize_on_load`]'s notes; non-empty means the normalized config was written.
    pub(crate) notes: Vec<String>,
    /// Schema violations of the config as it stands after normalization (§5: loaded anyway).
    pub(crate) violations: Vec<Violation>,
    /// The config after normalization, when the stored text is JSON.
    pub(crate) parsed: Option<Value>,
}

/// Reads the stored config once at open: parses it, applies [`normalize_on_load`] (writing the
/// result back only when it changed something) and validates it. One read and one parse serve
/// all three, and the parsed value seeds the config cache, so the first tool call does not
/// parse it again. A config that is not JSON is one violation at the root; opening still works.
pub(crate) fn load_on_open(conn: &rusqlite::Connection) -> Result<ConfigOnOpen> {
    let stored: Option<(String, Option<String>)> = conn
        .query_row(
            "SELECT config_json, (SELECT value FROM adf_meta WHERE key = 'adf_handle')
             FROM adf_config WHERE id = 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()?;
    let Some((text, meta_handle)) = stored else {
        return Ok(ConfigOnOpen::default());
    };
    let mut config = match serde_json::from_str::<Value>(&text) {
        Ok(config) => config,
        Err(e) => {
            return Ok(ConfigOnOpen {
                violations: vec![Violation {
                    path: "".into(),
                    message: format!("config_json is not valid JSON: {e}"),
                }],
                ..ConfigOnOpen::default()
            });
        }
    };
    let notes = normalize_on_load(&mut config, meta_handle.as_deref());
    if !notes.is_empty() {
        conn.execute(
            "UPDATE adf_config SET config_json = ?1 WHERE id = 1",
            [config.to_string()],
        )?;
    }
    Ok(ConfigOnOpen {
        notes,
        violations: validate(&config),
        parsed: Some(config),
    })
}

fn parse_config(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| {
        let depth = crate::config_depth::raw_depth(text).0;
        if depth > crate::config_depth::MAX_CONFIG_DEPTH {
            StoreError::Malformed(format!(
                "config_json is nested {depth} levels deep, more than the {} a config may have ({e}); `adf check` names the key and `adf config set` can replace it",
                crate::config_depth::MAX_CONFIG_DEPTH
            ))
        } else {
            StoreError::Malformed(format!("config_json is not valid JSON: {e}"))
        }
    })
}

/// The violations `after` has that `before` did not (§5.17 step 12).
pub fn new_violations(before: &Value, after: &Value) -> Vec<Violation> {
    let old: BTreeSet<Violation> = validate(before).into_iter().collect();
    validate(after)
        .into_iter()
        .filter(|v| !old.contains(v))
        .collect()
}

impl AdfFile {
    /// The config as stored, every unknown field included.
    /// The config, shared: parsed once and reused until it changes, so hot paths such as every
    /// tool call do not re-parse it. This connection's own config writes invalidate it; after
    /// another connection commits (`PRAGMA data_version`) the stored text is read and compared,
    /// and parsed again only when it differs.
    pub fn config_shared(&self) -> Result<std::sync::Arc<Value>> {
        let data_version: i64 = self
            .conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |row| row.get(0))?;
        let key = (data_version, self.config_cache.generation());
        if let Some((cached_key, value)) = self.config_cache.parsed.borrow().as_ref()
            && self.config_cache.hooked
            && *cached_key == key
        {
            return Ok(value.clone());
        }
        // Another connection committed something: most often a log row or a file, not the
        // config. The stored text tells; parsing it again costs far more than reading it.
        let text = self.config_text()?;
        if let Some(value) = self.config_cache.same_text(&text) {
            let mut parsed = self.config_cache.parsed.borrow_mut();
            *parsed = Some((key, value.clone()));
            return Ok(value);
        }
        let value = std::sync::Arc::new(parse_config(&text)?);
        *self.config_cache.parsed.borrow_mut() = Some((key, value.clone()));
        *self.config_cache.text.borrow_mut() = Some(text);
        Ok(value)
    }

    /// The agent config parsed from `adf_config.config_json`; fails if the stored JSON is
    /// malformed.
    pub fn config(&self) -> Result<Value> {
        parse_config(&self.config_text()?)
    }

    /// The stored config text, unparsed.
    pub fn config_text(&self) -> Result<String> {
        Ok(self.conn.query_row(
            "SELECT config_json FROM adf_config WHERE id = 1",
            [],
            |row| row.get(0),
        )?)
    }

    /// Replaces the whole config as `caller`. Rejected when it adds a schema violation; keeps
    /// `adf_name`, `adf_handle`, `adf_updated_at` and `metadata.updated_at` in step.
    pub fn config_replace(&mut self, caller: Caller, mut config: Value) -> Result<()> {
        if caller != Caller::Owner {
            return Err(StoreError::RequiresAuthorizedCode {
                action: "replace the whole config".into(),
            });
        }
        crate::config_depth::check_depth(&config)?;
        let before = self.config()?;
        let added = new_violations(&before, &config);
        if !added.is_empty() {
            return Err(StoreError::ConfigRejected {
                violations: added.iter().map(ToString::to_string).collect(),
            });
        }
        for fixed in ["id", "adf_version"] {
            if before.get(fixed) != config.get(fixed) {
                return Err(StoreError::invalid(format!("config.{fixed} never changes")));
            }
        }
        self.ensure_writable()?;
        self.persist_config(&mut config)
    }

    /// Applies one owner edit at a dot path: the owner is not bound by locks, but the edit is
    /// still rejected if it adds a schema violation, and `id`/`adf_version` never change.
    pub fn config_set_path(
        &mut self,
        caller: Caller,
        path: &str,
        action: ConfigAction,
        value: Value,
    ) -> Result<()> {
        if caller != Caller::Owner {
            return Err(StoreError::RequiresAuthorizedCode {
                action: "edit the config directly (agents use sys_update_config)".into(),
            });
        }
        let first = path.split('.').next().unwrap_or_default();
        if matches!(first, "id" | "adf_version") {
            return Err(StoreError::invalid(format!("config.{first} never changes")));
        }
        crate::config_depth::check_path_depth(path)?;
        let text = self.config_text()?;
        if crate::config_depth::needs_repair_path(&text) {
            // The owner's repair path for a config stored deeper than any reader parses.
            let mut after =
                crate::config_depth::repair_deep_config(text, path.to_owned(), action, value)?;
            self.ensure_writable()?;
            return self.persist_config(&mut after);
        }
        let before = parse_config(&text)?;
        let mut after = before.clone();
        declare_on_demand(&mut after, path);
        apply_path(&mut after, path, action, value)?;
        crate::config_depth::check_depth(&after)?;
        let added = new_violations(&before, &after);
        if !added.is_empty() {
            return Err(StoreError::ConfigRejected {
                violations: added.iter().map(ToString::to_string).collect(),
            });
        }
        self.ensure_writable()?;
        self.persist_config(&mut after)
    }

    pub(crate) fn persist_config(&mut self, config: &mut Value) -> Result<()> {
        let now = time::now_iso();
        if let Some(object) = config.as_object_mut() {
            let metadata = object
                .entry("metadata")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(metadata) = metadata.as_object_mut() {
                metadata.insert("updated_at".into(), Value::String(now.clone()));
            }
        }
        let tx = crate::file::write_tx(&mut self.conn)?;
        tx.execute(
            "UPDATE adf_config SET config_json = ?1, updated_at = ?2 WHERE id = 1",
            rusqlite::params![config.to_string(), now],
        )?;
        if let Some(name) = config.get("name").and_then(Value::as_str) {
            meta::set_runtime_key(&tx, "adf_name", name)?;
        }
        if let Some(handle) = config.get("handle").and_then(Value::as_str) {
            meta::set_runtime_key(&tx, "adf_handle", handle)?;
        }
        meta::set_runtime_key(&tx, "adf_updated_at", &now)?;
        tx.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_retry_budget_is_validated_like_the_other_recovery_fields() {
        let paths = |recovery: Value| -> Vec<String> {
            validate(&json!({ "recovery": recovery }))
                .into_iter()
                .map(|v| v.path)
                .filter(|p| p.starts_with("recovery"))
                .collect()
        };
        assert!(paths(json!({ "retry_budget_ms": 60000 })).is_empty());
        assert_eq!(
            paths(json!({ "retry_budget_ms": -1 })),
            ["recovery.retry_budget_ms"]
        );
        assert_eq!(
            paths(json!({ "retry_budget_ms": "soon" })),
            ["recovery.retry_budget_ms"]
        );
    }

    #[test]
    fn name_segments_select_array_elements() {
        let config = json!({ "tools": [{ "name": "a", "enabled": false }, { "name": "b", "enabled": true }] });
        assert_eq!(
            get_path(&config, "tools.b.enabled").ok().flatten(),
            Some(&json!(true))
        );
        assert_eq!(
            get_path(&config, "tools.0.name").ok().flatten(),
            Some(&json!("a"))
        );
        assert!(get_path(&config, "tools.zzz").is_err());
    }

    #[test]
    fn apply_set_append_remove() {
        let mut config = json!({ "locked_fields": ["a"] });
        assert!(
            apply_path(
                &mut config,
                "locked_fields",
                ConfigAction::Append,
                json!("b")
            )
            .is_ok()
        );
        assert!(
            apply_path(
                &mut config,
                "locked_fields",
                ConfigAction::Remove { index: 0 },
                Value::Null
            )
            .is_ok()
        );
        assert!(
            apply_path(
                &mut config,
                "model.temperature",
                ConfigAction::Set,
                json!(1.0)
            )
            .is_ok()
        );
        assert_eq!(
            config,
            json!({ "locked_fields": ["b"], "model": { "temperature": 1.0 } })
        );
        assert!(
            apply_path(
                &mut config,
                "locked_fields",
                ConfigAction::Remove { index: 5 },
                Value::Null
            )
            .is_err()
        );
    }

    #[test]
    fn lookup_finds_what_a_json_pointer_finds() {
        let config = json!({
            "a": { "b": [10, { "c": true }], "x/y": 1, "t~": 2 },
            "": { "": 3 }
        });
        for path in [
            "a",
            "a.b",
            "a.b.0",
            "a.b.1.c",
            "a.b.01",
            "a.b.+1",
            "a.b.2",
            "a.x/y",
            "a.t~0",
            "a.missing",
            "a.b.0.deeper",
            ".",
            "",
        ] {
            let expected = config.pointer(&format!("/{}", path.replace('.', "/")));
            assert_eq!(lookup(&config, path), expected, "path {path:?}");
        }
        assert_eq!(lookup(&config, "a.b.1.c"), Some(&json!(true)));
    }

    #[test]
    fn only_new_violations_count() {
        let before = json!({ "state": "bogus", "model": { "temperature": 0.5 } });
        let same_problem = json!({ "state": "bogus", "model": { "temperature": 0.9 } });
        let new_problem = json!({ "state": "bogus", "model": { "temperature": 9 } });
        assert!(new_violations(&before, &same_problem).is_empty());
        assert_eq!(new_violations(&before, &new_problem).len(), 1);
    }
}

/// Most `adf_files` rowids a connection keeps between two takes; past it only "many" is
/// known (a connection nobody takes from stays this small).
const MAX_FILES_TOUCHED: usize = 1024;

/// The `adf_files` rows a connection changed (see [`ConfigCache::take_files_touched`]).
#[derive(Debug, Default)]
struct FilesTouched {
    rows: std::collections::HashSet<i64>,
    overflow: bool,
}

impl FilesTouched {
    fn add(&mut self, rowid: i64) {
        if self.rows.len() < MAX_FILES_TOUCHED {
            self.rows.insert(rowid);
        } else if !self.rows.contains(&rowid) {
            self.overflow = true;
        }
    }
}

/// `(PRAGMA data_version, ConfigCache generation)`.
type ConfigVersion = (i64, u64);

/// The parsed config of one connection and what it was read at: SQLite's `data_version`
/// (changes when another connection commits) and a generation counter that an update hook on
/// this connection bumps on every row change of `adf_config`. Writes to other tables (a log
/// row, a file) leave the cache valid, so a tool call after a write does not re-parse the
/// config; a rolled-back config change only costs one needless re-parse.
#[derive(Debug)]
pub(crate) struct ConfigCache {
    generation: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Bumped by the same hook on every row change of `adf_files`, so a reader that watches
    /// one file (the skills catalog, every step) asks a counter instead of reading the file.
    files_generation: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The rowids of `adf_files` rows this connection changed since the last
    /// [`ConfigCache::take_files_touched`] (bounded), so a watched handle tells its own file
    /// writes from another writer's (`other_writers`); kept only once
    /// [`ConfigCache::track_files_touched`] asked, so other connections hold none.
    files_touched: std::sync::Arc<std::sync::Mutex<FilesTouched>>,
    track_touched: std::sync::Arc<std::sync::atomic::AtomicBool>,
    hooked: bool,
    /// The config and the `(data_version, generation)` it was parsed at.
    parsed: std::cell::RefCell<Option<(ConfigVersion, std::sync::Arc<Value>)>>,
    /// The stored text `parsed` came from, when it was read here (not seeded).
    text: std::cell::RefCell<Option<String>>,
}

impl ConfigCache {
    /// A cache that watches `conn`. The hook is the connection's only update hook; if SQLite
    /// refuses it, the cache never answers and every read parses the config.
    pub(crate) fn attach(conn: &mut rusqlite::Connection) -> Self {
        let generation = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let bump = generation.clone();
        let files_generation = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let bump_files = files_generation.clone();
        let files_touched = std::sync::Arc::new(std::sync::Mutex::new(FilesTouched::default()));
        let touch = files_touched.clone();
        let track_touched = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tracking = track_touched.clone();
        let hooked = conn
            .update_hook(Some(
                move |_: rusqlite::hooks::Action, _: &str, table: &str, rowid: i64| match table {
                    "adf_config" => {
                        bump.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    "adf_files" => {
                        bump_files.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if tracking.load(std::sync::atomic::Ordering::Relaxed) {
                            touch
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .add(rowid);
                        }
                    }
                    _ => {}
                },
            ))
            .is_ok();
        ConfigCache {
            generation,
            files_generation,
            files_touched,
            track_touched,
            hooked,
            parsed: std::cell::RefCell::new(None),
            text: std::cell::RefCell::new(None),
        }
    }

    /// The parsed config, when `text` is the text it was parsed from.
    fn same_text(&self, text: &str) -> Option<std::sync::Arc<Value>> {
        if !self.hooked || self.text.borrow().as_deref() != Some(text) {
            return None;
        }
        self.parsed
            .borrow()
            .as_ref()
            .map(|(_, value)| value.clone())
    }

    fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Row changes of `adf_files` on this connection so far; `None` when the hook is not
    /// installed, so callers cannot tell and must read.
    pub(crate) fn files_generation(&self) -> Option<u64> {
        self.hooked.then(|| {
            self.files_generation
                .load(std::sync::atomic::Ordering::Relaxed)
        })
    }

    /// Starts keeping the `adf_files` rowids this connection changes (a watched handle's).
    pub(crate) fn track_files_touched(&self) {
        self.track_touched
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The `adf_files` rowids this connection changed since the last take (since tracking
    /// started); `None` when the hook is not installed or more rows changed than it keeps
    /// (callers cannot tell).
    pub(crate) fn take_files_touched(&self) -> Option<std::collections::HashSet<i64>> {
        let touched = std::mem::take(
            &mut *self
                .files_touched
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        (self.hooked && !touched.overflow).then_some(touched.rows)
    }

    /// Remembers `config`, just read from `conn` (the connection this cache watches), as the
    /// current config.
    pub(crate) fn seed(&self, conn: &rusqlite::Connection, config: Value) -> Result<()> {
        let data_version: i64 = conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |row| row.get(0))?;
        *self.parsed.borrow_mut() = Some((
            (data_version, self.generation()),
            std::sync::Arc::new(config),
        ));
        *self.text.borrow_mut() = None;
        Ok(())
    }
}
