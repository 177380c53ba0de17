//! [`TurnObserver`]: a turn job's side of each hand-over of its leased file — which rows and
//! files the turn wrote, and which another writer did meanwhile. Below HIL, whose waiting turn
//! hands the file to the jobs it serves and takes it back through the same observer, and below
//! the turn host (`turns.rs`), which collects what it observed after the job.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use adf_runtime::executor::LeaseHooks;
use adf_runtime::triggers::{Producer, TriggerEvent};
use adf_store::AdfFile;

use crate::registry::Agent;

/// The turn's side of each lease hand-over (`LeaseHooks`): when the file comes from the
/// worker, rows that appeared since (another process) are external events and the file
/// stamps are taken; when it goes back, the rows since are the turn's and the files whose
/// stamp moved are the turn's writes. Jobs that ran in between (timer lambdas, owner writes,
/// deliveries) sweep their own rows, so none of the turn's rows is another's and the other
/// way round.
#[derive(Debug)]
pub(crate) struct TurnObserver {
    agent: Arc<Agent>,
    state: Mutex<Observed>,
}

#[derive(Debug, Default)]
struct Observed {
    stamps: Option<HashMap<String, (String, i64)>>,
    /// Path → size of a file the turn wrote, `None` for one it deleted.
    written: BTreeMap<String, Option<i64>>,
    events: Vec<TriggerEvent>,
}

impl TurnObserver {
    pub(crate) fn new(agent: Arc<Agent>) -> Self {
        Self {
            agent,
            state: Mutex::new(Observed::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Observed> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The files the turn wrote or deleted (path order) and the row events it produced, in
    /// order.
    pub(super) fn take(&self) -> (crate::support::FileChanges, Vec<TriggerEvent>) {
        let mut state = self.lock();
        let written = std::mem::take(&mut state.written).into_iter().collect();
        (written, std::mem::take(&mut state.events))
    }
}

impl LeaseHooks for TurnObserver {
    fn acquired(&self, file: &mut AdfFile) {
        let external = crate::dispatch::sweep(file, &self.agent, &Producer::External);
        let stamps = crate::support::file_stamps(file);
        let mut state = self.lock();
        state.events.extend(external);
        state.stamps = Some(stamps);
    }

    fn releasing(&self, file: &mut AdfFile) {
        let own = crate::dispatch::sweep(file, &self.agent, &Producer::Agent);
        // Taken in a statement of its own: a `let … else` would keep the guard through `else`.
        let before = self.lock().stamps.take();
        let after = before.as_ref().map(|_| crate::support::file_stamps(file));
        let mut state = self.lock();
        state.events.extend(own);
        let (Some(before), Some(after)) = (before, after) else {
            return;
        };
        state
            .written
            .extend(crate::support::changed_files(&before, after));
    }
}
