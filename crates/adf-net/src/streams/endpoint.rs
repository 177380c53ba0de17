//! Opening one endpoint into a byte [`Source`] and/or [`Sink`]: `tcp` through
//! `adf_egress::connect_tcp`, `process` as a child with a cleared environment (no shell),
//! `umbilical` as the agent's events in NDJSON, `ws` as the binary frames of an open outbound
//! connection (its text frames stay ALF messages, delivered as before).

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use super::spec::{Endpoint, StreamError};
use crate::outbound::{Outbound, OutboundInfo};

/// Largest chunk read at once.
const CHUNK: usize = 16 * 1024;
/// Chunks queued from a WebSocket or the umbilical before the producer waits (ws) or the
/// event is dropped (umbilical: emitting never waits for a binding).
pub(super) const QUEUE: usize = 256;
/// How long a `tcp` endpoint may take to connect.
const TCP_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Where bytes come from.
pub(super) enum Source {
    Io(Box<dyn AsyncRead + Send + Unpin>),
    Chunks(mpsc::Receiver<Vec<u8>>),
}

impl Source {
    /// The next chunk; `None` at the end. Cancel-safe (a select may drop it).
    pub(super) async fn next(&mut self, buffer: &mut [u8]) -> std::io::Result<Option<Vec<u8>>> {
        match self {
            Source::Io(reader) => match reader.read(buffer).await? {
                0 => Ok(None),
                n => Ok(Some(buffer[..n].to_vec())),
            },
            Source::Chunks(queue) => Ok(queue.recv().await),
        }
    }

    /// A buffer for [`Self::next`].
    /// A read buffer of at most `high_water` bytes (`queue_high_water_bytes`): what one
    /// direction holds between reading a chunk and writing it.
    pub(super) fn buffer(high_water: usize) -> Vec<u8> {
        vec![0; CHUNK.min(high_water.max(1))]
    }
}

/// Where bytes go.
pub(super) enum Sink {
    Io(Box<dyn AsyncWrite + Send + Unpin>),
    Ws {
        outbound: Arc<Outbound>,
        agent_id: String,
        connection_id: String,
    },
}

impl Sink {
    pub(super) async fn write(&mut self, bytes: Vec<u8>) -> std::io::Result<()> {
        match self {
            Sink::Io(writer) => {
                writer.write_all(&bytes).await?;
                writer.flush().await
            }
            Sink::Ws {
                outbound,
                agent_id,
                connection_id,
            } => outbound
                .send(agent_id, connection_id, Message::Binary(bytes.into()))
                .await
                .map_err(std::io::Error::other),
        }
    }

    /// Ends the write side (a TCP half-close, a process's stdin closing).
    pub(super) async fn finish(&mut self) {
        if let Sink::Io(writer) = self {
            let _ = writer.shutdown().await;
        }
    }
}

/// What keeps an endpoint alive while its binding runs; dropping it releases the endpoint
/// (a child is killed, a WebSocket tap is removed).
#[derive(Default)]
pub(super) struct Guard {
    child: Option<tokio::process::Child>,
    ws_tap: Option<String>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(id) = self.ws_tap.take() {
            ws_taps().remove(&id);
        }
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}

/// One opened endpoint.
pub(super) struct Opened {
    pub(super) source: Option<Source>,
    pub(super) sink: Option<Sink>,
    pub(super) guard: Guard,
}

/// What opening an endpoint needs from the host.
pub(super) struct Context<'a> {
    pub(super) agent_id: &'a str,
    pub(super) policy: &'a adf_egress::Policy,
    pub(super) lookup: &'a dyn adf_egress::Lookup,
    pub(super) outbound: &'a Arc<Outbound>,
    pub(super) umbilical: &'a super::UmbilicalFeed,
}

