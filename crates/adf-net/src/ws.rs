//! Inbound WebSockets (§12.2): a `serving.api` route with `method: "WS"` upgraded under
//! `/agents/{handle}/<path>`.
//!
//! With a route lambda, the lambda receives `WsLambdaEvent {type, connection_id, remote_did?,
//! data?, code?, reason?, error?, timestamp}` for `open`, each `message` and `close` (warm:
//! its context lives on between events); what it returns (a string, or JSON other than
//! `null`) is sent back on the connection as one text frame, after any frames the lambda sent
//! with `ws_send` meanwhile (one writer task per connection writes every frame, so a lambda
//! may `ws_send` on the very connection whose event it handles). Without a lambda each text frame
//! is one ALF message, delivered exactly as `POST …/inbox` delivers it (the host's
//! [`crate::AgentDirectory::deliver`], MSG-50) and acknowledged with `{type: "ack", …}` or
//! `{type: "error", status, error}`; a binary frame or a frame holding anything but one JSON
//! object closes the connection with 4003.
//!
//! Authentication (MSG-51/52): when the agent's `security.allow_unsigned` is false the first
//! frame must be the signed auth frame within 30 s, else `auth_result {success: false}` and
//! close 4001; the answer carries the agent's own signature when it has an identity. With
//! `allow_unsigned` an auth frame is optional and accepted unverified (the answer is signed
//! all the same).

use std::net::IpAddr;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};

use adf_runtime::code::LambdaRef;

use crate::handshake::{self, CLOSE_AUTH_FAILED, CLOSE_INVALID_FRAME, ClientAuth};
use crate::{ServedAgent, Serving, Slot};

/// The read buffer each connection allocates up front (tungstenite's default, 128 KiB, made
/// 1,000 idle connections cost 140 MB; larger frames still arrive, in more reads).
pub(crate) const READ_BUFFER_BYTES: usize = 4 * 1024;

/// How long a client has to send its auth frame.
const AUTH_TIMEOUT: Duration = Duration::from_secs(30);

/// A WS route, as the upgrade found it.
#[derive(Debug, Clone)]
pub(crate) struct WsRoute {
    pub(crate) lambda: Option<LambdaRef>,
    pub(crate) allow_unsigned: bool,
}

/// What the agent's code asks of an open inbound connection (`ws_send`, `ws_disconnect`).
#[derive(Debug)]
pub(crate) enum Outgoing {
    /// Send the frame, then say whether it was written.
    Frame(Message, tokio::sync::oneshot::Sender<Result<(), String>>),
    /// Close the connection normally (1000).
    Close,
}

/// Frames from code waiting for an inbound connection's task; a sender beyond it waits.
const OUTLET_QUEUE: usize = 16;

/// One open inbound connection, as `ws_connections` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionInfo {
    /// The connection's id (`connection_id` of its events).
    pub id: String,
    /// The agent it belongs to.
    pub agent_id: String,
    /// `inbound`.
    pub direction: &'static str,
    /// The remote DID, once an auth frame named one.
    pub remote_did: Option<String>,
    /// When it opened (epoch ms).
    pub connected_at: i64,
}

fn now_ms() -> i64 {
    adf_store::time::now_ms()
}

pub(crate) fn event(kind: &str, id: &str, remote_did: Option<&str>) -> Value {
    let mut event = json!({ "type": kind, "connection_id": id, "timestamp": now_ms() });
    if let Some(did) = remote_did {
        event["remote_did"] = json!(did);
    }
    event
}

