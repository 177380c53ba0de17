//! `adf-adapters`: channel adapters (§5.13, §11.6) — an agent reachable where people already
//! talk.
//!
//! - [`Adapter`] is the one small trait every platform implements: [`Adapter::run`] (receive
//!   until the [`StopSignal`] fires), [`Adapter::deliver`] (one outbound message),
//!   [`Adapter::chat_info`] and [`Adapter::test_credential`].
//! - [`AdapterHost`] (`host.rs`) runs the adapters of one agent from its `adapters` config and
//!   its credentials: it starts each enabled one, restarts it with backoff after a transient
//!   failure, keeps a per-adapter [`AdapterStatus`] and reports one [`StateChange`] per change.
//! - [`AdapterSink`] (`sink.rs`) is the one seam to the host process (the daemon): it writes an
//!   [`InboundMessage`] as an `adf_inbox` row, reads an `adapter:<type>:<KEY>` credential from
//!   `adf_identity` (no fallback, §8.2), records state changes, names the agent's file (whose
//!   `<agent>.adf.adapters/<type>/` directory holds adapter state, §16) and gives the egress
//!   policy.
//! - [`AdapterSettings`] (`config.rs`) is one adapter's config entry, validated (CFG-49); its
//!   [`InboundPolicy`] (`dm`, `groups`, `allow_from`) is applied before anything is stored.
//! - `telegram/` is the Telegram Bot API adapter (long polling with a persisted offset, replies,
//!   forms as inline keyboards, 429 `retry_after`), speaking HTTP only through an
//!   `adf_egress` client after `Policy::admit`.
//! - `discord/` is the Discord adapter: the Gateway WebSocket in (through
//!   `adf_egress::connect_websocket`; heartbeats with an ACK check, IDENTIFY, RESUME with the
//!   session and sequence kept in the state directory), the HTTP API out (replies with a
//!   `message_reference`, forms as message components, 429 `retry_after`).
//! - `slack/` is the Slack adapter (Socket Mode in, Web API out, Block Kit forms).
//! - `email/` is the email adapter: IMAP in (IDLE or polling, UID/UIDVALIDITY persisted, MIME
//!   parsed by mail-parser), SMTP submission out (lettre, threaded replies, questionnaire
//!   forms), every connection from `adf_egress::connect_tcp`.
//! - `whatsapp/` is the WhatsApp Business Cloud API adapter: inbound through the daemon's
//!   webhook route ([`Adapter::webhook`], `webhook.rs`: signature checked first), outbound
//!   through the Graph API.
//!
//! Each platform is one module with its `KIND` and a `build` the host calls with a
//! `platform::Building` (settings, sink, sleeper, the credential reader).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

mod config;
pub mod discord;
pub mod email;
mod error;
mod form_memory;
mod forms;
mod host;
mod message;
mod platform;
mod sink;
pub mod slack;
mod state_dir;
pub mod telegram;
mod webhook;
pub mod whatsapp;

pub use config::{
    AdapterSettings, DEFAULT_MAX_ATTACHMENT_SIZE, DmPolicy, GroupPolicy, InboundPolicy, Sender,
};
pub use error::AdapterError;
pub use forms::{FORM_CONTENT_TYPE, Form, FormOption, FormQuestion, questionnaire_text};
pub use host::{AdapterHost, AdapterState, AdapterStatus, Backoff, HostOptions};
pub use message::{Delivered, InboundMessage, OutboundMessage, parse_recipient};
pub use sink::{AdapterSink, Secret, SinkError, StateChange};
pub use state_dir::{StateDir, state_root_for};
pub use webhook::{WebhookRequest, WebhookResponse};

/// A boxed, sendable future: the trait methods' return type, so the traits stay object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The adapter types this crate knows, implemented or not.
pub const KNOWN_ADAPTERS: &[&str] = &["telegram", "email", "slack", "discord", "whatsapp"];

