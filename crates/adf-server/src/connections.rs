//! The accept loop every listener of the daemon runs ([`serve`]): the part of the front door
//! below HTTP routing, so that no client can hold the door open.
//!
//! - **Header-read timeout** ([`ConnectionLimits::header_read_timeout`], default 10 s): a
//!   connection waiting for a request head — its first, or the next one on a kept-alive
//!   connection — is closed when the head has not arrived in full within it (hyper's own
//!   timer), so it is the idle timeout between requests too. A response being sent (an SSE
//!   stream) is not waiting for a head, and an upgraded connection (a WebSocket) has left
//!   HTTP: neither is cut.
//! - **Connection cap** ([`ConnectionLimits::max_connections`], default the smaller of 1024
//!   and half the open-file limit): every accepted socket holds a slot until it is closed, an
//!   upgraded WebSocket included. Over the cap a connection is still accepted, told
//!   `503 {"code": "TOO_MANY_CONNECTIONS"}` with `Retry-After: 1`, and closed — a clear
//!   answer rather than a silent backlog; at most [`REFUSALS_IN_FLIGHT`] such answers are
//!   written at once (each for at most [`REFUSAL_LINGER`]), beyond that a connection is
//!   closed unanswered, so refusing can never use the descriptors the cap keeps free.
//! - **Open-file limit** ([`raise_open_file_limit`]): the daemon lifts its soft
//!   `RLIMIT_NOFILE` to the hard limit at start, so agent files, their SQLite sidecars and
//!   outbound sockets keep the descriptors the connection cap leaves them.
//!
//! Graceful shutdown as `axum::serve` does it: stop accepting, ask every connection to finish
//! its request in flight, wait for those connections to end.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

/// Default time a request head may take to arrive (also the keep-alive idle time).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Default connection cap when the open-file limit allows it (see [`ConnectionLimits`]).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// The fewest connections a derived cap allows, however low the open-file limit.
const MIN_DERIVED_CAP: usize = 16;

/// Over-the-cap connections answered at once; beyond, they are closed unanswered.
pub const REFUSALS_IN_FLIGHT: usize = 64;

/// How long one refusal may take to be written and read.
pub const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// How long the loop rests after an accept error that is not the client's (out of file
/// descriptors, out of memory), so it does not spin while the cause lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The body of the answer over the cap.
const REFUSAL_BODY: &str = "{\"error\":\"the daemon has too many open connections; retry shortly\",\"code\":\"TOO_MANY_CONNECTIONS\"}";

/// The answer over the cap: short, complete, and closing.
fn refusal() -> Vec<u8> {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{REFUSAL_BODY}",
        REFUSAL_BODY.len()
    )
    .into_bytes()
}

/// How a listener treats its connections (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a request head may take to arrive, and how long a kept-alive connection may
    /// wait for its next request.
    pub header_read_timeout: Duration,
    /// Connections open at once; `None` derives it from the open-file limit.
    pub max_connections: Option<usize>,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            max_connections: None,
        }
    }
}

impl ConnectionLimits {
    /// The cap in force: the configured one (at least 1), else the smaller of
    /// [`DEFAULT_MAX_CONNECTIONS`] and half the soft open-file limit (at least 16), so half of
    /// the descriptors stay for the agents.
    pub fn cap(&self) -> usize {
        match self.max_connections {
            Some(cap) => cap.max(1),
            None => (open_file_limit() / 2).clamp(MIN_DERIVED_CAP, DEFAULT_MAX_CONNECTIONS),
        }
    }
}

/// The soft open-file limit (where there is none, one that leaves the default cap).
fn open_file_limit() -> usize {
    #[cfg(unix)]
    {
        rlimit::getrlimit(rlimit::Resource::NOFILE)
            .map(|(soft, _)| usize::try_from(soft).unwrap_or(usize::MAX))
            .unwrap_or(DEFAULT_MAX_CONNECTIONS * 2)
    }
    #[cfg(not(unix))]
    {
        DEFAULT_MAX_CONNECTIONS * 2
    }
}

/// Lifts the process's soft open-file limit to its hard limit (on macOS, to the kernel's
/// per-process maximum when that is lower); returns the soft limit now in force.
pub fn raise_open_file_limit() -> io::Result<u64> {
    rlimit::increase_nofile_limit(u64::MAX)
}

