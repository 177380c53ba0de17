//! The one seam between the adapters and the process that hosts an agent (the daemon):
//! everything an adapter needs of the agent's file goes through [`AdapterSink`], so this crate
//! never opens an `.adf` file and never runs SQL.

use std::path::PathBuf;

use zeroize::Zeroizing;

use crate::BoxFuture;
use crate::host::AdapterState;
use crate::message::InboundMessage;

/// A credential value; `Debug` never shows it and the memory is wiped on drop.
pub struct Secret(Zeroizing<String>);

impl Secret {
    /// Wraps a credential value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(Zeroizing::new(value.into()))
    }

    /// The value, for the one place that must send it (a request URL or header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A failure of the host behind the seam (the file could not be read or written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SinkError(pub String);

/// One adapter state change, recorded once per change (a log row, an event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateChange {
    /// The adapter type.
    pub adapter: String,
    /// The state entered.
    pub state: AdapterState,
    /// Why, when the change is a failure (never a credential value).
    pub error: Option<String>,
}

/// What an adapter host needs from the agent's host process. The daemon implements it per
/// loaded agent on top of the agent's store worker; tests implement it on an open `AdfFile`.
pub trait AdapterSink: Send + Sync + 'static {
    /// Writes one inbound message as an `adf_inbox` row (`InboundMessage::to_inbox_row`) and
    /// returns the row id. A host should treat a second message with the same
    /// `message_id` as already stored and return the first row's id, so a platform that
    /// re-sends after a crash does not double a row. The agent's `on_inbox` triggers fire as
    /// for any new row.
    fn write_inbound(&self, message: InboundMessage) -> BoxFuture<'_, Result<String, SinkError>>;

    /// Stores an attachment in the agent's files as `dir/filename` (§11.4; a free name such as
    /// `dir/1-filename` when that one is taken) and returns the path written.
    fn write_file<'a>(
        &'a self,
        dir: &'a str,
        filename: &'a str,
        bytes: Vec<u8>,
        content_type: Option<String>,
    ) -> BoxFuture<'a, Result<String, SinkError>>;

    /// The unsealed value of the `adf_identity` row `purpose` (`adapter:<type>:<KEY>`), `None`
    /// when there is no such row. No other source may answer (§8.2, IDN-37).
    fn credential<'a>(
        &'a self,
        purpose: &'a str,
    ) -> BoxFuture<'a, Result<Option<Secret>, SinkError>>;

    /// Records one state change (a log row and an `adapter.status.changed` event).
    fn state_changed(&self, change: StateChange) -> BoxFuture<'_, ()>;

    /// The agent's `.adf` file: error messages name it in the fixing command, and the adapter
    /// state lives beside it in `<agent>.adf.adapters/<type>/` (§16).
    fn agent_file(&self) -> PathBuf;

    /// The agent's egress policy; every platform URL is admitted through it.
    fn egress_policy(&self) -> adf_egress::Policy;
}
