//! From transcript rows to the messages of a model request.
//!
//! - `[Context: system_prompt]` rows are the record of the system prompt (§1.5); the prompt
//!   itself travels in the request's `system` field, so these rows are never sent as messages
//!   (the reference's `first_provider_request` shows the same).
//! - `[Context: turn_failed]` and `[Context: turn_aborted]` rows record how a turn ended for
//!   the owner (the error and what to do next); the model's conversation is what the turn
//!   did, so they are not sent either.
//! - Every other row is sent as it is stored, context rows of other kinds included (dynamic
//!   instructions, `[from loop:…]` messages, compaction summaries): what the model reads is what
//!   the file holds.
//! - Consecutive rows of one role are merged into one message (a step's tool results, a
//!   trigger followed by dynamic instructions): both wire formats accept that shape, and
//!   Anthropic needs every result of a step in the one user message after the calls.
//! - Calls and results are paired: a `tool_use` whose result is missing, or a `tool_result`
//!   whose call is gone (after `loop_clear` or compaction cut between them), is left out, since
//!   both APIs reject an unpaired block. Leaving out adds no text, so nothing is sent that the
//!   file does not hold.

use std::collections::HashSet;

use adf_providers::{ContentBlock, Message, Role};
use adf_store::LoopRow;
use serde_json::Value;

/// The marker of system prompt snapshot rows.
pub const SYSTEM_PROMPT_MARKER: &str = "[Context: system_prompt] ";
/// The marker of dynamic instruction rows.
pub const DYNAMIC_MARKER: &str = "[Context: dynamic_instructions] ";

/// The marker of the row a failed turn leaves in its loop.
pub const TURN_FAILED_MARKER: &str = "[Context: turn_failed] ";
/// The marker of the row an aborted turn leaves in its loop.
pub const TURN_ABORTED_MARKER: &str = "[Context: turn_aborted] ";

/// The text of a row's first block, when it is a text block.
fn first_text(row: &LoopRow) -> Option<&str> {
    row.content
        .as_array()
        .and_then(|a| a.first())
        .and_then(|b| b.get("text"))
        .and_then(Value::as_str)
}

/// Whether a row records how a turn ended (failed or aborted) for the owner.
pub fn is_turn_end_row(row: &LoopRow) -> bool {
    row.role == "user"
        && first_text(row).is_some_and(|t| {
            t.starts_with(TURN_FAILED_MARKER) || t.starts_with(TURN_ABORTED_MARKER)
        })
}

/// Whether a row is a system prompt snapshot.
pub fn is_system_prompt_row(row: &LoopRow) -> bool {
    row.role == "user"
        && row
            .content
            .as_array()
            .and_then(|a| a.first())
            .and_then(|b| b.get("text"))
            .and_then(Value::as_str)
            .is_some_and(|t| t.starts_with(SYSTEM_PROMPT_MARKER))
}

/// A row as a message, or `None` for rows that are not sent.
pub fn row_message(row: &LoopRow) -> Option<Message> {
    if is_system_prompt_row(row) || is_turn_end_row(row) {
        return None;
    }
    let role = match row.role.as_str() {
        "assistant" => Role::Assistant,
        _ => Role::User,
    };
    let content: Vec<ContentBlock> = match &row.content {
        // Read from the row's tree in place: `from_value` would need a deep copy of it.
        Value::Array(_) => serde::Deserialize::deserialize(&row.content).ok()?,
        Value::String(text) => vec![ContentBlock::text(text.clone())],
        _ => return None,
    };
    (!content.is_empty()).then_some(Message { role, content })
}

/// The `key` of a keyed `loop_inject` context row (`{"context": {"v": 1, "key": …}}` on its
/// text block), or `None`.
pub fn injection_key(row: &LoopRow) -> Option<&str> {
    let context = row.content.as_array()?.first()?.get("context")?;
    if context.get("v").and_then(Value::as_u64) != Some(1) {
        return None;
    }
    context.get("key")?.as_str().filter(|k| !k.is_empty())
}

