//! Outbound WebSockets (§5.15): connections an agent opens from `ws_connections` or
//! `ws_connect`, every one through `adf_egress::connect_websocket` (admitted by the policy,
//! SRV-26).
//!
//! A connection authenticates per its `auth` (`auto`: when the agent has a signing key;
//! `required`: fail without; `none`: skip) with the signed `did + nonce + timestamp` frame and
//! checks the server's answer (its signature, and the expected `did` when one is configured).
//! Without a `lambda`, each incoming text frame is one ALF message delivered to the agent's
//! inbox exactly as an HTTP delivery. With one, the lambda receives the events an inbound WS
//! route's lambda does (`open`, each `message`, `error`, `close`; crate::ws) on the agent's
//! warm context, and what it returns is sent back as one text frame. Keepalive pings go out
//! every `keepalive_interval_ms`; a dropped connection reconnects after `reconnect_delay_ms`,
//! doubling up to a minute, while `auto_reconnect` holds.
//!
//! Back-pressure (`high_water_mark_bytes`): frames wait in an unbounded queue whose size in
//! bytes is tracked; [`Outbound::send`] queues its frame, then waits while more than the
//! mark is still unsent, so a slow reader holds the sender instead of the daemon's memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::Message;

use adf_egress::{Lookup, Url};

use adf_runtime::code::LambdaRef;

use crate::handshake::{self, ClientAuth};
use crate::tools::ServingCell;
use crate::{AgentDirectory, ServedAgent};

/// Longest wait between two reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// `high_water_mark_bytes` when the entry sets none (§5.15).
pub const DEFAULT_HIGH_WATER_MARK: usize = 1024 * 1024;

/// How an outbound connection authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// Authenticate when the agent has a signing key.
    Auto,
    /// Fail without a signing key.
    Required,
    /// Never authenticate.
    None,
}

/// One outbound connection's settings (a `ws_connections` entry).
#[derive(Debug, Clone)]
pub struct OutboundSpec {
    /// The config `id`, when the connection has one.
    pub config_id: Option<String>,
    /// `ws://…`.
    pub url: String,
    /// The server DID the handshake must prove.
    pub expected_did: Option<String>,
    /// `auth`.
    pub auth: AuthMode,
    /// `auto_reconnect` (default true).
    pub auto_reconnect: bool,
    /// `reconnect_delay_ms` (default 5000).
    pub reconnect_delay: Duration,
    /// `keepalive_interval_ms` (default 30000).
    pub keepalive: Duration,
    /// `connect_timeout_ms` (default 15000).
    pub connect_timeout: Duration,
    /// `high_water_mark_bytes` (default 1 MiB): `ws_send` waits while more is unsent.
    pub high_water_mark: usize,
    /// `lambda`: the handler of the connection's events; without one frames are ALF.
    pub lambda: Option<LambdaRef>,
    /// The agent's egress policy.
    pub policy: adf_egress::Policy,
    /// Which certificates `wss://` trusts (the system's, but for tests).
    pub trust: adf_egress::TlsTrust,
}

