//! Built-in tools: the key registry `adf_meta` (`sys_get_meta`, `sys_set_meta`,
//! `sys_delete_meta`; tools guide "sys_*_meta", spec §3.3, §4.4).
//!
//! The store decides every protection question for `cx.store_caller()`; these tools add what
//! the tools guide says around it:
//!
//! - `adf_*` keys belong to the runtime (§3.3 key namespaces): an agent or code caller gets a
//!   hard error for any write or delete of one, without an approval request, because no
//!   one-time override could make the store accept it (only the owner writes registry keys).
//! - A refusal the owner may lift (a `readonly` key, a non-increasing write to an `increment`
//!   key, deleting a protected key) keeps its protection hit, so a model call becomes a
//!   one-time approval request and code gets the error.
//! - An `increment` key holds numbers: a non-numeric value for one is bad input, never an
//!   override question (the reference runtime's rule), except for authorized code, which the
//!   tools guide lets bypass every meta protection.
//! - `inc: true` (or the legacy `delta: n`) is the store's atomic add: the read-modify-write
//!   happens inside the call's one transaction on the single writer, so concurrent adds cannot
//!   lose updates. It returns the new total as a number.

use std::sync::Arc;

use adf_store::meta::format_number;
use adf_store::{MetaProtection, Protection, WriteOutcome};
use serde_json::{Number, Value, json};

use crate::tools::{ErrorCode, Tool, ToolContext, ToolError};

/// The tools of this family.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(SysGetMeta),
        Arc::new(SysSetMeta),
        Arc::new(SysDeleteMeta),
    ]
}

fn reserved_key(key: &str, verb: &str) -> ToolError {
    ToolError::new(
        ErrorCode::WriteError,
        format!(
            "Cannot {verb} \"{key}\": key is readonly (adf_ keys are reserved for the runtime)."
        ),
    )
}

/// Whether `caller` is held to the `adf_` reservation: everyone but the owner.
fn bound_by_reservation(caller: adf_store::Caller) -> bool {
    caller != adf_store::Caller::Owner
}

fn parse_number(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok().filter(|n| n.is_finite())
}

/// A number as JSON: integral values as integers, so counters read back as `5`, not `5.0`.
fn number_value(value: f64) -> Value {
    if value.fract() == 0.0 && value.abs() < 9.007_199_254_740_992e15 {
        Value::Number(Number::from(value as i64))
    } else {
        Number::from_f64(value).map_or(Value::Null, Value::Number)
    }
}