/// Merges consecutive same-role messages and drops unpaired tool blocks (module docs).
/// Empty messages (superseded keyed injections) are left out.
pub fn assemble(messages: &[Message]) -> Vec<Message> {
    let mut merged: Vec<Message> = Vec::with_capacity(messages.len());
    for m in messages.iter().filter(|m| !m.content.is_empty()) {
        match merged.last_mut() {
            Some(last) if last.role == m.role => last.content.extend(m.content.iter().cloned()),
            _ => merged.push(m.clone()),
        }
    }
    // Results must come first in a user message that answers calls (Anthropic).
    for m in merged.iter_mut().filter(|m| m.role == Role::User) {
        m.content
            .sort_by_key(|b| !matches!(b, ContentBlock::ToolResult { .. }));
    }
    for i in 0..merged.len() {
        if merged[i].role != Role::Assistant {
            continue;
        }
        let answered: HashSet<String> = merged
            .get(i + 1)
            .filter(|next| next.role == Role::User)
            .map(|next| {
                next.content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.clone()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        merged[i]
            .content
            .retain(|b| !matches!(b, ContentBlock::ToolUse { id, .. } if !answered.contains(id)));
    }
    for i in 0..merged.len() {
        if merged[i].role != Role::User {
            continue;
        }
        let called: HashSet<String> = if i == 0 {
            HashSet::new()
        } else {
            merged[i - 1]
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolUse { id, .. } => Some(id.clone()),
                    _ => None,
                })
                .collect()
        };
        merged[i].content.retain(
            |b| !matches!(b, ContentBlock::ToolResult { tool_use_id, .. } if !called.contains(tool_use_id)),
        );
    }
    merged.retain(|m| !m.content.is_empty());
    // Dropping a message can leave two of one role side by side again.
    let mut out: Vec<Message> = Vec::with_capacity(merged.len());
    for m in merged {
        match out.last_mut() {
            Some(last) if last.role == m.role => last.content.extend(m.content),
            _ => out.push(m),
        }
    }
    out
}

/// [`assemble`] of `messages`, reusing `settled` = `assemble(&messages[..n])` (the messages of
/// the previous request, moved back out of it) instead of cloning those `n` messages again.
///
/// The reuse is exact when the settled part ends with a user message and the messages after
/// it open with an assistant one (the reply that request got): merging, ordering and pairing
/// then never look across the boundary, so assembling the whole is assembling the two parts
/// one after the other, unless dropping unpaired blocks leaves one role on both sides of the
/// boundary, which the final merge would join. Every other case assembles everything.
pub fn assemble_after(
    settled: Option<(usize, Vec<Message>)>,
    messages: &[Message],
) -> Vec<Message> {
    let Some((n, mut out)) = settled.filter(|(n, _)| *n <= messages.len()) else {
        return assemble(messages);
    };
    let (before, after) = messages.split_at(n);
    let last_before = before.iter().rev().find(|m| !m.content.is_empty());
    let Some(first_after) = after.iter().find(|m| !m.content.is_empty()) else {
        return out;
    };
    if last_before.is_some_and(|m| m.role != Role::User) || first_after.role != Role::Assistant {
        return assemble(messages);
    }
    let rest = assemble(after);
    match (out.last(), rest.first()) {
        (Some(last), Some(first)) if last.role == first.role => assemble(messages),
        _ => {
            out.extend(rest);
            out
        }
    }
}

/// A rough token estimate (4 characters a token) for when the provider reports no usage.
pub fn estimate_tokens(text_len: usize) -> u64 {
    text_len.div_ceil(4) as u64
}

