//! The loops of one agent in one process (§6.4): a session per loop, the turns of several
//! loops side by side, and the wakes that `loop_send` (`wake: true`) and `loop_manage create`
//! (autostart) ask for.
//!
//! Turns run in rounds. A round runs at most one turn per loop, all of them concurrently on
//! the caller's task over one [`SharedFile`] (each turn holds the file for a store step and
//! releases it while its model answers). The wakes a round's turns ask for make the next
//! round, so a target owes at most one kick per round however many messages it was sent (the
//! messages are rows already; a kick turn records nothing new, so each is read exactly once)
//! and a wake for a busy loop is served when its turn has ended.

use std::collections::BTreeMap;

use adf_store::AdfFile;
use serde_json::Value;

use super::{
    Executor, ExecutorError, Session, SharedFile, Trigger, TurnHost, TurnOutcome, log_dropped,
};
use crate::tools::builtin::loops::loop_config;

/// Turns one call of [`LoopPool::run_many`] may run before it stops, so loops that keep
/// waking each other cannot spin forever.
pub(crate) const MAX_WAKE_TURNS: usize = 32;

/// What each turn of a round did, by loop name, in the order they were asked for.
pub type LoopResults = Vec<(String, Result<TurnOutcome, ExecutorError>)>;

/// Sessions by loop name.
#[derive(Debug, Default)]
pub struct LoopPool {
    sessions: BTreeMap<String, Session>,
}

impl LoopPool {
    /// A pool with no session open yet.
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

    /// Runs a turn of `loop_name`, then every wake it caused (see [`Self::run_many`]).
    pub async fn run(
        &mut self,
        executor: &Executor,
        file: &mut AdfFile,
        loop_name: &str,
        trigger: Trigger,
        host: &dyn TurnHost,
    ) -> Result<LoopResults, ExecutorError> {
        self.run_many(executor, file, vec![(loop_name.to_owned(), trigger)], host)
            .await
    }

    /// Serves wakes (see [`Self::run_many`]).
    pub async fn drain_wakes(
        &mut self,
        executor: &Executor,
        file: &mut AdfFile,
        targets: Vec<String>,
        host: &dyn TurnHost,
    ) -> Result<LoopResults, ExecutorError> {
        self.run_many(executor, file, wakes(targets), host).await
    }

    /// Runs `turns` side by side (one round), then the rounds of wakes they cause, up to
    /// `MAX_WAKE_TURNS` turns. A second trigger for a loop already in a round waits for the
    /// next round. A wake for a loop that does not exist or is disabled is dropped and logged
    /// `loop_dispatch_dropped` (§6.4); it never goes to main. Each loop runs with its own
    /// model when it names one ([`Executor::for_loop`]).
    pub async fn run_many(
        &mut self,
        executor: &Executor,
        file: &mut AdfFile,
        turns: Vec<(String, Trigger)>,
        host: &dyn TurnHost,
    ) -> Result<LoopResults, ExecutorError> {
        let shared = SharedFile::new(file);
        self.run_many_shared(executor, &shared, turns, host).await
    }

    /// [`LoopPool::run_many`] on a file shared with the caller (a leased one: the daemon).
    pub async fn run_many_shared(
        &mut self,
        executor: &Executor,
        shared: &SharedFile<'_>,
        turns: Vec<(String, Trigger)>,
        host: &dyn TurnHost,
    ) -> Result<LoopResults, ExecutorError> {
        self.run_many_claimed(executor, shared, turns, host, &|_| true)
            .await
    }

    /// [`LoopPool::run_many_shared`] for a host whose other turn jobs may run loops of the
    /// same agent meanwhile (the daemon): before a wake joins a round, `claim` must take its
    /// loop for this call (true when it has it, also when it had it already). A wake whose
    /// loop another job holds is left out; the host serves it after that job (`claim` saw it).
    pub async fn run_many_claimed(
        &mut self,
        executor: &Executor,
        shared: &SharedFile<'_>,
        turns: Vec<(String, Trigger)>,
        host: &dyn TurnHost,
        claim: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<LoopResults, ExecutorError> {
        let mut waiting = std::collections::VecDeque::from(turns);
        let mut results = LoopResults::new();
        // An aborted job starts no further round: its wakes are dropped with it.
        while !waiting.is_empty() && results.len() < MAX_WAKE_TURNS && !host.aborted() {
            let mut guard = shared.lock().await?;
            let file: &mut AdfFile = &mut guard;
            let config = file.config_shared()?;
            let mut round: Vec<(String, Session, Trigger, Option<Executor>)> = Vec::new();
            let mut later = std::collections::VecDeque::new();
            while let Some((target, trigger)) = waiting.pop_front() {
                if results.len() + round.len() >= MAX_WAKE_TURNS {
                    break;
                }
                if round.iter().any(|(name, ..)| *name == target) {
                    later.push_back((target, trigger));
                    continue;
                }
                if matches!(trigger, Trigger::Wake { .. }) && !available(&config, &target) {
                    log_dropped(file, &target, "wake")?;
                    self.stop(&target);
                    continue;
                }
                if !claim(&target) {
                    // Another job runs this loop: its session there is the live one.
                    self.stop(&target);
                    continue;
                }
                self.session(executor, file, &target)?;
                let Some(session) = self.sessions.remove(&target) else {
                    continue;
                };
                let own = executor.for_loop(&config, &target);
                round.push((target, session, trigger, own));
            }
            waiting = later;
            drop(guard);
            let outcomes =
                futures::future::join_all(round.iter_mut().map(|(_, session, trigger, own)| {
                    own.as_ref().unwrap_or(executor).run_turn_shared(
                        shared,
                        session,
                        trigger.clone(),
                        host,
                    )
                }))
                .await;
            for ((name, session, ..), outcome) in round.into_iter().zip(outcomes) {
                // A loop deleted or disabled mid-turn keeps no session (STL-42).
                if !matches!(outcome, Err(ExecutorError::LoopStopped(_))) {
                    self.sessions.insert(name.clone(), session);
                }
                if let Ok(o) = &outcome {
                    for wake in wakes(o.wakes.clone()) {
                        if !waiting.iter().any(|(name, _)| *name == wake.0) {
                            waiting.push_back(wake);
                        }
                    }
                }
                results.push((name, outcome));
            }
        }
        Ok(results)
    }
}

/// The loops an agent start kicks (STL-44): every enabled loop with `autostart`, and only when
/// the agent starts `active` (missing-tables §6.4). A kick is a wake: the loop reads its goal
/// and whatever is waiting in its transcript.
pub fn autostart_loops(config: &Value) -> Vec<String> {
    let state = config
        .get("state")
        .and_then(Value::as_str)
        .unwrap_or("active");
    if state != "active" {
        return Vec::new();
    }
    config
        .get("loops")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|l| {
            l.get("enabled").and_then(Value::as_bool) == Some(true)
                && l.get("autostart").and_then(Value::as_bool) == Some(true)
        })
        .filter_map(|l| l.get("name").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// Whether wakes may reach `target`: main, or an enabled inner loop.
fn available(config: &Value, target: &str) -> bool {
    target == "main"
        || loop_config(config, target)
            .is_some_and(|l| l.get("enabled").and_then(Value::as_bool) == Some(true))
}

/// Wake triggers for `targets`, as `run_many` takes them.
pub fn wakes(targets: Vec<String>) -> Vec<(String, Trigger)> {
    targets
        .into_iter()
        .map(|target| {
            (
                target,
                Trigger::Wake {
                    event_type: "loop_send".into(),
                },
            )
        })
        .collect()
}
