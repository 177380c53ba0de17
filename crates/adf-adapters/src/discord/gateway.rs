//! The Gateway (<https://discord.com/developers/docs/events/gateway>): one WebSocket with JSON
//! payloads `{op, d, s, t}`.
//!
//! A connection: HELLO (op 10) gives the heartbeat interval; the first heartbeat (op 1, the
//! last sequence number) goes after a random fraction of it, then one per interval; each must
//! be acknowledged (op 11) before the next is due, or the connection is a zombie and is
//! replaced. Then IDENTIFY (op 2, token and intents) for a new session, or RESUME (op 6,
//! session id and last sequence) to continue one; READY gives the session id and the URL to
//! resume at, RESUMED ends a replay. The server may ask for a heartbeat at once (op 1), to
//! reconnect (op 7: resume) or say the session is invalid (op 9: resume when `d` is true, else
//! identify anew after a 1–5 s wait). The session (id, resume URL, last sequence) is kept in
//! `session.json` in the state directory, so a dropped connection — or a restarted daemon —
//! resumes and the Gateway replays what was missed; a dispatch's sequence is stored only
//! after the dispatch is handled, and message ids already stored are skipped, so a replay
//! neither loses nor doubles a row.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use adf_egress::{EgressErrorKind, SystemLookup, Url};
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::{DiscordAdapter, KIND};
use crate::Session;
use crate::error::AdapterError;

/// `GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT`: messages in guild channels and DMs,
/// with their text (Message Content is a privileged intent the bot's owner enables in the
/// Developer Portal).
pub const INTENTS: u64 = (1 << 9) | (1 << 12) | (1 << 15);

/// The Gateway API version and encoding asked for in the connection URL.
const GATEWAY_QUERY: [(&str, &str); 2] = [("v", "10"), ("encoding", "json")];

const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the server has to say HELLO after the upgrade.
const HELLO_TIMEOUT: Duration = Duration::from_secs(30);
/// The shortest heartbeat interval honoured (a zero would spin).
const MIN_HEARTBEAT: Duration = Duration::from_millis(20);
/// The wait before reconnecting after a connection dropped.
const RECONNECT_WAIT: Duration = Duration::from_secs(1);
/// Connections in a row that fail before READY/RESUMED before the run gives up (the host
/// then restarts it with its backoff).
const MAX_FAILED_CONNECTIONS: u32 = 3;

const SESSION_FILE: &str = "session.json";

type Socket = adf_egress::socket::WebSocket;

/// A session the Gateway can resume.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resumable {
    pub(crate) session_id: String,
    pub(crate) resume_url: String,
    pub(crate) seq: Option<i64>,
}

/// How one connection ended.
enum Ended {
    /// The stop signal fired.
    Stopped,
    /// Connect again, resuming the session when `resume`, after `wait`.
    Reconnect { resume: bool, wait: Duration },
}

/// A fraction in [0, 1): the heartbeat jitter and the INVALID_SESSION wait only need to
/// spread clients apart, not be unpredictable.
fn jitter() -> f64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    f64::from(nanos % 1000) / 1000.0
}

fn transport(reason: impl Into<String>) -> AdapterError {
    AdapterError::Transport {
        adapter: KIND.into(),
        reason: reason.into(),
    }
}

impl DiscordAdapter {
    pub(crate) fn stored_session(&self) -> Result<Option<Resumable>, AdapterError> {
        if let Some(session) = super::lock(&self.session).clone() {
            return Ok(Some(session));
        }
        let Some(stored) = self.state.read_json(SESSION_FILE)? else {
            return Ok(None);
        };
        let field = |name: &str| stored.get(name).and_then(Value::as_str).map(str::to_owned);
        let session = match (field("session_id"), field("resume_gateway_url")) {
            (Some(session_id), Some(resume_url)) => Some(Resumable {
                session_id,
                resume_url,
                seq: stored.get("seq").and_then(Value::as_i64),
            }),
            _ => None,
        };
        super::lock(&self.session).clone_from(&session);
        Ok(session)
    }

