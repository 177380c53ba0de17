//! Binding, the front door's settings ([`FrontDoor`]: the token every bind requires, the
//! `--insecure-loopback` opt-out, extra host names, the public body budget), and graceful
//! shutdown.
//!
//! Shutdown order: stop accepting, end SSE streams (the daemon's shutdown signal), let
//! in-flight requests finish, then close every agent file cleanly.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use adf_runtime::home::RuntimeHome;

use crate::api::{AppState, router};
use crate::daemon::Daemon;
use crate::error::ServerError;
use crate::frontdoor::{BodyBudget, DEFAULT_PUBLIC_BODY_BUDGET, Gate};
use crate::token;

/// The default address, as in the reference.
pub const DEFAULT_HOST: &str = "127.0.0.1";
/// The default TCP port, as in the reference.
pub const DEFAULT_PORT: u16 = 7385;

/// Whether `host` is a loopback name or address.
pub fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// How the daemon's front door is set up (see `frontdoor.rs` for the checks themselves).
/// `Debug` never shows the token.
#[derive(Clone)]
pub struct FrontDoor {
    /// The control API's token (`token::daemon_token`: `ADF_DAEMON_TOKEN` or
    /// `$ADF_HOME/daemon-token`). Also what `/login` exchanges for the session cookie.
    pub token: String,
    /// Serve the control API without a token (`adf daemon --insecure-loopback`), for older
    /// token-less clients. Only on a loopback address; the Host and Origin checks stay on.
    pub insecure_loopback: bool,
    /// Extra host names the `Host` header may carry (`--allow-host`), e.g. a reverse proxy's.
    pub allowed_hosts: Vec<String>,
    /// Global in-flight byte budget for unauthenticated request bodies (the public inbox).
    pub public_body_budget: usize,
    /// The port agents' routes, files and WebSocket routes are served on, on the same host
    /// (`adf daemon --serve-port`; 0 picks a free one). `None`: the control port + 1, or a
    /// free port when the control port is 0. Never the control port: agent content must not
    /// share the Studio's origin.
    pub serve_port: Option<u16>,
}

impl std::fmt::Debug for FrontDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrontDoor")
            .field("token", &"<redacted>")
            .field("insecure_loopback", &self.insecure_loopback)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("public_body_budget", &self.public_body_budget)
            .field("serve_port", &self.serve_port)
            .finish()
    }
}

impl FrontDoor {
    /// A front door requiring `token`, with the default budget and no extra host names.
    pub fn new(token: impl Into<String>) -> Self {
        FrontDoor {
            token: token.into(),
            insecure_loopback: false,
            allowed_hosts: Vec::new(),
            public_body_budget: DEFAULT_PUBLIC_BODY_BUDGET,
            serve_port: None,
        }
    }

    /// The home's token (`$ADF_HOME/daemon-token`, created on first use); `from_env` (the value
    /// of `ADF_DAEMON_TOKEN`) wins when set.
    pub fn for_home(home: &RuntimeHome, from_env: Option<String>) -> Result<Self, ServerError> {
        Ok(Self::new(token::daemon_token(home, from_env)?))
    }

    /// The same, serving the control API without a token (loopback only).
    pub fn insecure_loopback(mut self) -> Self {
        self.insecure_loopback = true;
        self
    }
}

fn insecure_off_loopback(host: impl std::fmt::Display) -> ServerError {
    ServerError::FrontDoor(format!(
        "--insecure-loopback serves the control API without a token, so it is allowed only on a loopback address, not {host}"
    ))
}

/// A daemon serving HTTP in the background.
#[derive(Debug)]
pub struct RunningServer {
    /// The address the listener is bound to (the real port when port 0 was asked for).
    pub addr: SocketAddr,
    /// The address agents' content is served on (`crate::serving`).
    pub serve_addr: SocketAddr,
    /// The daemon the server serves; a clone shares its agents.
    pub daemon: Daemon,
    gate: Arc<Gate>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
    stop_serving: Option<oneshot::Sender<()>>,
    serving_task: JoinHandle<std::io::Result<()>>,
}

