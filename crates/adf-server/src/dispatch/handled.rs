//! [`Handled`]: what one handler job (a trigger delivery, a tap, a turn) did, reported back
//! to the async side of dispatch. It names only the lambda report and the wake read, so the
//! hub's `Subsystems::run_trigger_turn` (the turn host's answer to an agent-scope delivery)
//! names it without importing dispatch.

use adf_runtime::triggers::{Producer, TriggerEvent};

use crate::lambdas::LambdaReport;

/// What one delivery job did, reported back to the async side.
pub(crate) struct Handled {
    pub(crate) report: Option<LambdaReport>,
    pub(crate) written: crate::support::FileChanges,
    pub(crate) producer: Producer,
    pub(crate) events: Vec<TriggerEvent>,
    /// The agent's next timer or nudge wake after the handler ran (it may have set a timer
    /// or changed the state); `None` when it could not be read.
    pub(crate) wake: Option<crate::scheduler::WakeRead>,
}

impl Handled {
    pub(crate) fn skipped() -> Self {
        Self {
            report: None,
            written: Vec::new(),
            producer: Producer::Agent,
            events: Vec::new(),
            wake: None,
        }
    }
}