    fn save_session(&self, session: Option<Resumable>) -> Result<(), AdapterError> {
        let document = match &session {
            Some(s) => json!({
                "session_id": s.session_id,
                "resume_gateway_url": s.resume_url,
                "seq": s.seq,
            }),
            None => json!({}),
        };
        *super::lock(&self.session) = session;
        self.state.write_json(SESSION_FILE, &document)
    }

    fn save_seq(&self, seq: i64) -> Result<(), AdapterError> {
        let session = super::lock(&self.session).clone();
        match session {
            Some(mut session) => {
                session.seq = Some(seq);
                self.save_session(Some(session))
            }
            None => Ok(()),
        }
    }

    /// Where a new session connects: `config.gateway_url`, else `GET /gateway/bot`'s `url`.
    async fn gateway_url(&self) -> Result<String, AdapterError> {
        if let Some(url) = &self.gateway_override {
            return Ok(url.clone());
        }
        let answer = self.rest.get("/gateway/bot").await?;
        answer
            .get("url")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| transport("GET /gateway/bot answered no url"))
    }

    async fn connect(&self, base: &str) -> Result<Socket, AdapterError> {
        let mut url = Url::parse(base)
            .map_err(|e| transport(format!("the Gateway URL '{base}' is not a URL: {e}")))?;
        url.query_pairs_mut().clear().extend_pairs(GATEWAY_QUERY);
        let (socket, _addr) =
            adf_egress::connect_websocket(self.rest.policy(), &url, &SystemLookup, CONNECT_TIMEOUT)
                .await
                .map_err(|e| match e.kind {
                    EgressErrorKind::Failed => transport(self.rest.scrub(&e.to_string())),
                    _ => AdapterError::Egress {
                        adapter: KIND.into(),
                        reason: self.rest.scrub(&e.to_string()),
                    },
                })?;
        Ok(socket)
    }

    /// Receives until stop: connects, resumes or identifies, and reconnects after drops,
    /// RECONNECT, INVALID_SESSION and zombie connections.
    pub(crate) async fn receive(&self, session: &Session) -> Result<(), AdapterError> {
        let bot = self.bot().await?;
        let mut announced = false;
        let mut failures = 0;
        // A resume URL that failed (gone after a long downtime) is not tried again in this
        // run: the session is resumed on the main Gateway URL, which says if it is stale.
        let mut resume_url_failed = false;
        loop {
            let resume = self.stored_session()?;
            let base = match &resume {
                Some(r) if !resume_url_failed => r.resume_url.clone(),
                _ => self.gateway_url().await?,
            };
            let resuming = resume.is_some();
            let wait = match self
                .connection(&base, resume, &bot, session, &mut announced)
                .await
            {
                Ok(Ended::Stopped) => return Ok(()),
                Ok(Ended::Reconnect { resume, wait }) => {
                    failures = 0;
                    if !resume {
                        self.save_session(None)?;
                    }
                    wait
                }
                Err(e) if e.is_transient() && failures + 1 < MAX_FAILED_CONNECTIONS => {
                    failures += 1;
                    resume_url_failed |= resuming;
                    tracing::info!(adapter = KIND, error = %e, "gateway connection failed; reconnecting");
                    RECONNECT_WAIT
                }
                Err(e) => return Err(e),
            };
            if session.stop().is_stopped() {
                return Ok(());
            }
            if !wait.is_zero() {
                tokio::select! {
                    () = session.stop().stopped() => return Ok(()),
                    () = self.sleeper.sleep(wait) => {}
                }
            }
        }
    }

    /// One Gateway connection, from HELLO until it ends.
    async fn connection(
        &self,
        base: &str,
        resume: Option<Resumable>,
        bot: &super::inbound::Bot,
        session: &Session,
        announced: &mut bool,
    ) -> Result<Ended, AdapterError> {
        let socket = self.connect(base).await?;
        let (mut tx, mut rx) = socket.split();
        let hello = tokio::select! {
            () = session.stop().stopped() => return Ok(Ended::Stopped),
            hello = tokio::time::timeout(HELLO_TIMEOUT, next_payload(&mut rx)) => hello
                .map_err(|_| transport("the Gateway sent no HELLO"))??,
        };
        if hello.get("op").and_then(Value::as_u64) != Some(10) {
            return Err(transport(format!(
                "the Gateway opened with op {} instead of HELLO",
                hello.get("op").unwrap_or(&Value::Null)
            )));
        }
        let interval = hello
            .pointer("/d/heartbeat_interval")
            .and_then(Value::as_u64)
            .map(Duration::from_millis)
            .unwrap_or(Duration::from_secs(41))
            .max(MIN_HEARTBEAT);
        let mut seq = resume.as_ref().and_then(|r| r.seq);
        let token = self.rest.token().expose().to_owned();
        let opening = match &resume {
            Some(r) => json!({ "op": 6, "d": {
                "token": token, "session_id": r.session_id, "seq": r.seq,
            }}),
            None => json!({ "op": 2, "d": {
                "token": token,
                "intents": INTENTS,
                "properties": { "os": std::env::consts::OS, "browser": "adf", "device": "adf" },
            }}),
        };
        send(&mut tx, &opening).await?;
        let mut ready = false;
        let mut awaiting_ack = false;
        let mut next_beat = tokio::time::Instant::now() + interval.mul_f64(jitter());
        loop {
            tokio::select! {
                () = session.stop().stopped() => {
                    // Not 1000/1001: those end the session, and a restarted daemon resumes it.
                    let close = CloseFrame { code: CloseCode::Restart, reason: "stopping".into() };
                    let _best_effort = tx.send(Message::Close(Some(close))).await;
                    return Ok(Ended::Stopped);
                }
                () = tokio::time::sleep_until(next_beat) => {
                    if awaiting_ack {
                        tracing::info!(adapter = KIND, "no heartbeat ACK: zombie connection, reconnecting");
                        return Ok(Ended::Reconnect { resume: true, wait: Duration::ZERO });
                    }
                    send(&mut tx, &json!({ "op": 1, "d": seq })).await?;
                    awaiting_ack = true;
                    next_beat = tokio::time::Instant::now() + interval;
                }
                frame = rx.next() => {
                    let text = match frame {
                        Some(Ok(Message::Text(text))) => text,
                        Some(Ok(Message::Close(frame))) => {
                            let code = frame.as_ref().map(|f| u16::from(f.code));
                            let reason = frame.map(|f| f.reason.to_string()).unwrap_or_default();
                            return self.closed(code, &reason, ready);
                        }
                        Some(Ok(_)) => continue,
                        Some(Err(e)) => return dropped(ready, &e.to_string()),
                        None => return dropped(ready, "the connection ended"),
                    };
                    let Ok(payload) = serde_json::from_str::<Value>(text.as_str()) else {
                        continue;
                    };
                    match payload.get("op").and_then(Value::as_u64) {
                        Some(0) => {
                            let kind = payload.get("t").and_then(Value::as_str).unwrap_or_default();
                            let data = payload.get("d").cloned().unwrap_or(Value::Null);
                            let s = payload.get("s").and_then(Value::as_i64);
                            match kind {
                                "READY" => {
                                    let field = |name: &str| data.get(name).and_then(Value::as_str).map(str::to_owned);
                                    if let (Some(session_id), Some(resume_url)) =
                                        (field("session_id"), field("resume_gateway_url"))
                                    {
                                        self.save_session(Some(Resumable { session_id, resume_url, seq: s }))?;
                                    }
                                    ready = true;
                                }
                                "RESUMED" => ready = true,
                                "MESSAGE_CREATE" => self.handle_message(&data, bot).await?,
                                "INTERACTION_CREATE" => self.handle_interaction(&data).await?,
                                _ => {}
                            }
                            if ready && !*announced {
                                *announced = true;
                                session.running();
                            }
                            if let Some(s) = s {
                                seq = Some(s);
                                self.save_seq(s)?;
                            }
                        }
                        Some(1) => send(&mut tx, &json!({ "op": 1, "d": seq })).await?,
                        Some(7) => return Ok(Ended::Reconnect { resume: true, wait: Duration::ZERO }),
                        Some(9) => {
                            let resumable = payload.get("d").and_then(Value::as_bool) == Some(true);
                            let wait = Duration::from_secs(1).mul_f64(1.0 + 4.0 * jitter());
                            return Ok(Ended::Reconnect { resume: resumable, wait });
                        }
                        Some(11) => awaiting_ack = false,
                        _ => {}
                    }
                }
            }
        }
    }

    /// What a close frame from the Gateway means
    /// (<https://discord.com/developers/docs/topics/opcodes-and-status-codes>).
    fn closed(&self, code: Option<u16>, reason: &str, ready: bool) -> Result<Ended, AdapterError> {
        let reason = self.rest.scrub(reason);
        match code {
            Some(4004) => Err(AdapterError::CredentialRefused {
                adapter: KIND.into(),
                purpose: super::CREDENTIAL_PURPOSE.into(),
                reason: format!("the Gateway closed with 4004 {reason}"),
                file: self.file.clone(),
            }),
            Some(4013 | 4014) => Err(AdapterError::Config {
                adapter: KIND.into(),
                message: format!(
                    "the Gateway refused the intents (close {}: {reason}); enable the Message Content intent for the bot in the Discord Developer Portal (Bot → Privileged Gateway Intents)",
                    code.unwrap_or_default()
                ),
            }),
            Some(4010..=4012) => Err(AdapterError::NotSupported {
                what: format!(
                    "the Gateway's answer (close {}: {reason}); sharding",
                    code.unwrap_or_default()
                ),
            }),
            // Invalid sequence or a timed-out session: start a new one.
            Some(4007 | 4009) => Ok(Ended::Reconnect {
                resume: false,
                wait: Duration::ZERO,
            }),
            other => dropped(
                ready,
                &format!(
                    "the Gateway closed the connection ({}{reason})",
                    other.map(|c| format!("{c} ")).unwrap_or_default()
                ),
            ),
        }
    }
}