/// Opens `endpoint`: as a source when `read`, as a sink when `write`.
pub(super) async fn open(
    endpoint: &Endpoint,
    read: bool,
    write: bool,
    cx: &Context<'_>,
) -> Result<Opened, StreamError> {
    match endpoint {
        Endpoint::Tcp { host, port } => {
            let (stream, _addr) =
                adf_egress::connect_tcp(cx.policy, host, *port, cx.lookup, TCP_CONNECT_TIMEOUT)
                    .await
                    .map_err(|e| match e.kind {
                        adf_egress::EgressErrorKind::Refused
                        | adf_egress::EgressErrorKind::OffMachineInTest => {
                            StreamError::Refused(e.to_string())
                        }
                        adf_egress::EgressErrorKind::Invalid => StreamError::Invalid(e.to_string()),
                        adf_egress::EgressErrorKind::Failed => StreamError::Failed(e.to_string()),
                    })?;
            let (reader, writer) = stream.into_split();
            Ok(Opened {
                source: read.then(|| Source::Io(Box::new(reader))),
                sink: write.then(|| Sink::Io(Box::new(writer))),
                guard: Guard::default(),
            })
        }
        Endpoint::Process {
            command, env, cwd, ..
        } => {
            let (program, args) = command
                .split_first()
                .ok_or_else(|| StreamError::Invalid("a process endpoint needs a command".into()))?;
            let mut child = tokio::process::Command::new(program);
            child
                .args(args)
                .env_clear()
                .env(
                    "PATH",
                    std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
                )
                .envs(env)
                .current_dir(cwd.clone().unwrap_or_else(std::env::temp_dir))
                .stdin(if write { Stdio::piped() } else { Stdio::null() })
                .stdout(if read { Stdio::piped() } else { Stdio::null() })
                .stderr(Stdio::null())
                .kill_on_drop(true);
            let mut child = child
                .spawn()
                .map_err(|e| StreamError::Failed(format!("cannot start '{program}': {e}")))?;
            let source = child
                .stdout
                .take()
                .map(|out| Source::Io(Box::new(out) as Box<dyn AsyncRead + Send + Unpin>));
            let sink = child
                .stdin
                .take()
                .map(|input| Sink::Io(Box::new(input) as Box<dyn AsyncWrite + Send + Unpin>));
            Ok(Opened {
                source,
                sink,
                guard: Guard {
                    child: Some(child),
                    ws_tap: None,
                },
            })
        }
        Endpoint::Umbilical { event_types } => {
            let (sender, receiver) = mpsc::channel(QUEUE);
            cx.umbilical
                .subscribe(cx.agent_id, event_types.clone(), sender);
            Ok(Opened {
                source: Some(Source::Chunks(receiver)),
                sink: None,
                guard: Guard::default(),
            })
        }
        Endpoint::Ws { connection_id } => {
            let open: Option<OutboundInfo> = cx.outbound.list(cx.agent_id).into_iter().find(|c| {
                c.id == *connection_id || c.config_id.as_deref() == Some(connection_id.as_str())
            });
            let Some(open) = open else {
                return Err(StreamError::Failed(format!(
                    "no open outbound WebSocket '{connection_id}' of this agent (ws endpoints use outbound connections; inbound ones are not supported yet)"
                )));
            };
            let mut guard = Guard::default();
            let source = if read {
                let (sender, receiver) = mpsc::channel(QUEUE);
                let mut taps = ws_taps();
                if taps.contains_key(&open.id) {
                    return Err(StreamError::Invalid(format!(
                        "the WebSocket '{connection_id}' already feeds another binding"
                    )));
                }
                taps.insert(open.id.clone(), sender);
                guard.ws_tap = Some(open.id.clone());
                Some(Source::Chunks(receiver))
            } else {
                None
            };
            Ok(Opened {
                source,
                sink: write.then(|| Sink::Ws {
                    outbound: Arc::clone(cx.outbound),
                    agent_id: cx.agent_id.to_owned(),
                    connection_id: open.id,
                }),
                guard,
            })
        }
    }
}

type WsTaps = HashMap<String, mpsc::Sender<Vec<u8>>>;

/// Outbound connections whose binary frames feed a binding, by connection id (ids are
/// unique per process, so one table serves every host).
static WS_TAPS: LazyLock<Mutex<WsTaps>> = LazyLock::new(Mutex::default);

fn ws_taps() -> std::sync::MutexGuard<'static, WsTaps> {
    WS_TAPS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Called by an outbound connection for each binary frame it receives: a bound connection
/// hands it to its binding (waiting while the binding is behind, so a slow sink slows the
/// socket); an unbound one drops it, as before.
pub(crate) async fn ws_frame(info: &Mutex<OutboundInfo>, bytes: Vec<u8>) {
    let id = info
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .id
        .clone();
    let tap = ws_taps().get(&id).cloned();
    if let Some(tap) = tap {
        let _ = tap.send(bytes).await;
    }
}
