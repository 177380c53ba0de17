//! Compaction (spec §13.2, tools guide `loop_compact`): summarize the older part of a loop's
//! transcript with a dedicated prompt, snapshot what is removed to `adf_audit` as
//! `loop:<name>` when `audit.loop` is on, delete it, and insert the summary as a user row
//! starting `[Loop Compacted]` / `[Loop Compacted, audited]` whose `ord` sorts it before the
//! preserved tail. `seq` is never renumbered; the store does steps 2–4 in one transaction.
//!
//! The preserved tail: for `loop_compact`, the step that called it (the assistant row and its
//! results), so the call stays paired with its result; for automatic compaction, the last
//! [`PRESERVE_ROWS`] rows. A tail never starts with a tool result whose call would be gone.
//! The prompt and the summary format are ours (Appendix B #9).

use adf_providers::{ChatRequest, Message};
use adf_store::AdfFile;

use super::request::is_system_prompt_row;
use super::{Executor, ExecutorError, Session};

/// Rows automatic compaction keeps verbatim.
pub(crate) const PRESERVE_ROWS: usize = 4;
/// Longest text of one block shown to the summarizer.
const BLOCK_CHARS: usize = 4_000;

/// The dedicated compaction prompt.
pub const COMPACTION_PROMPT: &str = "You compact the transcript of an AI agent's conversation. \
Write a briefing the agent will read instead of the transcript: organize it by topic; keep \
specific facts verbatim (file paths, names, numbers, decisions, commitments, open questions, \
errors still unresolved, pending work and who is waiting on what); drop pleasantries and \
superseded details. Write in the second person (\"You were asked to ...\"). Cite transcript \
rows as [S<seq>] where it helps. Reply with the briefing only.";

/// What a compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactOutcome {
    /// The loop whose transcript was compacted.
    pub loop_name: String,
    /// Rows deleted.
    pub removed: usize,
    /// The summary row.
    pub summary_seq: i64,
    /// The audit snapshot, when `audit.loop` is on.
    pub audit_id: Option<i64>,
}

fn block_text(block: &serde_json::Value) -> String {
    let clip = |s: &str| -> String {
        if s.chars().count() > BLOCK_CHARS {
            let mut out: String = s.chars().take(BLOCK_CHARS).collect();
            out.push_str(" […]");
            out
        } else {
            s.to_owned()
        }
    };
    match block.get("type").and_then(|t| t.as_str()) {
        Some("text") => clip(block.get("text").and_then(|t| t.as_str()).unwrap_or("")),
        Some("tool_use") => format!(
            "(calls {} with {})",
            block.get("name").and_then(|t| t.as_str()).unwrap_or("?"),
            clip(
                &block
                    .get("input")
                    .map(ToString::to_string)
                    .unwrap_or_default()
            )
        ),
        Some("tool_result") => {
            let content = match block.get("content") {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            format!("(tool result) {}", clip(&content))
        }
        Some("thinking") => String::new(),
        Some(other) => format!("({other})"),
        None => String::new(),
    }
}

impl Executor {
    /// Compacts `session`'s loop. `tail_from` is the `seq` of the first row to keep (the
    /// step that called `loop_compact`); `None` keeps the last `PRESERVE_ROWS` rows.
    /// Returns `None` when there is nothing to summarize.
    pub async fn compact(
        &self,
        file: &mut AdfFile,
        session: &mut Session,
        instructions: Option<&str>,
        tail_from: Option<i64>,
    ) -> Result<Option<CompactOutcome>, ExecutorError> {
        let loop_name = session.loop_name.clone();
        let rows = file.loop_rows(&loop_name)?;
        let mut split = match tail_from {
            Some(seq) => rows.iter().position(|r| r.seq == seq).unwrap_or(rows.len()),
            None => rows.len().saturating_sub(PRESERVE_ROWS),
        };
        let is_result_row = |i: usize| {
            rows[i].content.as_array().is_some_and(|blocks| {
                !blocks.is_empty()
                    && blocks
                        .iter()
                        .all(|b| b.get("type").and_then(|t| t.as_str()) == Some("tool_result"))
            })
        };
        while split < rows.len() && is_result_row(split) {
            split += 1;
        }
        let removed = &rows[..split];
        let transcript: Vec<String> = removed
            .iter()
            .filter(|r| !is_system_prompt_row(r) && !super::request::is_turn_end_row(r))
            .map(|r| {
                let text: Vec<String> = r
                    .content
                    .as_array()
                    .map(|a| a.iter().map(block_text).filter(|t| !t.is_empty()).collect())
                    .unwrap_or_default();
                format!("[S{}] {}: {}", r.seq, r.role, text.join("\n"))
            })
            .collect();
        if transcript.is_empty() {
            return Ok(None);
        }
        let mut ask = format!(
            "Compact this transcript of loop '{loop_name}':\n\n{}",
            transcript.join("\n\n")
        );
        if let Some(extra) = instructions.filter(|i| !i.trim().is_empty()) {
            ask.push_str(&format!(
                "\n\nInstructions from the agent for this summary: {extra}"
            ));
        }
        let req = ChatRequest {
            model: self.model_id.clone(),
            system: Some(COMPACTION_PROMPT.to_owned()),
            messages: vec![Message::user_text(ask)],
            tools: std::sync::Arc::default(),
            params: self.params.clone(),
            wire: adf_providers::WireCache::default(),
        };
        let (reply, retried) = self.watched(&NoHost, self.provider.complete(&req)).await;
        super::log_retries(file, Some(&loop_name), &retried)?;
        let summary = reply?.text();
        let summary = if summary.trim().is_empty() {
            "(the summarizer returned nothing)".to_owned()
        } else {
            summary
        };
        let audit = file.audit_enabled("loop")?;
        let prefix = if audit {
            "[Loop Compacted, audited]"
        } else {
            "[Loop Compacted]"
        };
        let seqs: Vec<i64> = removed.iter().map(|r| r.seq).collect();
        let (summary_seq, outcome) =
            file.loop_compact_apply(&loop_name, &seqs, &format!("{prefix} {summary}"), audit)?;
        session.reset();
        session.context_tokens = 0;
        Ok(Some(CompactOutcome {
            loop_name,
            removed: outcome.removed,
            summary_seq,
            audit_id: outcome.audit_id,
        }))
    }
}

/// A host for places that have nothing to show.
struct NoHost;

impl super::TurnHost for NoHost {
    fn approver(&self) -> &dyn crate::tools::Approver {
        &crate::tools::approval::DenyAll
    }

    fn answer(&self, _question: &str) -> Option<String> {
        None
    }
}