impl OutboundSpec {
    /// Reads a `ws_connections` entry (or `ws_connect`'s arguments) under `policy`.
    pub fn from_entry(entry: &Value, policy: adf_egress::Policy) -> Result<Self, String> {
        let url = entry
            .get("url")
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty())
            .ok_or("a WebSocket connection needs a url")?
            .to_owned();
        let lambda = match entry.get("lambda") {
            None | Some(Value::Null) => None,
            Some(Value::String(source)) if source.is_empty() => None,
            Some(Value::String(source)) => Some(
                LambdaRef::parse(source)
                    .map_err(|e| format!("the lambda is not valid: {}", e.message))?,
            ),
            Some(_) => return Err("lambda is a string like lib/ws.ts:onEvent".into()),
        };
        let high_water_mark = match entry.get("high_water_mark_bytes") {
            None | Some(Value::Null) => DEFAULT_HIGH_WATER_MARK,
            Some(mark) => mark
                .as_u64()
                .and_then(|mark| usize::try_from(mark).ok())
                .ok_or("high_water_mark_bytes is a number of bytes")?,
        };
        let ms = |key: &str, default: u64| {
            Duration::from_millis(entry.get(key).and_then(Value::as_u64).unwrap_or(default))
        };
        let auth = match entry.get("auth").and_then(Value::as_str).unwrap_or("auto") {
            "auto" => AuthMode::Auto,
            "required" => AuthMode::Required,
            "none" => AuthMode::None,
            other => return Err(format!("auth is auto, required or none, not '{other}'")),
        };
        Ok(OutboundSpec {
            config_id: entry.get("id").and_then(Value::as_str).map(str::to_owned),
            url,
            expected_did: entry.get("did").and_then(Value::as_str).map(str::to_owned),
            auth,
            auto_reconnect: entry.get("auto_reconnect").and_then(Value::as_bool) != Some(false),
            reconnect_delay: ms("reconnect_delay_ms", 5000),
            keepalive: ms("keepalive_interval_ms", 30_000),
            connect_timeout: ms("connect_timeout_ms", 15_000),
            high_water_mark,
            lambda,
            policy,
            trust: adf_egress::TlsTrust::System,
        })
    }
}

/// An outbound connection as `ws_connections` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundInfo {
    /// `connection_id`.
    pub id: String,
    /// The config `id`, if any.
    pub config_id: Option<String>,
    /// The agent's config id.
    pub agent_id: String,
    /// The URL.
    pub url: String,
    /// The server's DID, once proven.
    pub remote_did: Option<String>,
    /// `connecting`, `open` or `reconnecting`.
    pub status: &'static str,
    /// When the current socket opened (epoch ms), 0 before.
    pub connected_at: i64,
    /// When the last frame arrived (epoch ms), 0 before.
    pub last_message_at: i64,
    /// Bytes queued by `ws_send` and not yet written to the socket.
    pub buffered_bytes: usize,
}

struct Connection {
    info: Mutex<OutboundInfo>,
    /// `high_water_mark_bytes`.
    high_water_mark: usize,
    frames: mpsc::UnboundedSender<Message>,
    /// Bytes queued and not yet written (see the module docs).
    buffered: watch::Sender<usize>,
    stop: watch::Sender<bool>,
}

/// The bytes a frame puts on the queue.
fn frame_len(frame: &Message) -> usize {
    match frame {
        Message::Text(text) => text.len(),
        Message::Binary(bytes) => bytes.len(),
        _ => 0,
    }
}

/// The outbound connections of every agent of a host.
pub struct Outbound {
    directory: Arc<dyn AgentDirectory>,
    lookup: Arc<dyn Lookup>,
    /// The host's serving, which runs connection lambdas on the agent's sandbox.
    serving: ServingCell,
    /// The host's runtime, where every connection lives (see [`Outbound::connect`]).
    runtime: Option<tokio::runtime::Handle>,
    connections: Mutex<HashMap<String, Arc<Connection>>>,
    /// ALF messages sent by `deliver_message`, by message id, waiting for their ack.
    pending: Mutex<HashMap<String, oneshot::Sender<Value>>>,
}

/// How long `deliver_message` waits for the peer's ack.
const ACK_TIMEOUT: Duration = Duration::from_secs(30);

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound").finish_non_exhaustive()
    }
}

impl Outbound {
    /// Outbound connections for `directory`'s agents, resolving names through `lookup`;
    /// connection lambdas run on `serving` once the host serves.
    pub fn new(
        directory: Arc<dyn AgentDirectory>,
        lookup: Arc<dyn Lookup>,
        serving: ServingCell,
    ) -> Arc<Self> {
        Arc::new(Outbound {
            directory,
            lookup,
            serving,
            runtime: tokio::runtime::Handle::try_current().ok(),
            connections: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
        })
    }

