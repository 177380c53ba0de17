//! How deep a config may nest, and the owner's way out of a config stored deeper than that.
//!
//! serde_json refuses input nested deeper than 128 levels, so a config written deeper than
//! that could never be read again by any command. Every config write is therefore held to
//! [`MAX_CONFIG_DEPTH`] levels of objects and arrays, counted from the root object (a dot path
//! of `n` segments holding an object of scalars reaches level `n + 1`).
//!
//! A file written before this rule (or by another tool) may still hold a deeper config.
//! `adf check` measures it with [`raw_depth`], a scan of the stored text that needs no parser,
//! and the owner repairs it with `adf config set`: `repair_deep_config` parses it without
//! serde's limit on a thread whose stack is sized for the measured depth (parsing, cloning and
//! dropping a `Value` all recurse once per level), applies the edit there and hands back the
//! result as text, which must then be within the limit.

use serde_json::Value;

use crate::config::{ConfigAction, apply_path, new_violations};
use crate::error::{Result, StoreError};

/// The deepest nesting of objects and arrays a config may have, the root object being 1.
pub const MAX_CONFIG_DEPTH: usize = 64;

/// What serde_json parses with its recursion limit on: deeper text needs the repair path.
const SERDE_PARSE_LIMIT: usize = 127;

/// The deepest stored config the repair path takes on. Beyond it the stack the repair thread
/// would need is unreasonable; such a file is restored from a backup instead.
const MAX_REPAIRABLE_DEPTH: usize = 20_000;

/// Stack per nesting level on the repair thread: generous for an unoptimized build, where one
/// level of parse, clone and drop takes a few hundred bytes each.
const REPAIR_STACK_PER_LEVEL: usize = 4 * 1024;
const REPAIR_STACK_BASE: usize = 16 * 1024 * 1024;

/// How deep `text` nests objects and arrays, and the top-level key the deepest point sits
/// under. A scan of the text, not a parse: it works at any depth and on malformed JSON.
pub fn raw_depth(text: &str) -> (usize, Option<String>) {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut deepest = 0usize;
    let mut deepest_key = None;
    let mut current_key: Option<String> = None;
    let mut expect_key = false;
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'"' => {
                let start = index + 1;
                index += 1;
                while index < bytes.len() && bytes[index] != b'"' {
                    if bytes[index] == b'\\' {
                        index += 1;
                    }
                    index += 1;
                }
                if depth == 1 && expect_key {
                    current_key = text.get(start..index.min(bytes.len())).map(str::to_owned);
                    expect_key = false;
                }
            }
            open @ (b'{' | b'[') => {
                depth += 1;
                if depth == 1 {
                    expect_key = open == b'{';
                }
                if depth > deepest {
                    deepest = depth;
                    deepest_key = if depth > 1 { current_key.clone() } else { None };
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' if depth == 1 => expect_key = true,
            _ => {}
        }
        index += 1;
    }
    (deepest, deepest_key)
}

/// How deep `value` nests objects and arrays (a scalar is 0), without recursing.
pub fn value_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(value, 1usize)];
    while let Some((node, level)) = pending.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match node {
            Value::Object(map) => Box::new(map.values()),
            Value::Array(items) => Box::new(items.iter()),
            _ => continue,
        };
        deepest = deepest.max(level);
        pending.extend(children.map(|child| (child, level + 1)));
    }
    deepest
}

/// Refuses a config deeper than [`MAX_CONFIG_DEPTH`].
pub fn check_depth(config: &Value) -> Result<()> {
    let depth = value_depth(config);
    if depth > MAX_CONFIG_DEPTH {
        return Err(too_deep(depth));
    }
    Ok(())
}

/// Refuses a dot path with more segments than a config can nest, before anything is built.
pub(crate) fn check_path_depth(path: &str) -> Result<()> {
    // `n` segments reach level `n` with a scalar at the end, so more than the maximum can
    // never fit.
    let segments = path.split('.').count();
    if segments > MAX_CONFIG_DEPTH {
        return Err(StoreError::invalid(format!(
            "the config path has {segments} segments; a config nests at most {MAX_CONFIG_DEPTH} levels"
        )));
    }
    Ok(())
}

fn too_deep(depth: usize) -> StoreError {
    StoreError::invalid(format!(
        "config nested {depth} levels deep; a config nests at most {MAX_CONFIG_DEPTH} levels, so every reader can parse it"
    ))
}

/// Whether `text` is too deep for the ordinary parse and needs [`repair_deep_config`].
pub(crate) fn needs_repair_path(text: &str) -> bool {
    raw_depth(text).0 > SERDE_PARSE_LIMIT
}

/// Applies one owner edit to a stored config too deep for serde's ordinary parse and returns
/// the new config as text. Refused when the result is still deeper than
/// [`MAX_CONFIG_DEPTH`] (the edit must replace or empty the offending key) or adds a schema
/// violation.
pub(crate) fn repair_deep_config(
    text: String,
    path: String,
    action: ConfigAction,
    value: Value,
) -> Result<Value> {
    let (depth, key) = raw_depth(&text);
    if depth > MAX_REPAIRABLE_DEPTH {
        return Err(StoreError::Malformed(format!(
            "the stored config nests {depth} levels deep, beyond the {MAX_REPAIRABLE_DEPTH} adf repairs in place; restore the file from a backup"
        )));
    }
    let stack = REPAIR_STACK_BASE + depth * REPAIR_STACK_PER_LEVEL;
    let worker = std::thread::Builder::new()
        .name("adf-config-repair".into())
        .stack_size(stack)
        .spawn(move || -> Result<String> {
            let mut deserializer = serde_json::Deserializer::from_str(&text);
            deserializer.disable_recursion_limit();
            let before: Value = serde::Deserialize::deserialize(&mut deserializer).map_err(|e| {
                StoreError::Malformed(format!("config_json is not valid JSON: {e}"))
            })?;
            let mut after = before.clone();
            apply_path(&mut after, &path, action, value)?;
            let after_depth = value_depth(&after);
            if after_depth > MAX_CONFIG_DEPTH {
                let hint = key
                    .map(|key| format!(" (under '{key}': replace it, e.g. `adf config set <file> {key} null`)"))
                    .unwrap_or_default();
                return Err(StoreError::invalid(format!(
                    "the stored config nests {after_depth} levels deep even after this edit{hint}; a config nests at most {MAX_CONFIG_DEPTH} levels"
                )));
            }
            let added = new_violations(&before, &after);
            if !added.is_empty() {
                return Err(StoreError::ConfigRejected {
                    violations: added.iter().map(ToString::to_string).collect(),
                });
            }
            Ok(after.to_string())
        })
        .map_err(StoreError::Io)?;
    let repaired = worker
        .join()
        .map_err(|_| StoreError::Malformed("repairing the deep config failed".into()))??;
    serde_json::from_str(&repaired)
        .map_err(|e| StoreError::Malformed(format!("the repaired config does not parse: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn raw_and_value_depth_agree() {
        let value = json!({ "a": { "b": [1, { "c": 2 }] }, "d": 3 });
        assert_eq!(value_depth(&value), 4);
        assert_eq!(raw_depth(&value.to_string()), (4, Some("a".into())));
        assert_eq!(value_depth(&json!(1)), 0);
        assert_eq!(
            raw_depth(r#"{"x": "{[{[", "y": {}}"#),
            (2, Some("y".into()))
        );
    }
}