/// Serves one upgraded connection until either side closes it.
pub(crate) async fn connection(
    serving: Arc<Serving>,
    agent: ServedAgent,
    route: WsRoute,
    peer: Option<IpAddr>,
    socket: WebSocket,
) {
    let id = format!("ws_{}", adf_store::defaults::random_id(16));
    let (mut sender, mut receiver) = socket.split();
    let slot = serving.slot(&agent.id);
    let mut info = ConnectionInfo {
        id: id.clone(),
        agent_id: agent.id.clone(),
        direction: "inbound",
        remote_did: None,
        connected_at: now_ms(),
    };
    if !route.allow_unsigned {
        match authenticate(&serving, &agent, &mut sender, &mut receiver).await {
            Some(did) => info.remote_did = Some(did),
            None => return,
        }
    }
    slot.connections
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(id.clone(), info.clone());
    // Every frame goes out through one writer task, the connection's own answers as well as
    // `ws_send`/`ws_disconnect` from code: a lambda handling this connection's event may
    // `ws_send` on it while this task awaits the lambda.
    let (outlet, outgoing) = tokio::sync::mpsc::channel(OUTLET_QUEUE);
    slot.outlets
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(id.clone(), outlet.clone());
    let (writer_ended, mut writer_end) = tokio::sync::oneshot::channel();
    tokio::spawn(write_frames(sender, outgoing, writer_ended));
    let mut session = Session {
        serving,
        slot,
        agent,
        route,
        peer,
        info,
        writer: Writer(outlet),
    };
    let mut closed = session.slot.closers.subscribe();
    if let Some(reply) = session.lambda_event("open", |_| {}).await
        && !session.writer.send(Message::Text(reply.into())).await
    {
        forget(&session.slot, &id);
        return;
    }
    let mut close_code = 1000u16;
    let mut close_reason = String::new();
    loop {
        let message = tokio::select! {
            message = receiver.next() => message,
            end = &mut writer_end => {
                if matches!(end, Ok(WriterEnd::ClosedByAgent)) {
                    close_reason = "closed by the agent".into();
                }
                break;
            }
            _ = closed.changed() => {
                session.writer.close(1001, "going away").await;
                close_code = 1001;
                break;
            }
        };
        let message = match message {
            None => break,
            Some(Err(error)) => {
                let _ = session
                    .lambda_event("error", |failed| {
                        failed["error"] = json!(error.to_string());
                    })
                    .await;
                break;
            }
            Some(Ok(message)) => message,
        };
        let next = match message {
            Message::Close(frame) => {
                if let Some(frame) = frame {
                    close_code = frame.code;
                    close_reason = frame.reason.to_string();
                }
                break;
            }
            Message::Ping(_) | Message::Pong(_) => Next::Read,
            Message::Text(text) => session.on_text(text.to_string()).await,
            Message::Binary(bytes) => session.on_binary(&bytes).await,
        };
        match next {
            Next::Read => {}
            Next::Stop => break,
            Next::StopWith(code) => {
                close_code = code;
                break;
            }
        }
    }
    forget(&session.slot, &id);
    let _ = session
        .lambda_event("close", |ended| {
            ended["code"] = json!(close_code);
            ended["reason"] = json!(close_reason);
        })
        .await;
}

/// Reads and verifies the client's auth frame and answers it: the client's DID, or `None`
/// when the connection is over (the failure was answered and the connection closed).
async fn authenticate(
    serving: &Serving,
    agent: &ServedAgent,
    sender: &mut futures::stream::SplitSink<WebSocket, Message>,
    receiver: &mut futures::stream::SplitStream<WebSocket>,
) -> Option<String> {
    let first = tokio::time::timeout(AUTH_TIMEOUT, receiver.next()).await;
    let frame = match first {
        Ok(Some(Ok(Message::Text(text)))) => serde_json::from_str::<Value>(&text).ok(),
        _ => None,
    };
    let verified = frame
        .as_ref()
        .ok_or_else(|| "no auth frame arrived".to_owned())
        .and_then(|frame| handshake::verify_client(frame, now_ms()));
    match verified {
        Ok(auth) => {
            let answer = answer_auth(serving, agent, &auth).await;
            sender
                .send(Message::Text(answer.to_string().into()))
                .await
                .ok()
                .map(|()| auth.did)
        }
        Err(why) => {
            let _ = sender
                .send(Message::Text(handshake::failure(&why).to_string().into()))
                .await;
            let _ = sender
                .send(Message::Close(Some(CloseFrame {
                    code: CLOSE_AUTH_FAILED,
                    reason: "auth failed".into(),
                })))
                .await;
            None
        }
    }
}

