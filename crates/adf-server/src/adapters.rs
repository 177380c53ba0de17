//! The daemon's side of `adf-adapters` (§5.13, §11.6): an agent's channel adapters run while
//! it is loaded and not `off` ([`start`], [`stop`], [`restart`]), on [`DaemonSink`], the
//! daemon's `AdapterSink`:
//!
//! - an inbound message is one `adf_inbox` row written on a guest connection, as mesh ingress
//!   writes one (one row per platform `message_id`); the worker's check of other writers then
//!   dispatches it, so `on_inbox` fires as for a mesh message;
//! - an attachment is written as the owner, a state change is a log row (origin `adapter`) and
//!   an `adapter.status.changed` event;
//! - a credential is the `adapter:<type>:<KEY>` row of `adf_identity`, unsealed with this
//!   installation's keys (IDN-37, no other source);
//! - the egress policy is the agent's fetch policy (`security.allow_local_fetch`, the control
//!   APIs recorded in the runtime home).
//!
//! The running host lives in the agent record (`adapters/state.rs`), where the mesh routes a
//! `type:id` recipient to it, and the public webhook route (`adapters/webhook.rs`,
//! `api/webhooks.rs`) hands a platform's push to it.

use std::path::PathBuf;
use std::sync::{Arc, Weak};

use adf_adapters::{
    AdapterError, AdapterHost, AdapterSink, BoxFuture, HostOptions, InboundMessage, Secret,
    SinkError, StateChange,
};
use adf_store::messages::Mailbox;
use adf_store::{AdfFile, Caller, FileWrite, NewLog};
use serde_json::{Value, json};

use crate::hub::Hub;
use crate::registry::Agent;

pub(crate) mod state;
pub(crate) mod webhook;

pub(crate) use state::AgentAdapters;

/// Starts the agent's adapters from its `adapters` config, unless it is `off`, already runs
/// them, or configures none. A failure to read the config is a warning: the agent runs on.
pub(crate) async fn start(hub: &Arc<Hub>, agent: &Arc<Agent>) {
    if agent.info().display_state == "off" || agent.adapters().is_started().await {
        return;
    }
    let config = match agent.job(|file| file.config()).await {
        Ok(config) => config,
        Err(error) => {
            tracing::warn!(agent = %agent.id, %error, "cannot read the config to start its adapters");
            return;
        }
    };
    let Some(adapters) = config
        .get("adapters")
        .filter(|a| a.as_object().is_some_and(|o| !o.is_empty()))
    else {
        return;
    };
    let host = AdapterHost::start(adapters, sink(hub, agent, &config), HostOptions::default());
    if let Some(earlier) = agent.adapters().install(host).await {
        // Two starts raced (a load and a state change): the later host wins.
        earlier.stop().await;
    }
    if agent.info().display_state == "off" {
        // Turned off while starting: the stop that came with it found nothing to stop.
        stop(agent).await;
    }
}

fn sink(hub: &Arc<Hub>, agent: &Arc<Agent>, config: &Value) -> Arc<DaemonSink> {
    Arc::new(DaemonSink {
        hub: Arc::downgrade(hub),
        agent: Arc::downgrade(agent),
        path: agent.path.clone(),
        policy: egress_policy(hub, config),
    })
}

/// Checks the credential of the agent's `kind` adapter against its platform (`adf adapters
/// test`), without starting anything: the platform's answer (Telegram: the bot), or what is
/// wrong in words an owner can act on.
pub(crate) async fn test_credential(
    hub: &Arc<Hub>,
    agent: &Arc<Agent>,
    kind: &str,
) -> Result<Value, AdapterError> {
    let config = agent
        .job(|file| file.config())
        .await
        .map_err(|e| AdapterError::Invalid(format!("cannot read the agent's config: {e}")))?;
    let adapters = config.get("adapters").cloned().unwrap_or(Value::Null);
    AdapterHost::test_credential(
        &adapters,
        kind,
        sink(hub, agent, &config),
        HostOptions::default(),
    )
    .await
}

/// Stops the agent's adapters and waits for them (STL-04: `off`, unload, shutdown); each
/// ends `stopped`.
pub(crate) async fn stop(agent: &Agent) {
    agent.adapters().stop().await;
}

/// Stops and starts the agent's adapters again, after a change of its `adapters` config or of
/// an `adapter:*` credential.
pub(crate) async fn restart(hub: &Arc<Hub>, agent: &Arc<Agent>) {
    stop(agent).await;
    start(hub, agent).await;
}

/// The agent's fetch policy as an egress policy: the adapters' platform URLs are admitted as
/// a `sys_fetch` of the agent would be.
fn egress_policy(hub: &Hub, config: &Value) -> adf_egress::Policy {
    adf_egress::Policy {
        allow_local: config
            .pointer("/security/allow_local_fetch")
            .and_then(Value::as_bool)
            == Some(true),
        served_origins: Vec::new(),
        control_apis: adf_runtime::fetch::recorded_control_apis(Some(hub.home())),
    }
}

/// The seam of one loaded agent. Weak: the agent record owns the host that owns the sink.
struct DaemonSink {
    hub: Weak<Hub>,
    agent: Weak<Agent>,
    path: PathBuf,
    policy: adf_egress::Policy,
}

fn gone() -> SinkError {
    SinkError("the agent is no longer loaded".to_owned())
}

