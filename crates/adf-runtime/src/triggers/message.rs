//! The formatted message an agent-scope fire starts a turn with (spec §7.3). The shape is ours
//! (missing-tables Appendix B #11): chat text and timer payloads pass through as they are;
//! every other event becomes one `[Trigger: <type>] …` line that names what happened (tool,
//! task id, log id, provider, recipient) without copying bodies in (the model reads messages
//! with `msg_read`, files with `fs_read`, log rows with `db_query`).

use serde_json::Value;

use super::{TriggerEvent, TriggerKind};

fn text<'e>(event: &'e TriggerEvent, key: &str) -> &'e str {
    event
        .data
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn or<'a>(value: &'a str, fallback: &'a str) -> &'a str {
    if value.is_empty() { fallback } else { value }
}

fn line(event: &TriggerEvent) -> String {
    let kind = event.kind.as_str();
    match event.kind {
        TriggerKind::OnChat => text(event, "text").to_owned(),
        TriggerKind::OnTimer => match text(event, "payload") {
            "" => format!(
                "[Trigger: {kind}] Timer {} fired.",
                event
                    .data
                    .get("timer_id")
                    .map(Value::to_string)
                    .unwrap_or_default()
            ),
            payload => payload.to_owned(),
        },
        TriggerKind::OnInbox => {
            let from = match text(event, "from") {
                "" => String::new(),
                sender => format!(" from {sender}"),
            };
            format!("[Trigger: {kind}] A new message arrived{from}. Use msg_read to read it.")
        }
        TriggerKind::OnFileChange => {
            let change = match (text(event, "change"), text(event, "operation")) {
                ("", "delete") => "deleted",
                ("", _) => "changed",
                (change, _) => change,
            };
            format!("[Trigger: {kind}] {} was {change}.", text(event, "path"))
        }
        TriggerKind::OnStartup => format!("[Trigger: {kind}] You have just been started."),
        TriggerKind::OnToolCall => format!(
            "[Trigger: {kind}] A {} call {}.",
            text(event, "tool"),
            or(text(event, "status"), "completed")
        ),
        TriggerKind::OnTaskCreate => format!(
            "[Trigger: {kind}] Task {} was created for {} (status {}).",
            text(event, "task_id"),
            text(event, "tool"),
            or(text(event, "status"), "pending")
        ),
        TriggerKind::OnTaskComplete => format!(
            "[Trigger: {kind}] Task {} ({}) ended with status {}.",
            text(event, "task_id"),
            text(event, "tool"),
            text(event, "status")
        ),
        TriggerKind::OnLogs => format!(
            "[Trigger: {kind}] A {} log row {}/{} was written (adf_logs id {}).",
            or(text(event, "level"), "info"),
            or(text(event, "origin"), "-"),
            or(text(event, "event"), "-"),
            event
                .data
                .get("log_id")
                .map(Value::to_string)
                .unwrap_or_default()
        ),
        TriggerKind::OnLlmCall => format!(
            "[Trigger: {kind}] A {} model call to {} completed.",
            or(text(event, "source"), "turn"),
            or(text(event, "provider"), "the provider")
        ),
        TriggerKind::OnOutbox => format!(
            "[Trigger: {kind}] A message to {} was queued in the outbox.",
            or(text(event, "to"), "a recipient")
        ),
    }
}

/// The user message of the turn a batch of events starts.
pub fn format(events: &[TriggerEvent]) -> String {
    if let [only] = events {
        return line(only);
    }
    let inbox = events
        .iter()
        .filter(|e| e.kind == TriggerKind::OnInbox)
        .count();
    if inbox == events.len() && inbox > 1 {
        return format!(
            "[Trigger: on_inbox] {inbox} new messages arrived. Use msg_read to read them."
        );
    }
    events.iter().map(line).collect::<Vec<_>>().join("\n")
}
