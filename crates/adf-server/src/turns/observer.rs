//! [`TurnObserver`]: a turn job's side of each hand-over of its leased file — which rows and
//! files the turn wrote, and which another writer did meanwhile. Below HIL, whose waiting turn
//! hands the file to the jobs it serves and takes it back through the same observer, and below
//! the turn host (`turns.rs`), which collects what it observed after the job. The observation
//! itself is the one every job uses (`lambdas::LeaseObserver`), with the agent as producer.

use std::sync::Arc;

use adf_runtime::triggers::Producer;

use crate::lambdas::LeaseObserver;
use crate::registry::Agent;

/// The turn's observer: rows and file changes since it took the lease are the agent's.
pub(crate) type TurnObserver = LeaseObserver;

/// A new observation of one turn job of `agent`.
pub(crate) fn turn_observer(agent: Arc<Agent>) -> TurnObserver {
    LeaseObserver::new(
        Producer::Agent,
        Arc::new(move |file, producer| crate::dispatch::sweep(file, &agent, producer)),
    )
}