impl DaemonSink {
    fn parts(&self) -> Result<(Arc<Hub>, Arc<Agent>), SinkError> {
        Ok((
            self.hub.upgrade().ok_or_else(gone)?,
            self.agent.upgrade().ok_or_else(gone)?,
        ))
    }
}

/// The first free path for `dir/filename` (`dir/N-filename` when taken).
fn free_path(file: &AdfFile, dir: &str, filename: &str) -> Result<String, adf_store::StoreError> {
    let mut path = format!("{dir}/{filename}");
    let mut n = 1;
    while file.file_read(&path)?.is_some() {
        path = format!("{dir}/{n}-{filename}");
        n += 1;
    }
    Ok(path)
}

impl AdapterSink for DaemonSink {
    fn write_inbound(&self, message: InboundMessage) -> BoxFuture<'_, Result<String, SinkError>> {
        Box::pin(async move {
            let (hub, agent) = self.parts()?;
            let path = self.path.clone();
            // A guest connection, as mesh ingress: the row never waits for a turn holding the
            // agent's worker.
            let (id, new) = tokio::task::spawn_blocking(move || {
                let mut file = AdfFile::open_guest(&path)?;
                if let Some(id) = file.inbox_id_by_message_id(&message.message_id)? {
                    return Ok((id, false));
                }
                let id = file.message_insert(Mailbox::Inbox, &message.to_inbox_row(), None)?;
                Ok::<_, adf_store::StoreError>((id, true))
            })
            .await
            .map_err(|e| SinkError(e.to_string()))?
            .map_err(|e| SinkError(e.to_string()))?;
            if new {
                // Written on a guest connection, which no job's diff saw: the worker's check
                // of other writers dispatches it (`on_inbox`), as for a mesh message.
                tokio::spawn(async move {
                    hub.subsystems().notice_new_rows(&hub, &agent).await;
                });
            }
            Ok(id)
        })
    }

    fn write_file<'a>(
        &'a self,
        dir: &'a str,
        filename: &'a str,
        bytes: Vec<u8>,
        content_type: Option<String>,
    ) -> BoxFuture<'a, Result<String, SinkError>> {
        let (dir, filename) = (dir.to_owned(), filename.to_owned());
        Box::pin(async move {
            let (hub, agent) = self.parts()?;
            crate::dispatch::run_observed(&hub, &agent, move |file| {
                let path = free_path(file, &dir, &filename)?;
                file.file_write(
                    Caller::Owner,
                    &path,
                    &bytes,
                    &FileWrite {
                        mime_type: content_type,
                        protection_if_new: None,
                    },
                )?;
                Ok(path)
            })
            .await
            .map_err(|e| SinkError(e.to_string()))
        })
    }

    fn credential<'a>(
        &'a self,
        purpose: &'a str,
    ) -> BoxFuture<'a, Result<Option<Secret>, SinkError>> {
        let purpose = purpose.to_owned();
        Box::pin(async move {
            let (hub, agent) = self.parts()?;
            let keys = adf_runtime::identity::LocalKeys::existing(hub.home());
            let read = agent
                .job(move |file| {
                    let sealed = file
                        .identity_rows()?
                        .into_iter()
                        .find(|row| row.purpose == purpose);
                    let Some(row) = sealed else {
                        return Ok(Ok(None));
                    };
                    if row.encryption_algo == "plain" {
                        return Ok(Ok(Some(Secret::new(
                            String::from_utf8_lossy(&row.value).into_owned(),
                        ))));
                    }
                    let opened = keys
                        .map_err(|e| e.to_string())
                        .and_then(|keys| {
                            adf_runtime::identity::open_identity(file, &keys)
                                .map_err(|e| e.to_string())
                        })
                        .and_then(|open| {
                            adf_runtime::identity::read_credential(file, &open, &purpose)
                                .map_err(|e| e.to_string())
                        })
                        .map(|value| {
                            value.map(|v| Secret::new(String::from_utf8_lossy(&v).into_owned()))
                        });
                    Ok(opened)
                })
                .await
                .map_err(|e| SinkError(e.to_string()))?;
            read.map_err(|why| SinkError(format!("cannot unseal the credential: {why}")))
        })
    }

    fn state_changed(&self, change: StateChange) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let Ok((hub, agent)) = self.parts() else {
                return;
            };
            let state = change.state.as_str();
            let message = format!(
                "adapter {} {state}{}",
                change.adapter,
                change
                    .error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            );
            let (adapter, failed) = (change.adapter.clone(), change.error.is_some());
            let logged = crate::dispatch::run_observed(&hub, &agent, move |file| {
                file.log(&NewLog {
                    level: if failed { "warn" } else { "info" },
                    origin: Some("adapter"),
                    event: Some("adapter.status.changed"),
                    target: Some(&adapter),
                    message: &message,
                    ..NewLog::default()
                })
            })
            .await;
            if let Err(error) = logged {
                tracing::warn!(agent = %agent.id, %error, "cannot log an adapter state change");
            }
            hub.emit(
                &agent,
                "adapter.status.changed",
                "system:adapters",
                json!({ "adapter": change.adapter, "state": state, "error": change.error }),
            )
            .await;
        })
    }

    fn agent_file(&self) -> PathBuf {
        self.path.clone()
    }

    fn egress_policy(&self) -> adf_egress::Policy {
        self.policy.clone()
    }
}
