//! The loops of one agent in one process (§6.4): a session per loop, and the wakes that
//! `loop_send` (`wake: true`) and `loop_manage create` (autostart) ask for.
//!
//! This embedded pool runs loops one after another on the caller's task: a wake is served
//! when the turn that asked for it has ended, so "busy target" never arises and each target
//! owes at most one kick per round however many messages it was sent (the messages are rows
//! already; the kick turn records nothing new, so each is read exactly once). A daemon that
//! runs loops concurrently keeps the same per-loop sessions behind its store handle.

use std::collections::BTreeMap;

use adf_store::AdfFile;

use super::{Executor, ExecutorError, Session, Trigger, TurnHost, TurnOutcome, log_dropped};
use crate::tools::builtin::loops::loop_config;

/// Wake turns one round of [`LoopPool::drain_wakes`] may run before it stops, so loops that
/// keep waking each other cannot spin forever.
pub const MAX_WAKE_TURNS: usize = 32;

/// Sessions by loop name.
#[derive(Debug, Default)]
pub struct LoopPool {
    sessions: BTreeMap<String, Session>,
}

impl LoopPool {
    pub fn new() -> Self {
        Self::default()
    }

    /// The session of `loop_name`, opened (with recovery) on first use.
    pub fn session(
        &mut self,
        executor: &Executor,
        file: &mut AdfFile,
        loop_name: &str,
    ) -> Result<&mut Session, ExecutorError> {
        if !self.sessions.contains_key(loop_name) {
            let session = executor.open_session(file, loop_name)?;
            self.sessions.insert(loop_name.to_owned(), session);
        }
        self.sessions
            .get_mut(loop_name)
            .ok_or_else(|| ExecutorError::LoopUnavailable(loop_name.to_owned()))
    }

    /// Forgets a loop's session (deleted or disabled loops).
    pub fn stop(&mut self, loop_name: &str) {
        self.sessions.remove(loop_name);
    }

    /// Runs a turn of `loop_name`, then every wake it caused (see [`Self::drain_wakes`]).
    pub async fn run(
        &mut self,
        executor: &Executor,
        file: &mut AdfFile,
        loop_name: &str,
        trigger: Trigger,
        host: &dyn TurnHost,
    ) -> Result<Vec<(String, Result<TurnOutcome, ExecutorError>)>, ExecutorError> {
        let session = self.session(executor, file, loop_name)?;
        let outcome = executor.run_turn(file, session, trigger, host).await;
        let wakes = outcome
            .as_ref()
            .map(|o| o.wakes.clone())
            .unwrap_or_default();
        let mut all = vec![(loop_name.to_owned(), outcome)];
        all.extend(self.drain_wakes(executor, file, wakes, host).await?);
        Ok(all)
    }

    /// Serves wakes in order, each target once per pending batch, including wakes the woken
    /// turns cause, up to [`MAX_WAKE_TURNS`]. A wake for a loop that does not exist or is
    /// disabled is dropped and logged `loop_dispatch_dropped` (§6.4); it never goes to main.
    pub async fn drain_wakes(
        &mut self,
        executor: &Executor,
        file: &mut AdfFile,
        wakes: Vec<String>,
        host: &dyn TurnHost,
    ) -> Result<Vec<(String, Result<TurnOutcome, ExecutorError>)>, ExecutorError> {
        let mut queue = std::collections::VecDeque::from(wakes);
        let mut results = Vec::new();
        while let Some(target) = queue.pop_front() {
            if results.len() >= MAX_WAKE_TURNS {
                break;
            }
            let config = file.config()?;
            let available = target == "main"
                || loop_config(&config, &target).is_some_and(|l| {
                    l.get("enabled").and_then(serde_json::Value::as_bool) == Some(true)
                });
            if !available {
                log_dropped(file, &target, "wake")?;
                self.stop(&target);
                continue;
            }
            let session = self.session(executor, file, &target)?;
            let outcome = executor
                .run_turn(
                    file,
                    session,
                    Trigger::Wake {
                        event_type: "loop_send".into(),
                    },
                    host,
                )
                .await;
            if let Ok(o) = &outcome {
                for w in &o.wakes {
                    if !queue.contains(w) {
                        queue.push_back(w.clone());
                    }
                }
            }
            results.push((target, outcome));
        }
        Ok(results)
    }
}