/// One platform adapter of one agent.
pub trait Adapter: Send + Sync + 'static {
    /// The adapter type (`telegram`, …): the `source` of its inbox rows.
    fn kind(&self) -> &'static str;

    /// Receives from the platform until `session`'s stop signal fires (then `Ok`), calling
    /// [`Session::running`] once it is connected. An `Err` ends this run; the host restarts a
    /// transient failure ([`AdapterError::is_transient`]) with backoff.
    fn run<'a>(&'a self, session: &'a Session) -> BoxFuture<'a, Result<(), AdapterError>>;

    /// Delivers one outbound message; `Err` is a `failed` outbox row with the platform's reason.
    fn deliver<'a>(
        &'a self,
        message: &'a OutboundMessage,
    ) -> BoxFuture<'a, Result<Delivered, AdapterError>>;

    /// Metadata of one chat (`chat_info`, MSG-48); `limit` is already checked (1–100).
    fn chat_info<'a>(
        &'a self,
        chat_id: &'a str,
        limit: u32,
    ) -> BoxFuture<'a, Result<Value, AdapterError>>;

    /// Checks the credential against the platform and says who it belongs to.
    fn test_credential(&self) -> BoxFuture<'_, Result<Value, AdapterError>>;

    /// Answers one request of the platform to the agent's webhook route (a platform that
    /// pushes rather than being polled). The adapter authenticates it before storing anything;
    /// the default is the answer of an adapter that takes no webhooks.
    fn webhook<'a>(&'a self, request: &'a WebhookRequest) -> BoxFuture<'a, WebhookResponse> {
        let _unused = request;
        Box::pin(async move {
            WebhookResponse::error(
                404,
                &format!("the {} adapter takes no webhooks", self.kind()),
            )
        })
    }
}

/// Waits without holding a thread; tests replace it to record waits instead of sleeping.
pub trait Sleeper: Send + Sync + 'static {
    /// Completes after `duration` (or at once, for a recording sleeper).
    fn sleep(&self, duration: Duration) -> BoxFuture<'_, ()>;
}

/// The real clock: `tokio::time::sleep`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, duration: Duration) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// Tells running adapters to stop; every clone of its [`StopSignal`] sees it.
#[derive(Debug, Clone)]
pub struct StopHandle(Arc<tokio::sync::watch::Sender<bool>>);

/// Whether (and when) an adapter was told to stop.
#[derive(Debug, Clone)]
pub struct StopSignal(tokio::sync::watch::Receiver<bool>);

/// A new stop handle and its signal.
pub fn stop_pair() -> (StopHandle, StopSignal) {
    let (tx, rx) = tokio::sync::watch::channel(false);
    (StopHandle(Arc::new(tx)), StopSignal(rx))
}

impl StopHandle {
    /// Signals stop (idempotent).
    pub fn stop(&self) {
        self.0.send_replace(true);
    }
}

impl StopSignal {
    /// Whether stop was signalled.
    pub fn is_stopped(&self) -> bool {
        *self.0.borrow()
    }

    /// Completes once stop is signalled (at once if it was; also when the handle is gone).
    pub async fn stopped(&self) {
        let mut rx = self.0.clone();
        // An error means the handle was dropped: nobody can stop us any more, so stop now.
        let _stopped_or_orphaned = rx.wait_for(|stopped| *stopped).await;
    }
}

/// What one run of an adapter gets from the host.
#[derive(Debug)]
pub struct Session {
    stop: StopSignal,
    running: tokio::sync::mpsc::UnboundedSender<()>,
}

impl Session {
    /// A session ending with `stop`; `running` hears [`Session::running`].
    pub(crate) fn new(stop: StopSignal, running: tokio::sync::mpsc::UnboundedSender<()>) -> Self {
        Session { stop, running }
    }

    /// The signal to watch while receiving.
    pub fn stop(&self) -> &StopSignal {
        &self.stop
    }

    /// Tells the host the adapter is connected (the `running` state).
    pub fn running(&self) {
        // The host gone means nobody listens for states any more; nothing to tell.
        let _unheard = self.running.send(());
    }
}
