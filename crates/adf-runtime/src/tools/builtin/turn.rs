//! Built-in turn and transcript tools: `say`, `ask` (tools guide "Turn Tools", §10.1),
//! `loop_compact` and `loop_clear` (tools guide "Loop Management Tools", §13.2).
//!
//! How these reach the executor: the registry runs them like any tool (declaration, access,
//! validation, approval when restricted), and the executor, which knows the tool name of every
//! call it makes, finishes the job the store cannot do:
//!
//! - `say` returns `{"message"}`; the executor shows it to the owner and the turn continues.
//! - `ask` returns `{"question"}`; the executor asks the owner through its host and the answer
//!   becomes the tool result (the model reads the answer, not this placeholder).
//! - `loop_compact` returns `{"instructions"}`; compaction needs a model call, so the executor
//!   runs it after the step's results are on disk.
//! - `loop_clear` does its work here, in the call's transaction (slice, audit, delete); the
//!   executor only resets its session afterwards, so the next request re-reads the transcript
//!   and the system prompt is snapshotted again (§5.1, PRM-07).
//!
//! Code never calls any of them (`EXCLUDED_FROM_CODE` in the pipeline).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::tools::{Tool, ToolCaller, ToolContext, ToolError};

/// The tools of this family.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(SAY),
        Arc::new(ASK),
        Arc::new(LoopCompact),
        Arc::new(LoopClear),
    ]
}

fn string_arg(args: &Value, name: &str) -> Result<String, ToolError> {
    args.get(name)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ToolError::invalid(format!("'{name}' must be a string")))
}

/// `say` and `ask` differ only in their words: each takes one required string and hands it back
/// as `{argument: text}` for the executor to show or to ask.
struct OwnerPrompt {
    name: &'static str,
    description: &'static str,
    argument: &'static str,
    argument_description: &'static str,
}

const SAY: OwnerPrompt = OwnerPrompt {
    name: "say",
    description: "Show the owner a progress message without ending the turn.",
    argument: "message",
    argument_description: "The text to show.",
};

const ASK: OwnerPrompt = OwnerPrompt {
    name: "ask",
    description: "Ask the owner a question and wait for the answer, which is returned as the result.",
    argument: "question",
    argument_description: "The question.",
};

impl Tool for OwnerPrompt {
    fn name(&self) -> &'static str {
        self.name
    }

    fn description(&self) -> &'static str {
        self.description
    }

    fn parameters(&self) -> Value {
        super::args::one_argument(
            self.argument,
            json!({ "type": "string", "description": self.argument_description }),
        )
    }

    fn run(&self, _cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let mut result = serde_json::Map::new();
        result.insert(
            self.argument.to_owned(),
            Value::String(string_arg(&args, self.argument)?),
        );
        Ok(Value::Object(result))
    }
}

struct LoopCompact;

impl Tool for LoopCompact {
    declare_tool! {
        name: "loop_compact",
        description: "Summarize this loop's transcript now and replace the old entries with the summary. Pass instructions to say what must survive verbatim.",
        parameters: json!({
            "type": "object",
            "properties": {
                "instructions": { "type": "string", "description": "What the summary must keep." }
            },
            "additionalProperties": false
        }),
    }

    fn run(&self, _cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        Ok(json!({
            "instructions": args.get("instructions").and_then(Value::as_str),
            "compaction": "scheduled after this step",
        }))
    }
}

struct LoopClear;

/// A Python slice bound: negatives count from the end; the result is clamped to `0..=len`.
fn slice_index(index: Option<i64>, len: usize, default: usize) -> usize {
    let len_i = len as i64;
    match index {
        None => default,
        Some(i) if i < 0 => (len_i + i).max(0) as usize,
        Some(i) => i.min(len_i) as usize,
    }
}

/// The half-open range `[start, end)` a Python slice `rows[start:end]` selects.
pub fn python_slice(start: Option<i64>, end: Option<i64>, len: usize) -> std::ops::Range<usize> {
    let s = slice_index(start, len, 0);
    let e = slice_index(end, len, len);
    if s >= e { s..s } else { s..e }
}

impl Tool for LoopClear {
    declare_tool! {
        name: "loop_clear",
        description: "Delete entries of this loop's transcript with a Python-style slice (start, end; negatives count from the end). No arguments clears everything.",
        parameters: json!({
            "type": "object",
            "properties": {
                "start": { "type": "integer", "description": "First entry to delete (default 0)." },
                "end": { "type": "integer", "description": "Entry to stop before (default: the end)." }
            },
            "additionalProperties": false
        }),
    }

    fn run(&self, cx: &mut ToolContext<'_>, args: Value) -> Result<Value, ToolError> {
        let loop_name = match cx.caller {
            ToolCaller::Model { loop_name } => loop_name.clone(),
            _ => "main".to_owned(),
        };
        let rows = cx.file.loop_rows(&loop_name)?;
        let range = python_slice(
            args.get("start").and_then(Value::as_i64),
            args.get("end").and_then(Value::as_i64),
            rows.len(),
        );
        let seqs: Vec<i64> = rows[range].iter().map(|r| r.seq).collect();
        let audit = cx.file.audit_enabled("loop")?;
        let outcome = cx.file.loop_remove(&loop_name, &seqs, audit)?;
        Ok(json!({
            "cleared": outcome.removed,
            "remaining": rows.len() - outcome.removed,
            "audited": outcome.audit_id.is_some(),
            "loop": loop_name,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::python_slice;

    #[test]
    fn slices_follow_python() {
        assert_eq!(python_slice(None, None, 10), 0..10);
        assert_eq!(python_slice(None, Some(5), 10), 0..5);
        assert_eq!(python_slice(None, Some(-5), 10), 0..5);
        assert_eq!(python_slice(Some(-3), None, 10), 7..10);
        assert_eq!(python_slice(Some(2), Some(8), 10), 2..8);
        assert_eq!(python_slice(Some(8), Some(2), 10), 8..8);
        assert_eq!(python_slice(Some(-20), Some(50), 10), 0..10);
        assert_eq!(python_slice(None, None, 0), 0..0);
    }
}