    /// Sends one ALF `message` over the agent's open connection to `remote_did` and waits for
    /// the peer's ack (`{type: "ack", message_id, …}` or `{type: "error", status, error}`).
    /// `None` when the agent holds no open connection to that DID.
    pub async fn deliver_message(
        &self,
        agent_id: &str,
        remote_did: &str,
        message: &Value,
    ) -> Option<Result<Value, (Option<u16>, String)>> {
        let connection = self
            .list(agent_id)
            .into_iter()
            .find(|c| c.status == "open" && c.remote_did.as_deref() == Some(remote_did))?;
        let message_id = message
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let (answer, answered) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(message_id.clone(), answer);
        let sent = self
            .send(
                agent_id,
                &connection.id,
                Message::Text(message.to_string().into()),
            )
            .await;
        let outcome = match sent {
            Err(why) => Err((None, why)),
            Ok(()) => match tokio::time::timeout(ACK_TIMEOUT, answered).await {
                Ok(Ok(ack)) if ack.get("type").and_then(Value::as_str) == Some("ack") => Ok(ack),
                Ok(Ok(refused)) => Err((
                    refused
                        .get("status")
                        .and_then(Value::as_u64)
                        .and_then(|s| u16::try_from(s).ok()),
                    refused
                        .get("error")
                        .and_then(Value::as_str)
                        .unwrap_or("refused")
                        .to_owned(),
                )),
                Ok(Err(_)) => Err((None, "the connection closed before the ack".to_owned())),
                Err(_) => Err((None, "no ack within 30 s".to_owned())),
            },
        };
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&message_id);
        Some(outcome)
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Connection>>> {
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a connection for `agent` (the first attempt is awaited: its failure is the
    /// answer), then keeps it open in the background; its `connection_id`.
    ///
    /// The socket and its pump live on the host's runtime (the one `Outbound` was made on):
    /// `ws_connect` is often called from a lambda, whose runtime only runs while a lambda
    /// does, and a socket belongs to the runtime that opened it.
    pub async fn connect(
        self: &Arc<Self>,
        agent: ServedAgent,
        spec: OutboundSpec,
    ) -> Result<String, String> {
        match &self.runtime {
            Some(host) => {
                let outbound = Arc::clone(self);
                host.spawn(async move { outbound.connect_here(agent, spec).await })
                    .await
                    .map_err(|e| format!("the connection task failed: {e}"))?
            }
            None => self.connect_here(agent, spec).await,
        }
    }

    async fn connect_here(
        self: &Arc<Self>,
        agent: ServedAgent,
        spec: OutboundSpec,
    ) -> Result<String, String> {
        if let Some(config_id) = &spec.config_id
            && let Some(open) = self
                .list(&agent.id)
                .into_iter()
                .find(|c| c.config_id.as_deref() == Some(config_id))
        {
            return Ok(open.id);
        }
        if spec.lambda.is_some() && self.serving.get().is_none() {
            return Err("this host runs no lambdas for WebSockets (it does not serve HTTP)".into());
        }
        let socket = self.open_socket(&agent, &spec).await?;
        let id = format!("wso_{}", adf_store::defaults::random_id(16));
        let (frames, queue) = mpsc::unbounded_channel();
        let (stop, stopped) = watch::channel(false);
        let info = OutboundInfo {
            id: id.clone(),
            config_id: spec.config_id.clone(),
            agent_id: agent.id.clone(),
            url: spec.url.clone(),
            remote_did: socket.1.clone(),
            status: "open",
            connected_at: adf_store::time::now_ms(),
            last_message_at: 0,
            buffered_bytes: 0,
        };
        let connection = Arc::new(Connection {
            info: Mutex::new(info),
            high_water_mark: spec.high_water_mark,
            frames,
            buffered: watch::channel(0).0,
            stop,
        });
        self.table().insert(id.clone(), Arc::clone(&connection));
        let outbound = Arc::clone(self);
        tokio::spawn(async move {
            outbound
                .run(agent, spec, connection, socket.0, queue, stopped)
                .await;
        });
        Ok(id)
    }

    /// The open outbound connections of the agent `agent_id`.
    pub fn list(&self, agent_id: &str) -> Vec<OutboundInfo> {
        let mut found: Vec<OutboundInfo> = self
            .table()
            .values()
            .map(|c| {
                let mut info = c
                    .info
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                info.buffered_bytes = *c.buffered.borrow();
                info
            })
            .filter(|info| info.agent_id == agent_id)
            .collect();
        found.sort_by_key(|info| info.connected_at);
        found
    }

    /// Queues one frame on the agent's connection `id`, then waits while more than the
    /// connection's `high_water_mark_bytes` is unsent (a slow reader holds the sender).
    pub async fn send(&self, agent_id: &str, id: &str, frame: Message) -> Result<(), String> {
        let connection = self.connection(agent_id, id)?;
        let length = frame_len(&frame);
        connection.buffered.send_modify(|queued| *queued += length);
        if connection.frames.send(frame).is_err() {
            connection
                .buffered
                .send_modify(|queued| *queued = queued.saturating_sub(length));
            return Err(format!("the connection '{id}' closed"));
        }
        let mark = connection.high_water_mark;
        let mut buffered = connection.buffered.subscribe();
        let mut stopped = connection.stop.subscribe();
        tokio::select! {
            drained = buffered.wait_for(|queued| *queued <= mark) => {
                drained.map(|_| ()).map_err(|_| format!("the connection '{id}' closed"))
            }
            _ = stopped.wait_for(|stop| *stop) => {
                Err(format!("the connection '{id}' closed before its queue drained"))
            }
        }
    }

    /// A watch on the bytes queued on the agent's connection `id` and not yet written.
    pub fn buffered(&self, agent_id: &str, id: &str) -> Result<watch::Receiver<usize>, String> {
        Ok(self.connection(agent_id, id)?.buffered.subscribe())
    }

    fn connection(&self, agent_id: &str, id: &str) -> Result<Arc<Connection>, String> {
        self.table()
            .get(id)
            .filter(|c| {
                c.info
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .agent_id
                    == agent_id
            })
            .cloned()
            .ok_or_else(|| format!("no open WebSocket connection '{id}'"))
    }

    /// Closes the agent's connection named by connection id or config id; whether one was.
    pub fn disconnect(&self, agent_id: &str, key: &str) -> bool {
        let mut table = self.table();
        let id = table
            .iter()
            .find(|(id, c)| {
                let info = c.info.lock().unwrap_or_else(PoisonError::into_inner);
                info.agent_id == agent_id
                    && (id.as_str() == key || info.config_id.as_deref() == Some(key))
            })
            .map(|(id, _)| id.clone());
        match id.and_then(|id| table.remove(&id)) {
            Some(connection) => {
                connection.stop.send_replace(true);
                true
            }
            None => false,
        }
    }

    /// Closes every connection of the agent (unload, `off`).
    pub fn release(&self, agent_id: &str) {
        self.table().retain(|_, c| {
            let mine = c
                .info
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .agent_id
                == agent_id;
            if mine {
                c.stop.send_replace(true);
            }
            !mine
        });
    }

    async fn open_socket(
        &self,
        agent: &ServedAgent,
        spec: &OutboundSpec,
    ) -> Result<(adf_egress::socket::WebSocket, Option<String>), String> {
        let url = Url::parse(&spec.url).map_err(|e| format!("the url is not valid: {e}"))?;
        let (mut socket, _addr) = adf_egress::connect_websocket_trusting(
            &spec.policy,
            &url,
            self.lookup.as_ref(),
            spec.connect_timeout,
            &spec.trust,
        )
        .await
        .map_err(|e| e.to_string())?;
        if spec.auth == AuthMode::None {
            return Ok((socket, None));
        }
        let nonce = adf_store::defaults::random_id(32);
        let timestamp = adf_store::time::now_ms();
        let signed = {
            let nonce = nonce.clone();
            Box::new(move |did: &str| format!("{did}{nonce}{timestamp}").into_bytes())
        };
        let Some((did, signature)) = self.directory.sign_as_agent(agent, signed).await else {
            if spec.auth == AuthMode::Required {
                return Err("auth is required and the agent has no signing key".into());
            }
            return Ok((socket, None));
        };
        let frame = json!({ "type": "auth", "did": did, "nonce": nonce, "signature": signature, "timestamp": timestamp });
        socket
            .send(Message::Text(frame.to_string().into()))
            .await
            .map_err(|e| format!("cannot send the auth frame: {e}"))?;
        let answer = tokio::time::timeout(Duration::from_secs(30), socket.next())
            .await
            .map_err(|_| "the server did not answer the auth frame".to_owned())?;
        let answer: Value = match answer {
            Some(Ok(Message::Text(text))) => serde_json::from_str(&text).unwrap_or(Value::Null),
            _ => return Err("the server closed during the handshake".into()),
        };
        if answer.get("success").and_then(Value::as_bool) != Some(true) {
            let why = answer
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("refused");
            return Err(format!("the server refused the handshake: {why}"));
        }
        let auth = ClientAuth {
            did,
            nonce,
            timestamp,
            verified: true,
        };
        let server_did = verify_server(&answer, &auth, spec.expected_did.as_deref())?;
        Ok((socket, server_did))
    }

    async fn run(
        self: Arc<Self>,
        agent: ServedAgent,
        spec: OutboundSpec,
        connection: Arc<Connection>,
        mut socket: adf_egress::socket::WebSocket,
        mut queue: mpsc::UnboundedReceiver<Message>,
        mut stopped: watch::Receiver<bool>,
    ) {
        let mut backoff = spec.reconnect_delay;
        let pump = Pump {
            outbound: &self,
            agent: &agent,
            lambda: spec.lambda.as_ref(),
            connection: &connection,
        };
        loop {
            if let Some(reply) = pump.event("open", |_| {}).await
                && socket.send(Message::Text(reply.into())).await.is_err()
            {
                pump.closed(1006, "the socket dropped").await;
            } else {
                let ended = pump
                    .carry(&mut socket, &mut queue, &mut stopped, spec.keepalive)
                    .await;
                if ended || !spec.auto_reconnect || *stopped.borrow() {
                    break;
                }
            }
            if !spec.auto_reconnect || *stopped.borrow() {
                break;
            }
            set_status(&connection, "reconnecting", None);
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stopped.changed() => {
                        pump.outbound.forget(&connection);
                        return;
                    }
                }
                match self.open_socket(&agent, &spec).await {
                    Ok((fresh, did)) => {
                        socket = fresh;
                        set_status(&connection, "open", Some(did));
                        backoff = spec.reconnect_delay;
                        break;
                    }
                    Err(why) => {
                        tracing::debug!(url = %spec.url, %why, "WebSocket reconnect failed");
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
            }
        }
        self.forget(&connection);
    }

    /// Takes an ended connection out of the table; senders waiting on its queue are told.
    fn forget(&self, connection: &Connection) {
        let id = connection
            .info
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .id
            .clone();
        self.table().remove(&id);
        connection.stop.send_replace(true);
    }
}

/// One connection's frames in both directions, and its lambda's events.
struct Pump<'a> {
    outbound: &'a Outbound,
    agent: &'a ServedAgent,
    lambda: Option<&'a LambdaRef>,
    connection: &'a Connection,
}

impl Pump<'_> {
    /// Runs the lambda with one event of `kind` (`fill` adds its fields); what to send back.
    async fn event(&self, kind: &str, fill: impl FnOnce(&mut Value)) -> Option<String> {
        let lambda = self.lambda?;
        let serving = self.outbound.serving.get()?;
        let (id, remote_did) = {
            let info = self
                .connection
                .info
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            (info.id.clone(), info.remote_did.clone())
        };
        let mut event = crate::ws::event(kind, &id, remote_did.as_deref());
        fill(&mut event);
        let slot = serving.slot(&self.agent.id);
        crate::ws::run_event(serving, &slot, self.agent, lambda, event).await
    }