impl RunningServer {
    /// Binds `host:port` (port 0 picks a free one) and serves until [`shutdown`](Self::shutdown).
    pub async fn start(
        daemon: Daemon,
        host: &str,
        port: u16,
        front: FrontDoor,
    ) -> Result<Self, ServerError> {
        if front.token.trim().is_empty() {
            return Err(ServerError::FrontDoor(
                "the daemon needs a non-empty token".into(),
            ));
        }
        // Checked before binding too, so a refused opt-out never listens beyond loopback.
        if front.insecure_loopback && !is_loopback(host) {
            return Err(insecure_off_loopback(host));
        }
        let listener = TcpListener::bind((host, port)).await?;
        let addr = listener.local_addr()?;
        let serve_port = front
            .serve_port
            .unwrap_or_else(|| default_serve_port(port, addr.port()));
        if serve_port != 0 && serve_port == addr.port() {
            return Err(ServerError::FrontDoor(
                "agent content cannot be served on the control port: give --serve-port another port".into(),
            ));
        }
        let serving_listener = TcpListener::bind((addr.ip(), serve_port))
            .await
            .map_err(|e| {
                ServerError::FrontDoor(format!(
                    "cannot listen for agent content on {}:{serve_port}: {e} (choose another with --serve-port, 0 for any free port)",
                    addr.ip()
                ))
            })?;
        let serve_addr = serving_listener.local_addr()?;
        if front.insecure_loopback && !addr.ip().is_loopback() {
            return Err(insecure_off_loopback(addr.ip()));
        }
        // §5.6 rule 2: no agent may reach this API — in this process (the registry), nor in
        // any other that runs agent code from this home (the record).
        adf_egress::protect_control_api(addr);
        let record = daemon.home().daemon_record_path();
        if let Err(error) = adf_egress::control::write_record(&record, &[addr]) {
            tracing::warn!(%error, "cannot record the control API address; `adf code`, `adf tool` and `adf run` will not know to refuse it");
        }
        daemon.mesh().set_base_url(format!("http://{addr}"));
        daemon.mesh().set_serve_port(serve_addr.port());
        let budget = BodyBudget::new(front.public_body_budget);
        daemon.start_serving(budget.clone());
        // The serving listener applies the same Host rule for its own port.
        let serving_gate = Arc::new(Gate::new(
            front.token.clone(),
            false,
            serve_addr.ip(),
            serve_addr.port(),
            &front.allowed_hosts,
            budget.clone(),
        ));
        let gate = Arc::new(Gate::new(
            front.token,
            front.insecure_loopback,
            addr.ip(),
            addr.port(),
            &front.allowed_hosts,
            budget,
        ));
        let state = AppState {
            daemon: daemon.clone(),
            gate: Arc::clone(&gate),
        };
        let app = router(state);
        let (stop, stopped) = oneshot::channel::<()>();
        let signal_daemon = daemon.clone();
        let task = spawn_listener(listener, app, async move {
            let _ = stopped.await;
            // End the event streams, or graceful shutdown would wait on them forever.
            signal_daemon.begin_shutdown();
        });
        let serving_app = crate::serving::router(crate::serving::ServingDoor {
            daemon: daemon.clone(),
            gate: serving_gate,
        });
        let (stop_serving, serving_stopped) = oneshot::channel::<()>();
        let serving_task = spawn_listener(serving_listener, serving_app, async move {
            let _ = serving_stopped.await;
        });
        daemon.emit_daemon(
            "daemon.started",
            serde_json::json!({
                "host": host,
                "port": addr.port(),
                "servePort": serve_addr.port(),
                "settingsPath": crate::settings::Settings::in_home(daemon.home()).path().display().to_string(),
            }),
        );
        Ok(Self {
            addr,
            serve_addr,
            daemon,
            gate,
            stop: Some(stop),
            task,
            stop_serving: Some(stop_serving),
            serving_task,
        })
    }

