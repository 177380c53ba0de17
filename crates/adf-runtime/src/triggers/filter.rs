//! Which events a target receives: the §7.4 filters and the self-trigger rules of §7.1 (a
//! handler never receives an event it produced, even with `include_self`; `on_logs` handlers
//! never see their own rows; without `include_self` the agent's own file writes do not fire
//! `on_file_change`; agent-scope handlers never receive what the agent's own turns produced,
//! file writes with `include_self` aside).

use serde_json::Value;

use super::{Producer, Scope, Target, TriggerEvent, TriggerKind};

/// Glob match for paths and names (the format's one dialect, `adf_store::glob`): `*` within
/// one path segment, `**` across segments, `?` one character.
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    adf_store::glob::matches(pattern, text)
}

/// A filter value that may be one string or a list of strings.
fn strings(value: &Value) -> Vec<&str> {
    match value {
        Value::String(s) => vec![s.as_str()],
        Value::Array(items) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn field<'e>(event: &'e TriggerEvent, key: &str) -> &'e str {
    event
        .data
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `filter.<key>` absent, or `event.data.<data_key>` equal to one of its values.
fn one_of(target: &Target, key: &str, event: &TriggerEvent, data_key: &str) -> bool {
    target
        .filter
        .get(key)
        .is_none_or(|allowed| strings(allowed).contains(&field(event, data_key)))
}

/// `filter.<key>` absent, or `event.data.<data_key>` matching one of its globs.
fn any_glob(target: &Target, key: &str, event: &TriggerEvent, data_key: &str) -> bool {
    target.filter.get(key).is_none_or(|patterns| {
        strings(patterns)
            .iter()
            .any(|p| glob_matches(p, field(event, data_key)))
    })
}

/// Whether `target` receives `event`.
pub fn accepts(target: &Target, event: &TriggerEvent) -> bool {
    if target.kind != event.kind {
        return false;
    }
    // A handler never receives its own event, `include_self` or not (TRG-02, TRG-03, TRG-05).
    if let (Producer::Lambda { source }, Some(lambda)) = (&event.producer, &target.lambda)
        && source == lambda
    {
        return false;
    }
    // An agent-scope handler *is* the agent: a turn's own logs, model calls, tool calls,
    // tasks and messages never start another turn (§7.1's SHOULD, TRG-05 for on_logs), or
    // every turn would feed the next. Only `on_file_change` opts in, through `include_self`.
    if target.scope == Scope::Agent
        && event.producer == Producer::Agent
        && event.kind != TriggerKind::OnFileChange
    {
        return false;
    }
    // The owner's chat message already starts a turn on its loop; an agent-scope `on_chat`
    // target on that same loop would deliver it twice.
    if event.kind == TriggerKind::OnChat
        && target.scope == Scope::Agent
        && event.data.get("loop").and_then(Value::as_str) == Some(target.loop_name.as_str())
    {
        return false;
    }
    match event.kind {
        TriggerKind::OnInbox => {
            one_of(target, "source", event, "source") && one_of(target, "sender", event, "from")
        }
        TriggerKind::OnOutbox => one_of(target, "to", event, "to"),
        TriggerKind::OnFileChange => {
            let include_self = target
                .filter
                .get("include_self")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let own_write = event.producer != Producer::External;
            (include_self || !own_write) && any_glob(target, "watch", event, "path")
        }
        TriggerKind::OnToolCall | TriggerKind::OnTaskCreate => {
            any_glob(target, "tools", event, "tool")
        }
        TriggerKind::OnTaskComplete => {
            any_glob(target, "tools", event, "tool") && one_of(target, "status", event, "status")
        }
        TriggerKind::OnLogs => {
            one_of(target, "level", event, "level")
                && any_glob(target, "origin", event, "origin")
                && any_glob(target, "event", event, "event")
        }
        TriggerKind::OnLlmCall => {
            one_of(target, "source", event, "source")
                && one_of(target, "provider", event, "provider")
        }
        TriggerKind::OnStartup | TriggerKind::OnChat | TriggerKind::OnTimer => true,
    }
}

#[cfg(test)]
mod tests {
    use super::glob_matches;

    #[test]
    fn globs() {
        assert!(glob_matches("README.*", "README.md"));
        assert!(!glob_matches("README.*", "docs/README.md"));
        assert!(glob_matches("lib/*.ts", "lib/a.ts"));
        assert!(!glob_matches("lib/*.ts", "lib/x/a.ts"));
        assert!(glob_matches("lib/**", "lib/x/a.ts"));
        assert!(glob_matches("fs_*", "fs_write"));
        assert!(glob_matches("a?c", "abc") && !glob_matches("a?c", "a/c"));
        assert!(glob_matches("*", "") && !glob_matches("a", ""));
    }
}