    /// The `close` event of a socket that ended (lambda connections only).
    async fn closed(&self, code: u16, reason: &str) {
        let _ = self
            .event("close", |event| {
                event["code"] = json!(code);
                event["reason"] = json!(reason);
            })
            .await;
    }

    /// Carries frames until the socket drops (false) or the connection is stopped (true).
    async fn carry(
        &self,
        socket: &mut adf_egress::socket::WebSocket,
        queue: &mut mpsc::UnboundedReceiver<Message>,
        stopped: &mut watch::Receiver<bool>,
        keepalive: Duration,
    ) -> bool {
        let mut ping = tokio::time::interval(keepalive.max(Duration::from_millis(100)));
        ping.tick().await;
        loop {
            tokio::select! {
                // Frames queued before a disconnect still go out, in order.
                biased;
                frame = queue.recv() => match frame {
                    Some(frame) => {
                        let length = frame_len(&frame);
                        let written = socket.send(frame).await;
                        self.connection
                            .buffered
                            .send_modify(|queued| *queued = queued.saturating_sub(length));
                        if written.is_err() {
                            self.closed(1006, "the socket dropped").await;
                            return false;
                        }
                    }
                    None => return true,
                },
                _ = stopped.changed() => {
                    let _ = socket.close(None).await;
                    self.closed(1000, "disconnected").await;
                    return true;
                }
                _ = ping.tick() => {
                    if socket.send(Message::Ping(Vec::new().into())).await.is_err() {
                        self.closed(1006, "the socket dropped").await;
                        return false;
                    }
                }
                incoming = socket.next() => {
                    let reply = match incoming {
                        Some(Ok(Message::Text(text))) => {
                            self.touch();
                            match self.lambda {
                                Some(_) => {
                                    let text = text.to_string();
                                    self.event("message", |event| event["data"] = json!(text)).await
                                }
                                None => self.alf(&text).await,
                            }
                        }
                        Some(Ok(Message::Binary(bytes))) if self.lambda.is_some() => {
                            self.touch();
                            self.event("message", |event| {
                                event["data"] = adf_sandbox::bytes_value(&bytes);
                            })
                            .await
                        }
                        // Without a lambda, binary frames feed the stream bindings that
                        // read this connection; text frames stay ALF.
                        Some(Ok(Message::Binary(bytes))) => {
                            self.touch();
                            crate::streams::ws_frame(&self.connection.info, bytes.into()).await;
                            None
                        }
                        Some(Ok(Message::Close(frame))) => {
                            let (code, reason) = frame
                                .map(|f| (u16::from(f.code), f.reason.to_string()))
                                .unwrap_or((1005, String::new()));
                            self.closed(code, &reason).await;
                            return false;
                        }
                        None => {
                            self.closed(1006, "the socket dropped").await;
                            return false;
                        }
                        Some(Err(error)) => {
                            let why = error.to_string();
                            let _ = self.event("error", |event| event["error"] = json!(why)).await;
                            self.closed(1006, "the socket failed").await;
                            return false;
                        }
                        Some(Ok(_)) => None,
                    };
                    if let Some(reply) = reply
                        && socket.send(Message::Text(reply.into())).await.is_err()
                    {
                        self.closed(1006, "the socket dropped").await;
                        return false;
                    }
                }
            }
        }
    }