/// What the connection's loop does after a frame.
enum Next {
    /// Read the next frame.
    Read,
    /// End the connection.
    Stop,
    /// End the connection, reporting this close code to the lambda.
    StopWith(u16),
}

/// One open inbound connection, as its frames need it.
struct Session {
    serving: Arc<Serving>,
    slot: Arc<Slot>,
    agent: ServedAgent,
    route: WsRoute,
    peer: Option<IpAddr>,
    info: ConnectionInfo,
    writer: Writer,
}

impl Session {
    /// Runs the route's lambda (if it has one) on the event `kind`, completed by `fill`; what
    /// the lambda returns to send back.
    async fn lambda_event(&self, kind: &str, fill: impl FnOnce(&mut Value)) -> Option<String> {
        let lambda = self.route.lambda.as_ref()?;
        let mut event = event(kind, &self.info.id, self.info.remote_did.as_deref());
        fill(&mut event);
        run_event(&self.serving, &self.slot, &self.agent, lambda, event).await
    }

    /// A text frame: an optional auth frame with `allow_unsigned`, else a message for the
    /// lambda, or one ALF message to deliver.
    async fn on_text(&mut self, text: String) -> Next {
        if self.route.allow_unsigned
            && self.info.remote_did.is_none()
            && let Ok(frame) = serde_json::from_str::<Value>(&text)
            && handshake::is_auth_frame(&frame)
        {
            if let Some(auth) = handshake::unverified_client(&frame) {
                self.info.remote_did = Some(auth.did.clone());
                remember(&self.slot, &self.info);
                // Unverified, but the agent still proves its own DID: a client
                // that pinned it (a `ws_connections` `did`) opens only on that proof.
                let answer = answer_auth(&self.serving, &self.agent, &auth).await;
                if !self
                    .writer
                    .send(Message::Text(answer.to_string().into()))
                    .await
                {
                    return Next::Stop;
                }
            }
            return Next::Read;
        }
        let reply = if self.route.lambda.is_some() {
            self.lambda_event("message", |received| received["data"] = json!(text))
                .await
        } else {
            match alf_frame(&text) {
                Ok(()) => {
                    Some(deliver(&self.serving, &self.agent, text.into_bytes(), self.peer).await)
                }
                Err(why) => {
                    self.writer.close(CLOSE_INVALID_FRAME, why).await;
                    return Next::StopWith(CLOSE_INVALID_FRAME);
                }
            }
        };
        self.answer(reply).await
    }

    /// A binary frame: a message for the lambda; without one, not an ALF frame.
    async fn on_binary(&self, bytes: &[u8]) -> Next {
        if self.route.lambda.is_none() {
            self.writer
                .close(CLOSE_INVALID_FRAME, "ALF frames are text")
                .await;
            return Next::StopWith(CLOSE_INVALID_FRAME);
        }
        let reply = self
            .lambda_event("message", |received| {
                received["data"] = adf_sandbox::bytes_value(bytes);
            })
            .await;
        self.answer(reply).await
    }

    /// Sends the reply, if any; stops when it cannot be written.
    async fn answer(&self, reply: Option<String>) -> Next {
        if let Some(reply) = reply
            && !self.writer.send(Message::Text(reply.into())).await
        {
            return Next::Stop;
        }
        Next::Read
    }
}

fn remember(slot: &Slot, info: &ConnectionInfo) {
    slot.connections
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(info.id.clone(), info.clone());
}

fn forget(slot: &Slot, id: &str) {
    slot.connections
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(id);
    slot.outlets
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(id);
}

/// How the writer task ended on its own.
#[derive(Debug)]
enum WriterEnd {
    /// Code asked for the close (`ws_disconnect`).
    ClosedByAgent,
    /// A frame could not be written: the peer is gone.
    Failed,
}

/// The connection task's handle on the writer (see [`write_frames`]).
struct Writer(tokio::sync::mpsc::Sender<Outgoing>);

impl Writer {
    /// Sends `frame` and waits until it is written; false when the connection is gone.
    async fn send(&self, frame: Message) -> bool {
        let (written, outcome) = tokio::sync::oneshot::channel();
        if self.0.send(Outgoing::Frame(frame, written)).await.is_err() {
            return false;
        }
        matches!(outcome.await, Ok(Ok(())))
    }