/// The slots of one listener's connection cap.
#[derive(Debug, Clone)]
pub struct ConnectionSlots {
    semaphore: Arc<Semaphore>,
    cap: usize,
}

impl ConnectionSlots {
    /// Slots for `cap` connections.
    pub fn new(cap: usize) -> Self {
        ConnectionSlots {
            semaphore: Arc::new(Semaphore::new(cap)),
            cap,
        }
    }

    /// The cap.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Connections holding a slot now (open HTTP connections and upgraded WebSockets).
    pub fn open(&self) -> usize {
        self.cap.saturating_sub(self.semaphore.available_permits())
    }
}

/// An accepted socket and the slot it holds until it is dropped — by hyper when the
/// connection ends, or by the WebSocket it was upgraded into.
struct Admitted {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl AsyncRead for Admitted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Admitted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Serves `app` on `listener` under `limits` until `shutdown` resolves, then shuts down
/// gracefully. Each request carries `ConnectInfo<SocketAddr>` (the peer address).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    slots: ConnectionSlots,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let refusals = Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT));
    let (stopping_tx, stopping_rx) = watch::channel(false);
    // Every connection task holds a clone; shutdown waits until all are dropped.
    let (close_tx, close_rx) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) if client_side(&error) => continue,
            Err(error) => {
                tracing::warn!(%error, "cannot accept a connection");
                tokio::select! {
                    () = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        match Arc::clone(&slots.semaphore).try_acquire_owned() {
            Ok(slot) => {
                let io = Admitted {
                    stream,
                    _slot: slot,
                };
                tokio::spawn(serve_connection(
                    io,
                    peer,
                    app.clone(),
                    limits,
                    stopping_rx.clone(),
                    close_rx.clone(),
                ));
            }
            Err(_) => refuse(stream, &refusals),
        }
    }
    drop(listener);
    let _ = stopping_tx.send(true);
    drop(close_rx);
    close_tx.closed().await;
}

/// Accept errors that concern one client only (it left before it was accepted).
fn client_side(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
    )
}

async fn serve_connection(
    io: Admitted,
    peer: SocketAddr,
    app: Router,
    limits: ConnectionLimits,
    mut stopping: watch::Receiver<bool>,
    close: watch::Receiver<()>,
) {
    let router = TowerToHyperService::new(app);
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        router.call(request)
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let mut connection = pin!(
        builder
            .serve_connection(TokioIo::new(io), service)
            .with_upgrades()
    );
    let mut asked_to_stop = false;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    // A header-read timeout, a client that left, a malformed request: the
                    // connection's own end, nothing the daemon has to act on.
                    tracing::debug!(%peer, %error, "connection closed");
                }
                break;
            }
            changed = stopping.wait_for(|stop| *stop), if !asked_to_stop => {
                asked_to_stop = true;
                if changed.is_ok() {
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
    drop(close);
}

/// Answers an over-the-cap connection with the 503 and closes it, within the refusal budget.
fn refuse(mut stream: TcpStream, refusals: &Arc<Semaphore>) {
    let Ok(answering) = Arc::clone(refusals).try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let answered = async {
            stream.write_all(&refusal()).await?;
            stream.shutdown().await?;
            // Read what the client sent until it closes: closing a socket with unread input
            // resets it, and the reset could destroy the answer before the client reads it.
            let mut sink = [0u8; 1024];
            while stream.read(&mut sink).await? > 0 {}
            Ok::<(), io::Error>(())
        };
        let _ = tokio::time::timeout(REFUSAL_LINGER, answered).await;
        drop(answering);
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_a_complete_http_answer() {
        let bytes = refusal();
        let text = std::str::from_utf8(&bytes).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(body.len(), length);
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["code"], "TOO_MANY_CONNECTIONS");
    }

    #[cfg(unix)]
    #[test]
    fn the_derived_cap_leaves_half_the_descriptors() {
        let (soft, _) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap();
        let cap = ConnectionLimits::default().cap();
        assert!((MIN_DERIVED_CAP..=DEFAULT_MAX_CONNECTIONS).contains(&cap));
        if soft >= (MIN_DERIVED_CAP * 2) as u64 {
            assert!(cap as u64 <= soft / 2, "{cap} of {soft}");
        }
        let set = ConnectionLimits {
            max_connections: Some(0),
            ..ConnectionLimits::default()
        };
        assert_eq!(set.cap(), 1);
    }
}