    fn touch(&self) {
        self.connection
            .info
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last_message_at = adf_store::time::now_ms();
    }

    /// One ALF frame without a lambda: an ack or error answering one of our own messages
    /// goes to its waiting sender; anything else is delivered, and the answer sent back.
    async fn alf(&self, text: &str) -> Option<String> {
        let answer = serde_json::from_str::<Value>(text).ok();
        let kind = answer
            .as_ref()
            .and_then(|v| v.get("type").and_then(Value::as_str));
        if matches!(kind, Some("ack" | "error" | "auth_result")) {
            if let Some(answer) = answer
                && let Some(id) = answer.get("message_id").and_then(Value::as_str)
                && let Some(waiting) = self
                    .outbound
                    .pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(id)
            {
                let _ = waiting.send(answer);
            }
            return None;
        }
        let delivered = self
            .outbound
            .directory
            .deliver(self.agent, text.as_bytes().to_vec(), None)
            .await;
        let answer = match delivered {
            Ok(mut accepted) => {
                accepted["type"] = json!("ack");
                accepted
            }
            Err((status, error)) => json!({ "type": "error", "status": status, "error": error }),
        };
        Some(answer.to_string())
    }
}

fn set_status(connection: &Connection, status: &'static str, did: Option<Option<String>>) {
    let mut info = connection
        .info
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    info.status = status;
    if let Some(did) = did {
        info.remote_did = did;
        info.connected_at = adf_store::time::now_ms();
    }
}