fn marker(outcome: &WriteOutcome, overridden: Option<&str>) -> String {
    match (&outcome.bypassed, overridden) {
        (Some(level), _) => format!(" (⚠ protection override: {level}, authorized code)"),
        (None, Some(level)) => format!(" (⚠ protection override: {level}, owner-approved)"),
        _ => String::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// sys_get_meta

struct SysGetMeta;

impl Tool for SysGetMeta {
    declare_tool! {
        name: "sys_get_meta",
        description: "Read adf_meta. With key: just that value. Without: every entry as \"key<TAB>value\" lines. Query adf_meta protection levels with db_query.",
        parameters: json!({
            "type": "object",
            "properties": {
                "key": { "type": "string", "minLength": 1, "description": "The key to read; omit to list every entry." }
            },
            "additionalProperties": false
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        if let Some(key) = args.get("key").and_then(Value::as_str) {
            let entry = cx
                .file
                .meta_get(key)?
                .ok_or_else(|| ToolError::not_found(format!("Meta key \"{key}\" not found.")))?;
            return Ok(Value::String(entry.value));
        }
        // One entry per line: a line break or tab inside a value is written as `\n`, `\r`, `\t`
        // so the listing stays parseable; read a single key for its exact bytes.
        let lines: Vec<String> = cx
            .file
            .meta_list()?
            .into_iter()
            .map(|entry| {
                let value = entry
                    .value
                    .replace('\n', "\\n")
                    .replace('\r', "\\r")
                    .replace('\t', "\\t");
                format!("{}\t{value}", entry.key)
            })
            .collect();
        Ok(Value::String(lines.join("\n")))
    }
}

// ---------------------------------------------------------------------------------------------
// sys_set_meta

struct SysSetMeta;

impl Tool for SysSetMeta {
    declare_tool! {
        name: "sys_set_meta",
        description: "Write a key to adf_meta (created if missing, overwritten if present). For counters pass inc: true and a numeric value: it is added atomically (the key is created at value when missing) and the new total is returned. protection (none, readonly, increment) applies only when the key is created.",
        parameters: json!({
            "type": "object",
            "properties": {
                "key": { "type": "string", "minLength": 1, "maxLength": 256, "description": "The key." },
                "value": { "type": ["string", "number"], "description": "The value; with inc, the number to add." },
                "inc": { "type": "boolean", "description": "Add value to the current number atomically instead of overwriting." },
                "delta": { "type": "number", "description": "Legacy: the same as inc: true with value = delta." },
                "protection": { "type": "string", "enum": ["none", "readonly", "increment"], "description": "Protection of a new key (default none); ignored for existing keys." }
            },
            "required": ["key"],
            "additionalProperties": false
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let key = args
            .get("key")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let caller = cx.store_caller();
        if key.starts_with("adf_") && bound_by_reservation(caller) {
            return Err(reserved_key(&key, "write to"));
        }
        let protection = args
            .get("protection")
            .and_then(Value::as_str)
            .map(MetaProtection::parse)
            .transpose()?;
        let value = args.get("value").filter(|v| !v.is_null());
        let inc = args.get("inc").and_then(Value::as_bool).unwrap_or(false);
        // Legacy `delta: n` is `inc: true` with `n` as the amount; a `value` beside it is ignored.
        let amount = match args.get("delta").and_then(Value::as_f64) {
            Some(delta) => Some(delta),
            None if inc => Some(match value {
                Some(Value::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
                Some(Value::String(text)) => parse_number(text).ok_or_else(|| {
                    ToolError::invalid(format!("inc needs a numeric value, not \"{text}\""))
                })?,
                _ => return Err(ToolError::invalid("inc: true needs a numeric value to add")),
            }),
            None => None,
        };
        match amount {
            Some(amount) => increment(cx, &key, amount, protection),
            None => {
                let text = match value {
                    Some(Value::String(text)) => text.clone(),
                    Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
                    Some(Value::Number(n)) => format_number(n.as_f64().unwrap_or_default()),
                    _ => return Err(ToolError::invalid("missing required parameter 'value'")),
                };
                set(cx, &key, &text, protection)
            }
        }
    }
}

fn increment(
    cx: &mut ToolContext<'_>,
    key: &str,
    amount: f64,
    protection: Option<MetaProtection>,
) -> Result<Value, ToolError> {
    if !amount.is_finite() {
        return Err(ToolError::invalid(
            "the amount to add must be a finite number",
        ));
    }
    let caller = cx.store_caller();
    let existing = cx.file.meta_get(key)?;
    let Some(existing) = existing else {
        // A new counter starts at the amount; a requested protection applies to it (the
        // increment path of the store always creates `none`, so create through `meta_set`,
        // which is the same transaction).
        let text = format_number(amount);
        if protection.is_some_and(|p| p != MetaProtection::None) {
            cx.file.meta_set(caller, key, &text, protection)?;
        } else {
            cx.file.meta_increment(caller, key, amount)?;
        }
        return Ok(number_value(amount));
    };
    if parse_number(&existing.value).is_none() {
        return Err(ToolError::invalid(format!(
            "Cannot add to \"{key}\": the stored value \"{}\" is not a number.",
            existing.value
        )));
    }
    let total = cx.file.meta_increment(caller, key, amount).map_err(|e| {
        let mut error = ToolError::from(e);
        if let Some(hit) = &error.protection {
            error.message = if hit.level == Protection::Meta(MetaProtection::Increment) {
                format!(
                    "Cannot update \"{key}\": the amount ({}) must be positive; this key can only increase.",
                    format_number(amount)
                )
            } else {
                format!("Cannot write to \"{key}\": key is {}.", hit.level_described())
            };
        }
        error
    })?;
    // The new total as a number (the tools guide's return value), so code can use it directly.
    Ok(parse_number(&total).map_or(Value::String(total), number_value))
}

fn set(
    cx: &mut ToolContext<'_>,
    key: &str,
    text: &str,
    protection: Option<MetaProtection>,
) -> Result<Value, ToolError> {
    let caller = cx.store_caller();
    let existing = cx.file.meta_get(key)?;
    let agent_rules = matches!(
        caller,
        adf_store::Caller::Agent | adf_store::Caller::OwnerApproved
    );
    let mut overridden = None;
    match &existing {
        Some(entry) if entry.protection == MetaProtection::Increment && agent_rules => {
            if parse_number(text).is_none() {
                return Err(ToolError::invalid(format!(
                    "Cannot update \"{key}\": increment keys hold numbers, not \"{text}\"."
                )));
            }
            if cx.protection_override {
                overridden = Some("increment");
            }
        }
        Some(entry) if entry.protection == MetaProtection::Readonly && cx.protection_override => {
            overridden = Some("readonly");
        }
        None if protection == Some(MetaProtection::Increment) && parse_number(text).is_none() => {
            return Err(ToolError::invalid(format!(
                "Cannot create increment key \"{key}\": its value must be a number, not \"{text}\"."
            )));
        }
        _ => {}
    }
    let outcome = cx.file.meta_set(caller, key, text, protection).map_err(|e| {
        let mut error = ToolError::from(e);
        if let Some(hit) = &error.protection {
            error.message = match &existing {
                Some(entry) if entry.protection == MetaProtection::Increment => format!(
                    "Cannot update \"{key}\": new value ({text}) must be greater than current value ({}).",
                    entry.value
                ),
                _ => format!(
                    "Cannot write to \"{key}\": key is {}.",
                    hit.level_described()
                ),
            };
        }
        error
    })?;
    let mut message = format!("Set {key} = {text}");
    if let (Some(entry), Some(requested)) = (&existing, protection)
        && requested != entry.protection
    {
        if caller.may_grant_trust() {
            // Authorized code (and the owner) may re-level an existing key, as the tools guide
            // allows for `sys_set_meta` from authorized code.
            cx.file.meta_set_protection(caller, key, requested)?;
            message.push_str(&format!(
                "; protection {} -> {}",
                entry.protection,
                requested.as_str()
            ));
        } else {
            message.push_str(&format!(
                "; protection stays {} (it applies only when a key is created)",
                entry.protection
            ));
        }
    }
    Ok(Value::String(format!(
        "{message}{}.",
        marker(&outcome, overridden)
    )))
}

// ---------------------------------------------------------------------------------------------
// sys_delete_meta

struct SysDeleteMeta;

impl Tool for SysDeleteMeta {
    declare_tool! {
        name: "sys_delete_meta",
        description: "Delete a key from adf_meta. Keys with readonly or increment protection cannot be deleted.",
        parameters: super::args::one_argument(
            "key",
            json!({ "type": "string", "minLength": 1, "description": "The key to delete." }),
        ),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let key = args.get("key").and_then(Value::as_str).unwrap_or_default();
        let caller = cx.store_caller();
        if key.starts_with("adf_") && bound_by_reservation(caller) {
            return Err(reserved_key(key, "delete"));
        }
        let level = cx
            .file
            .meta_get(key)?
            .map(|entry| entry.protection)
            .ok_or_else(|| ToolError::not_found(format!("Meta key \"{key}\" not found.")))?;
        let outcome = cx.file.meta_delete(caller, key).map_err(|e| {
            let mut error = ToolError::from(e);
            if let Some(hit) = &error.protection {
                error.message =
                    format!("Cannot delete \"{key}\": key is {}.", hit.level_described());
            }
            error
        })?;
        let overridden =
            (cx.protection_override && level != MetaProtection::None).then_some(level.as_str());
        Ok(Value::String(format!(
            "Deleted meta key {key}{}.",
            marker(&outcome, overridden)
        )))
    }
}
