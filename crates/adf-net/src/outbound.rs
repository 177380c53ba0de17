//! Outbound WebSockets (§5.15): connections an agent opens from `ws_connections` or
//! `ws_connect`, every one through `adf_egress::connect_websocket` (admitted by the policy,
//! SRV-26).
//!
//! A connection authenticates per its `auth` (`auto`: when the agent has a signing key;
//! `required`: fail without; `none`: skip) with the signed `did + nonce + timestamp` frame and
//! checks the server's answer (its signature, and the expected `did` when one is configured).
//! Each incoming text frame is one ALF message delivered to the agent's inbox exactly as an
//! HTTP delivery; a connection with a `lambda` is refused as not supported yet. Keepalive pings
//! go out every `keepalive_interval_ms`; a dropped connection reconnects after
//! `reconnect_delay_ms`, doubling up to a minute, while `auto_reconnect` holds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_tungstenite::tungstenite::Message;

use adf_egress::{Lookup, Url};

use crate::handshake::{self, ClientAuth};
use crate::{AgentDirectory, ServedAgent};

/// Longest wait between two reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Frames queued for sending per connection before `ws_send` waits.
const SEND_QUEUE: usize = 64;

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
    /// The agent's egress policy.
    pub policy: adf_egress::Policy,
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
        if entry
            .get("lambda")
            .and_then(Value::as_str)
            .is_some_and(|l| !l.is_empty())
        {
            return Err(
                "outbound connections with a lambda are not supported yet; without one, each text frame is an ALF message".into(),
            );
        }
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
            policy,
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
}

struct Connection {
    info: Mutex<OutboundInfo>,
    frames: mpsc::Sender<Message>,
    stop: watch::Sender<bool>,
}

/// The outbound connections of every agent of a host.
pub struct Outbound {
    directory: Arc<dyn AgentDirectory>,
    lookup: Arc<dyn Lookup>,
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
    /// Outbound connections for `directory`'s agents, resolving names through `lookup`.
    pub fn new(directory: Arc<dyn AgentDirectory>, lookup: Arc<dyn Lookup>) -> Arc<Self> {
        Arc::new(Outbound {
            directory,
            lookup,
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
    pub async fn connect(
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
        let socket = self.open_socket(&agent, &spec).await?;
        let id = format!("wso_{}", adf_store::defaults::random_id(16));
        let (frames, queue) = mpsc::channel(SEND_QUEUE);
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
        };
        let connection = Arc::new(Connection {
            info: Mutex::new(info),
            frames,
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
                c.info
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone()
            })
            .filter(|info| info.agent_id == agent_id)
            .collect();
        found.sort_by_key(|info| info.connected_at);
        found
    }

    /// Queues one frame on the agent's connection `id`; waits while the queue is full.
    pub async fn send(&self, agent_id: &str, id: &str, frame: Message) -> Result<(), String> {
        let connection = self
            .table()
            .get(id)
            .filter(|c| {
                c.info
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .agent_id
                    == agent_id
            })
            .cloned()
            .ok_or_else(|| format!("no open WebSocket connection '{id}'"))?;
        connection
            .frames
            .send(frame)
            .await
            .map_err(|_| format!("the connection '{id}' closed"))
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
        let (mut socket, _addr) = adf_egress::connect_websocket(
            &spec.policy,
            &url,
            self.lookup.as_ref(),
            spec.connect_timeout,
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
        mut queue: mpsc::Receiver<Message>,
        mut stopped: watch::Receiver<bool>,
    ) {
        let mut backoff = spec.reconnect_delay;
        loop {
            let ended = self
                .pump(
                    &agent,
                    &connection,
                    &mut socket,
                    &mut queue,
                    &mut stopped,
                    spec.keepalive,
                )
                .await;
            if ended || !spec.auto_reconnect || *stopped.borrow() {
                break;
            }
            set_status(&connection, "reconnecting", None);
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stopped.changed() => return,
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
        let id = connection
            .info
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .id
            .clone();
        self.table().remove(&id);
    }

    /// Carries frames until the socket drops (false) or the connection is stopped (true).
    async fn pump(
        &self,
        agent: &ServedAgent,
        connection: &Connection,
        socket: &mut adf_egress::socket::WebSocket,
        queue: &mut mpsc::Receiver<Message>,
        stopped: &mut watch::Receiver<bool>,
        keepalive: Duration,
    ) -> bool {
        let mut ping = tokio::time::interval(keepalive.max(Duration::from_millis(100)));
        ping.tick().await;
        loop {
            tokio::select! {
                _ = stopped.changed() => {
                    let _ = socket.close(None).await;
                    return true;
                }
                _ = ping.tick() => {
                    if socket.send(Message::Ping(Vec::new().into())).await.is_err() {
                        return false;
                    }
                }
                frame = queue.recv() => match frame {
                    Some(frame) => {
                        if socket.send(frame).await.is_err() {
                            return false;
                        }
                    }
                    None => return true,
                },
                incoming = socket.next() => match incoming {
                    Some(Ok(Message::Text(text))) => {
                        connection
                            .info
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .last_message_at = adf_store::time::now_ms();
                        // Acks and errors answer our own messages: nothing to deliver.
                        let kind = serde_json::from_str::<Value>(&text)
                            .ok()
                            .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_owned));
                        if matches!(kind.as_deref(), Some("ack" | "error" | "auth_result")) {
                            if let Ok(answer) = serde_json::from_str::<Value>(&text)
                                && let Some(id) = answer.get("message_id").and_then(Value::as_str)
                                && let Some(waiting) = self
                                    .pending
                                    .lock()
                                    .unwrap_or_else(PoisonError::into_inner)
                                    .remove(id)
                            {
                                let _ = waiting.send(answer);
                            }
                            continue;
                        }
                        let answer = match self
                            .directory
                            .deliver(agent, text.as_bytes().to_vec(), None)
                            .await
                        {
                            Ok(mut accepted) => {
                                accepted["type"] = json!("ack");
                                accepted
                            }
                            Err((status, error)) => json!({ "type": "error", "status": status, "error": error }),
                        };
                        if socket.send(Message::Text(answer.to_string().into())).await.is_err() {
                            return false;
                        }
                    }
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return false,
                    Some(Ok(Message::Binary(bytes))) => crate::streams::ws_frame(&connection.info, bytes.into()).await,
                    Some(Ok(_)) => {}
                },
            }
        }
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
        for bad in [
            json!({ "id": "x" }),
            json!({ "url": "ws://a/", "auth": "sometimes" }),
            json!({ "url": "ws://a/", "lambda": "lib/ws.ts:on" }),
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