/// Checks the server's `auth_result`: its signature over `server_did + nonce + timestamp`
/// when it sent one, and that it is `expected` when a DID is expected (SRV-34).
pub fn verify_server(
    answer: &Value,
    auth: &ClientAuth,
    expected: Option<&str>,
) -> Result<Option<String>, String> {
    let server_did = answer.get("server_did").and_then(Value::as_str);
    if let Some(server_did) = server_did {
        if answer.get("nonce").and_then(Value::as_str) != Some(auth.nonce.as_str()) {
            return Err("the server did not echo the nonce".into());
        }
        let key = adf_crypto::verifying_key_from_did(server_did)
            .map_err(|e| format!("the server DID cannot be read: {e}"))?;
        let signature = answer
            .get("signature")
            .and_then(Value::as_str)
            .ok_or("the server's answer is not signed")?;
        adf_crypto::verify(
            &key,
            &handshake::server_signed_bytes(server_did, auth),
            signature,
            "server answer",
        )
        .map_err(|_| "the server's signature does not verify".to_owned())?;
    }
    match (expected, server_did) {
        (Some(want), Some(got)) if want == got => Ok(Some(got.to_owned())),
        (Some(want), _) => Err(format!("the server did not prove the expected DID {want}")),
        (None, got) => Ok(got.map(str::to_owned)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn srv_35_connection_defaults_and_refusals() {
        let spec = OutboundSpec::from_entry(
            &json!({ "id": "relay", "url": "ws://127.0.0.1:1/ws" }),
            adf_egress::Policy::default(),
        )
        .unwrap();
        assert_eq!(spec.connect_timeout, Duration::from_millis(15_000));
        assert_eq!(spec.keepalive, Duration::from_millis(30_000));
        assert_eq!(spec.reconnect_delay, Duration::from_millis(5_000));
        assert_eq!(spec.auth, AuthMode::Auto);
        assert!(spec.auto_reconnect);
        assert_eq!(spec.config_id.as_deref(), Some("relay"));
        assert_eq!(spec.high_water_mark, 1024 * 1024);
        assert!(spec.lambda.is_none());
        let with_lambda = OutboundSpec::from_entry(
            &json!({ "url": "wss://a/", "lambda": "lib/ws.ts:onEvent", "high_water_mark_bytes": 10 }),
            adf_egress::Policy::default(),
        )
        .unwrap();
        assert_eq!(
            with_lambda.lambda.map(|l| l.source()).as_deref(),
            Some("lib/ws.ts:onEvent")
        );
        assert_eq!(with_lambda.high_water_mark, 10);
        for bad in [
            json!({ "id": "x" }),
            json!({ "url": "ws://a/", "auth": "sometimes" }),
            json!({ "url": "ws://a/", "lambda": 7 }),
            json!({ "url": "ws://a/", "high_water_mark_bytes": "lots" }),
        ] {
            assert!(
                OutboundSpec::from_entry(&bad, adf_egress::Policy::default()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn srv_34_the_server_must_prove_the_expected_did() {
        let server = adf_crypto::SigningKey::from_bytes(&[7; 32]);
        let server_did = adf_crypto::did_from_public(&server.verifying_key());
        let auth = ClientAuth {
            did: "did:key:client".into(),
            nonce: "n".into(),
            timestamp: 5,
            verified: true,
        };
        let signature =
            adf_crypto::sign(&server, &handshake::server_signed_bytes(&server_did, &auth));
        let answer = handshake::success(&auth, Some((server_did.clone(), signature)));
        assert_eq!(
            verify_server(&answer, &auth, Some(&server_did))
                .unwrap()
                .as_deref(),
            Some(server_did.as_str())
        );
        assert!(verify_server(&answer, &auth, Some("did:key:someone-else")).is_err());
        let unsigned = handshake::success(&auth, None);
        assert!(verify_server(&unsigned, &auth, Some(&server_did)).is_err());
        assert_eq!(verify_server(&unsigned, &auth, None).unwrap(), None);
        let mut forged = answer.clone();
        forged["nonce"] = json!("other");
        assert!(verify_server(&forged, &auth, None).is_err());
    }
}
