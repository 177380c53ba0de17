//! What building one platform's adapter gets from the host: its settings, the sink, the
//! sleeper, and the one way to read a credential (`adf_identity`, no fallback, §8.2).

use std::sync::Arc;

use crate::Sleeper;
use crate::config::AdapterSettings;
use crate::error::AdapterError;
use crate::sink::{AdapterSink, Secret};

/// The inputs of one platform's `build`.
pub(crate) struct Building<'a> {
    /// The adapter's validated config entry.
    pub(crate) settings: &'a AdapterSettings,
    /// The seam to the host process.
    pub(crate) sink: &'a Arc<dyn AdapterSink>,
    /// How the adapter waits (rate limits, reconnects).
    pub(crate) sleeper: &'a Arc<dyn Sleeper>,
}

impl Building<'_> {
    /// The credential stored under `purpose` (`adapter:<type>:<KEY>`), or the error that names
    /// the purpose and the command that sets it. Blank counts as missing.
    pub(crate) async fn required_credential(&self, purpose: &str) -> Result<Secret, AdapterError> {
        self.optional_credential(purpose)
            .await?
            .ok_or_else(|| AdapterError::MissingCredential {
                adapter: self.settings.kind.clone(),
                purpose: purpose.to_owned(),
                file: self.sink.agent_file().display().to_string(),
            })
    }

    /// The credential stored under `purpose`, if one is set and not blank.
    pub(crate) async fn optional_credential(
        &self,
        purpose: &str,
    ) -> Result<Option<Secret>, AdapterError> {
        let credential = self
            .sink
            .credential(purpose)
            .await
            .map_err(|e| AdapterError::Sink {
                adapter: self.settings.kind.clone(),
                reason: e.to_string(),
            })?;
        Ok(credential.filter(|secret| !secret.expose().trim().is_empty()))
    }
}