    /// The base URL, e.g. `http://127.0.0.1:7385`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The base URL of agents' content, e.g. `http://127.0.0.1:7386` (agent `web`'s page is
    /// `<serve_url>/agents/web/`).
    pub fn serve_url(&self) -> String {
        format!("http://{}", self.serve_addr)
    }

    /// The URL that logs a browser in (`GET /login?token=…` sets the session cookie). It
    /// carries the token: print it to the owner only. A daemon bound to the unspecified
    /// address is reached through loopback.
    pub fn login_url(&self) -> String {
        let ip = self.addr.ip();
        let host = if ip.is_unspecified() {
            SocketAddr::new(
                match ip {
                    IpAddr::V4(_) => IpAddr::from([127, 0, 0, 1]),
                    IpAddr::V6(_) => IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
                },
                self.addr.port(),
            )
        } else {
            self.addr
        };
        format!("http://{host}/login?token={}", self.gate.token())
    }

    /// The in-flight budget for unauthenticated request bodies.
    pub fn public_body_budget(&self) -> &BodyBudget {
        self.gate.budget()
    }

    /// Stops accepting, finishes in-flight requests, then closes every agent file.
    pub async fn shutdown(mut self) -> Result<(), ServerError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(stop) = self.stop_serving.take() {
            let _ = stop.send(());
        }
        let served = self
            .task
            .await
            .map_err(|e| ServerError::Io(std::io::Error::other(e)))?;
        let served_agents = self
            .serving_task
            .await
            .map_err(|e| ServerError::Io(std::io::Error::other(e)))?;
        self.daemon.shutdown().await;
        let record = self.daemon.home().daemon_record_path();
        if let Err(error) = adf_egress::control::remove_record(&record) {
            tracing::warn!(%error, "cannot remove the control API record (a stale one is harmless)");
        }
        served?;
        served_agents?;
        Ok(())
    }
}

/// Where agent content goes when `--serve-port` is not given: the control port + 1, or any
/// free port when the control port was picked freely (`asked` 0) or is the last one.
fn default_serve_port(asked: u16, bound: u16) -> u16 {
    if asked == 0 {
        return 0;
    }
    bound.checked_add(1).unwrap_or(0)
}

/// Serves `app` on `listener` until `stop` resolves, then lets in-flight requests finish.
/// The peer address reaches handlers (`ConnectInfo`): it decides which visibility tiers a
/// mesh request may reach, and which origin a WebSocket's ALF frames come from.
fn spawn_listener(
    listener: TcpListener,
    app: axum::Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> JoinHandle<std::io::Result<()>> {
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(stop)
        .await
    })
}

/// Resolves when the process gets SIGINT or SIGTERM (Ctrl-C elsewhere).
pub async fn termination_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_token() {
        let front = FrontDoor::new("t0ken-value");
        assert!(!format!("{front:?}").contains("t0ken-value"));
        let gate = Gate::new(
            "t0ken-value".into(),
            false,
            IpAddr::from([127, 0, 0, 1]),
            1,
            &[],
            BodyBudget::new(1),
        );
        assert!(!format!("{gate:?}").contains("t0ken-value"));
    }

    #[test]
    fn agent_content_defaults_to_the_next_port_or_a_free_one() {
        assert_eq!(
            default_serve_port(DEFAULT_PORT, DEFAULT_PORT),
            DEFAULT_PORT + 1
        );
        assert_eq!(
            default_serve_port(0, 41_000),
            0,
            "a free control port, a free one"
        );
        assert_eq!(default_serve_port(u16::MAX, u16::MAX), 0);
    }

    #[test]
    fn loopback_hosts() {
        for host in ["127.0.0.1", "localhost", "::1", "[::1]", "127.1.2.3"] {
            assert!(is_loopback(host), "{host}");
        }
        for host in ["0.0.0.0", "192.168.1.2", "::", "example.com"] {
            assert!(!is_loopback(host), "{host}");
        }
    }
}