/// Caps a tool result for the model (§5.7 `max_tool_result_tokens`, TOL-61): a result over the
/// limit is replaced by its first `preview_chars` characters and a note saying so.
pub fn cap_result(text: String, max_tokens: u64, preview_chars: usize) -> String {
    let tokens = estimate_tokens(text.len());
    if tokens <= max_tokens {
        return text;
    }
    let total = text.chars().count();
    let preview: String = text.chars().take(preview_chars).collect();
    format!(
        "{preview}\n\n[Result truncated: {total} characters (about {tokens} tokens) is over limits.max_tool_result_tokens = {max_tokens}; showing the first {preview_chars} characters.]"
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool_use(id: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "fs_read".into(),
            input: json!({}),
        }
    }

    #[test]
    fn merges_and_pairs() {
        let msgs = vec![
            Message::user_text("hi"),
            Message::user_text("[Context: dynamic_instructions] x"),
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::text("ok"), tool_use("a"), tool_use("b")],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::tool_result("a", "A", false)],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::tool_result("zz", "orphan", false)],
            },
        ];
        let out = assemble(&msgs);
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].content.len(), 2);
        assert_eq!(out[1].content.len(), 2, "unanswered call b dropped");
        assert_eq!(out[2].content.len(), 1, "orphan result dropped");
    }

    fn assistant(blocks: Vec<ContentBlock>) -> Message {
        Message {
            role: Role::Assistant,
            content: blocks,
        }
    }

    fn results(ids: &[&str]) -> Message {
        Message {
            role: Role::User,
            content: ids
                .iter()
                .map(|id| ContentBlock::tool_result(*id, "r", false))
                .collect(),
        }
    }

    /// Transcripts whose every prefix is a possible "previous request".
    fn transcripts() -> Vec<Vec<Message>> {
        vec![
            // Text turns, a trigger followed by dynamic instructions.
            vec![
                Message::user_text("hi"),
                Message::user_text("[Context: dynamic_instructions] x"),
                assistant(vec![ContentBlock::text("a")]),
                Message::user_text("again"),
                assistant(vec![ContentBlock::text("b")]),
                Message::user_text("third"),
            ],
            // Calls answered, unanswered and orphan results across every cut.
            vec![
                Message::user_text("go"),
                assistant(vec![tool_use("a"), tool_use("b")]),
                results(&["a"]),
                results(&["zz"]),
                assistant(vec![tool_use("c")]),
                Message::user_text("no result for c"),
                assistant(vec![ContentBlock::text("done")]),
                results(&["c"]),
                Message::user_text("next"),
            ],
            // An assistant message that pairing empties, between two user messages.
            vec![
                Message::user_text("one"),
                assistant(vec![tool_use("x")]),
                Message::user_text("two"),
                assistant(vec![ContentBlock::text("ok")]),
                Message::user_text("three"),
            ],
            // Emptied (superseded) messages at the cut.
            vec![
                Message::user_text("one"),
                Message {
                    role: Role::User,
                    content: Vec::new(),
                },
                assistant(vec![ContentBlock::text("ok")]),
                Message {
                    role: Role::User,
                    content: Vec::new(),
                },
                Message::user_text("two"),
            ],
        ]
    }

    #[test]
    fn assemble_after_equals_assembling_everything_at_every_cut() {
        for messages in transcripts() {
            let whole = assemble(&messages);
            for cut in 0..=messages.len() {
                for end in cut..=messages.len() {
                    let settled = Some((cut, assemble(&messages[..cut])));
                    assert_eq!(
                        assemble_after(settled, &messages[..end]),
                        assemble(&messages[..end]),
                        "cut {cut}, end {end}"
                    );
                }
            }
            assert_eq!(assemble_after(None, &messages), whole);
        }
    }

    #[test]
    fn caps_big_results() {
        let big = "x".repeat(100);
        let capped = cap_result(big.clone(), 10, 20);
        assert!(capped.starts_with(&"x".repeat(20)));
        assert!(capped.contains("Result truncated"));
        assert_eq!(cap_result(big.clone(), 1000, 20), big);
    }
}