/// A connection that ended without being asked to: resumed when it had been ready, else a
/// failed connection.
fn dropped(ready: bool, reason: &str) -> Result<Ended, AdapterError> {
    if ready {
        tracing::info!(
            adapter = KIND,
            reason,
            "gateway connection dropped; resuming"
        );
        Ok(Ended::Reconnect {
            resume: true,
            wait: RECONNECT_WAIT,
        })
    } else {
        Err(transport(reason.to_owned()))
    }
}

async fn send(tx: &mut SplitSink<Socket, Message>, payload: &Value) -> Result<(), AdapterError> {
    tx.send(Message::text(payload.to_string()))
        .await
        .map_err(|e| transport(format!("sending to the Gateway failed: {e}")))
}

/// The next JSON payload (text frame), skipping pings.
async fn next_payload(rx: &mut SplitStream<Socket>) -> Result<Value, AdapterError> {
    loop {
        match rx.next().await {
            Some(Ok(Message::Text(text))) => {
                return serde_json::from_str(text.as_str()).map_err(|e| {
                    transport(format!("the Gateway sent a payload that is not JSON: {e}"))
                });
            }
            Some(Ok(Message::Close(frame))) => {
                let code = frame.map(|f| u16::from(f.code)).unwrap_or_default();
                return Err(transport(format!(
                    "the Gateway closed the connection ({code})"
                )));
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(transport(format!("the Gateway connection failed: {e}"))),
            None => return Err(transport("the Gateway connection ended")),
        }
    }
}