    /// Sends a close frame (the connection ends after it either way).
    async fn close(&self, code: u16, reason: &str) {
        let frame = Message::Close(Some(CloseFrame {
            code,
            reason: reason.to_owned().into(),
        }));
        let _ = self.send(frame).await;
    }
}

/// Writes every frame of one connection, in the order they were asked for, until the
/// connection task and code have all let go of the channel, a write fails or code closes it.
async fn write_frames(
    mut sender: futures::stream::SplitSink<WebSocket, Message>,
    mut outgoing: tokio::sync::mpsc::Receiver<Outgoing>,
    ended: tokio::sync::oneshot::Sender<WriterEnd>,
) {
    while let Some(order) = outgoing.recv().await {
        match order {
            Outgoing::Frame(frame, written) => {
                let closing = matches!(frame, Message::Close(_));
                let sent = sender.send(frame).await.map_err(|e| e.to_string());
                let failed = sent.is_err();
                let _ = written.send(sent);
                if failed {
                    let _ = ended.send(WriterEnd::Failed);
                    return;
                }
                if closing {
                    return;
                }
            }
            Outgoing::Close => {
                let _ = sender
                    .send(Message::Close(Some(CloseFrame {
                        code: 1000,
                        reason: "closed by the agent".into(),
                    })))
                    .await;
                let _ = ended.send(WriterEnd::ClosedByAgent);
                return;
            }
        }
    }
}

/// One ALF message per text frame: a single JSON object (SRV-14).
fn alf_frame(text: &str) -> Result<(), &'static str> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(_)) => Ok(()),
        Ok(_) => Err("a frame carries exactly one ALF message object"),
        Err(_) => Err("the frame is not JSON"),
    }
}

async fn deliver(
    serving: &Serving,
    agent: &ServedAgent,
    wire: Vec<u8>,
    peer: Option<IpAddr>,
) -> String {
    // The sender matches answers to its messages by ALF id.
    let message_id = serde_json::from_slice::<Value>(&wire)
        .ok()
        .and_then(|m| m.get("id").cloned())
        .unwrap_or(Value::Null);
    match serving.directory.deliver(agent, wire, peer).await {
        Ok(mut accepted) => {
            accepted["type"] = json!("ack");
            accepted.to_string()
        }
        Err((status, error)) => json!({
            "type": "error",
            "status": status,
            "error": error,
            "message_id": message_id,
        })
        .to_string(),
    }
}

async fn answer_auth(serving: &Serving, agent: &ServedAgent, auth: &ClientAuth) -> Value {
    let server = serving
        .directory
        .sign_as_agent(
            agent,
            Box::new({
                let auth = auth.clone();
                move |did: &str| handshake::server_signed_bytes(did, &auth)
            }),
        )
        .await;
    handshake::success(auth, server)
}

/// Runs the route lambda with one event on a blocking thread (guest connection, warm
/// context); its answer as a frame to send back, if any.
pub(crate) async fn run_event(
    serving: &Arc<Serving>,
    slot: &Arc<Slot>,
    agent: &ServedAgent,
    lambda: &LambdaRef,
    event: Value,
) -> Option<String> {
    let job_serving = Arc::clone(serving);
    let job_slot = Arc::clone(slot);
    let path = agent.path.clone();
    let lambda = lambda.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let mut file = job_slot.files.checkout(&path).ok()?;
        let run = crate::resolve::run_lambda_blocking(&job_serving, &job_slot, &mut file, &lambda, event, true);
        drop(job_slot.files.checkin(&path, file));
        match run {
            Ok(Value::Null) => None,
            Ok(Value::String(text)) => Some(text),
            Ok(other) => Some(other.to_string()),
            Err(failure) => {
                tracing::warn!(lambda = %lambda.source(), why = %failure.message, "WebSocket lambda failed");
                None
            }
        }
    })
    .await
    .ok()
    .flatten();
    serving.directory.lambda_ran(agent, None);
    serving.watch_idle_files(slot);
    answer
}
