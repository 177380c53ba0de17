//! The one decision of a daemon turn's model: the runtime settings' providers and keys (`PUT
//! /settings/providers`) and the agent's config, resolved once per turn job. An owner chat
//! decides it before answering (503 when no model is reachable) and hands the decision to its
//! turn; a turn started by a trigger, a timer or autostart decides it when its job starts. The
//! turn's executor is built from the decision, never from a second resolution, so the answer
//! the owner got and the model the turn asks cannot disagree.

use serde_json::Value;

use adf_providers::{ProviderError, ResolvedModel};
use adf_runtime::executor::{Executor, RetryLog};
use adf_runtime::home::RuntimeHome;

/// A turn job's decided model: the provider client (with its retry policy and observer), the
/// model id and its parameters.
pub(crate) struct TurnModel {
    resolved: ResolvedModel,
    retries: RetryLog,
}

impl TurnModel {
    /// Decides the model `config` names with the providers and keys of `home`'s runtime
    /// settings; `io` is the runtime the provider sends its requests on. The error says why no
    /// model is reachable (no provider, no key, no model id).
    pub(crate) fn decide(
        home: &RuntimeHome,
        io: Option<tokio::runtime::Handle>,
        config: &Value,
    ) -> Result<Self, ProviderError> {
        let retries = RetryLog::default();
        let resolved = crate::settings::runtime_resolver(home)
            .with_io_runtime(io)
            .with_retry_observer(retries.observer())
            .resolve(config, None)?;
        Ok(Self { resolved, retries })
    }

    /// The executor that asks the decided model.
    pub(crate) fn executor(self) -> Executor {
        Executor::from_resolved(self.resolved, self.retries)
    }
}
