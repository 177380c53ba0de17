//! An agent's channel adapters as its record holds them (see `adapters`): the running
//! [`AdapterHost`], if any. A leaf: it imports nothing of the daemon.

use adf_adapters::{
    AdapterError, AdapterHost, AdapterStatus, Delivered, OutboundMessage, WebhookRequest,
    WebhookResponse,
};
use serde_json::{Value, json};

/// The adapter host of one loaded agent; empty while the agent is `off`, before its first
/// start and after unload.
#[derive(Debug, Default)]
pub(crate) struct AgentAdapters {
    // A read lock is held across one delivery, so a stop waits for deliveries in flight
    // instead of dropping them half-sent.
    host: tokio::sync::RwLock<Option<AdapterHost>>,
}

impl AgentAdapters {
    /// Whether a host runs now.
    pub(crate) async fn is_started(&self) -> bool {
        self.host.read().await.is_some()
    }

    /// Installs `host`; a host already installed is returned to be stopped by the caller.
    pub(crate) async fn install(&self, host: AdapterHost) -> Option<AdapterHost> {
        self.host.write().await.replace(host)
    }

    /// Takes the host out, to stop it.
    pub(crate) async fn take(&self) -> Option<AdapterHost> {
        self.host.write().await.take()
    }

    /// Stops the running host, if any, and waits for its adapters (each ends `stopped`).
    pub(crate) async fn stop(&self) {
        if let Some(host) = self.take().await {
            host.stop().await;
        }
    }

    /// The status of every configured adapter; `None` when no host runs (the agent is `off`
    /// or configures no adapter).
    pub(crate) async fn statuses(&self) -> Option<Vec<AdapterStatus>> {
        self.host.read().await.as_ref().map(AdapterHost::statuses)
    }

    /// Delivers one `type:id` message through the running host.
    pub(crate) async fn deliver(
        &self,
        message: &OutboundMessage,
    ) -> Result<Delivered, AdapterError> {
        match self.host.read().await.as_ref() {
            Some(host) => host.deliver(message).await,
            None => Err(AdapterError::Invalid(
                "the agent runs no channel adapters now (it is off, or its config enables none)"
                    .to_owned(),
            )),
        }
    }

    /// Hands a webhook request to adapter `kind` of the running host; 503 while none runs (a
    /// platform retries later).
    pub(crate) async fn webhook(&self, kind: &str, request: &WebhookRequest) -> WebhookResponse {
        match self.host.read().await.as_ref() {
            Some(host) => host.webhook(kind, request).await,
            None => WebhookResponse::error(503, "the agent runs no channel adapters now"),
        }
    }

    /// `chat_info` (MSG-48) through the running host: the chat's metadata, or `{supported:
    /// false, reason}` when no adapter of that type runs.
    pub(crate) async fn chat_info(
        &self,
        adapter: &str,
        chat_id: &str,
        limit: u32,
    ) -> Result<Value, AdapterError> {
        match self.host.read().await.as_ref() {
            Some(host) => host.chat_info(adapter, chat_id, Some(limit)).await,
            None => Ok(json!({
                "supported": false,
                "reason": format!(
                    "no {adapter} adapter runs for this agent now (it is off, or its config enables no adapter)"
                ),
            })),
        }
    }
}
