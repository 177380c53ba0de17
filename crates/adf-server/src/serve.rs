//! Binding, the front door's settings ([`FrontDoor`]: the token every bind requires, the
//! `--insecure-loopback` opt-out, extra host names, the public body budget, the connection
//! limits), and graceful shutdown. Connections are served by `connections::serve`.
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
use crate::budget::BodyBudget;
use crate::connections::{self, ConnectionLimits, ConnectionSlots};
use crate::daemon::Daemon;
use crate::error::ServerError;
use crate::frontdoor::{DEFAULT_PUBLIC_BODY_BUDGET, Gate};
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
    /// `$ADF_HOME/daemon-token`), sent as `Authorization: Bearer`. Browsers never get it: they
    /// log in with one-time codes (`sessions.rs`).
    pub token: String,
    /// Serve the control API without a token (`adf daemon --insecure-loopback`), for older
    /// token-less clients. Only on a loopback address; the Host and Origin checks stay on.
    pub insecure_loopback: bool,
    /// Extra host names the `Host` header may carry (`--allow-host`), e.g. a reverse proxy's.
    pub allowed_hosts: Vec<String>,
    /// Global in-flight byte budget for unauthenticated request bodies (the public inbox).
    pub public_body_budget: usize,
    /// The header-read timeout and the connection cap (`connections.rs`).
    pub connections: ConnectionLimits,
    /// The port agents' routes, files and WebSocket routes are served on, on the same host
    /// (`adf daemon --serve-port`; 0 picks a free one). `None`: the control port + 1, or a
    /// free port when the control port is 0. Never the control port: agent content must not
    /// share the Studio's origin.
    pub serve_port: Option<u16>,
    /// Announce this daemon's `lan`/`public` agents over mDNS and discover LAN peers
    /// (`adf daemon --lan`, `crate::lan`); needs a non-loopback listener.
    pub lan: bool,
}

impl std::fmt::Debug for FrontDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrontDoor")
            .field("token", &"<redacted>")
            .field("insecure_loopback", &self.insecure_loopback)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("public_body_budget", &self.public_body_budget)
            .field("connections", &self.connections)
            .field("serve_port", &self.serve_port)
            .field("lan", &self.lan)
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
            connections: ConnectionLimits::default(),
            serve_port: None,
            lan: false,
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
    slots: ConnectionSlots,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    stop_serving: Option<oneshot::Sender<()>>,
    serving_task: JoinHandle<()>,
    /// The mDNS announcement and browse (`--lan`); dropping it withdraws the announcement.
    lan: Option<crate::lan::LanDiscovery>,
}

/// The control listener on `host:port` and the agent-content listener on the serve port, with
/// their addresses.
async fn bind_listeners(
    host: &str,
    port: u16,
    front: &FrontDoor,
) -> Result<(TcpListener, SocketAddr, TcpListener, SocketAddr), ServerError> {
    // Before the first connection: the cap below is derived from the raised limit.
    match connections::raise_open_file_limit() {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(error) => tracing::warn!(%error, "cannot raise the open-file limit"),
    }
    let listener = TcpListener::bind((host, port)).await?;
    let addr = listener.local_addr()?;
    let serve_port = front
        .serve_port
        .unwrap_or_else(|| default_serve_port(port, addr.port()));
    if serve_port != 0 && serve_port == addr.port() {
        return Err(ServerError::FrontDoor(
            "agent content cannot be served on the control port: give --serve-port another port"
                .into(),
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
    Ok((listener, addr, serving_listener, serve_addr))
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
        let (listener, addr, serving_listener, serve_addr) =
            bind_listeners(host, port, &front).await?;
        // §5.6 rule 2: no agent may reach this API — in this process (the registry), in any
        // other that runs agent code from this home (the home's record), nor from any other
        // install or user on this machine (the machine-wide record). Only control API
        // addresses are registered: a listener serving agent content stays reachable.
        let registration =
            adf_egress::control::register(&daemon.home().daemon_record_path(), &[addr]);
        daemon.mesh().set_base_url(format!("http://{addr}"));
        daemon.mesh().set_serve_port(serve_addr.port());
        // Before serving, so a refused `--lan` never listens at all.
        let lan = if front.lan {
            Some(crate::lan::LanDiscovery::start(daemon.mesh_arc(), addr)?)
        } else {
            None
        };
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
        let limits = front.connections;
        // One cap for both listeners: it guards the process's open files.
        let slots = ConnectionSlots::new(limits.cap());
        // The peer address (each request's `ConnectInfo`) decides which visibility tiers a
        // mesh request may reach.
        let served = connections::serve(listener, app, limits, slots.clone(), async move {
            let _ = stopped.await;
            // End the event streams, or graceful shutdown would wait on them forever.
            signal_daemon.begin_shutdown();
        });
        // Rule 2's registration lives exactly as long as the task that accepts on the control
        // listener: released when the listener is closed (shutdown), or dropped with the task
        // (a server dropped without shutdown, whose runtime ends) — never while it accepts,
        // and never after, when the kernel may give the port to an ordinary listener.
        let task = tokio::spawn(async move {
            served.await;
            registration.release();
        });
        let serving_app = serving_router(ServingDoor {
            daemon: daemon.clone(),
            gate: serving_gate,
        });
        let (stop_serving, serving_stopped) = oneshot::channel::<()>();
        let serving_task = tokio::spawn(connections::serve(
            serving_listener,
            serving_app,
            limits,
            slots.clone(),
            async move {
                let _ = serving_stopped.await;
            },
        ));
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
            slots,
            stop: Some(stop),
            task,
            stop_serving: Some(stop_serving),
            serving_task,
            lan,
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

    /// A fresh one-time login link (`GET /login?code=…` opens a browser session): the code
    /// is spent by its first use and expires after `sessions::LOGIN_CODE_TTL`. It never
    /// carries the token. A daemon bound to the unspecified address is reached through
    /// loopback.
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
        let code = self.gate.sessions().issue_code();
        format!("http://{host}/login?code={}", code.code)
    }

    /// The browser sessions and login codes (`sessions.rs`).
    pub fn sessions(&self) -> &crate::sessions::Sessions {
        self.gate.sessions()
    }

    /// The connection cap's slots: how many connections are open, out of how many.
    pub fn connections(&self) -> &ConnectionSlots {
        &self.slots
    }

    /// The in-flight budget for unauthenticated request bodies.
    pub fn public_body_budget(&self) -> &BodyBudget {
        self.gate.budget()
    }

    /// Stops accepting, finishes in-flight requests, then closes every agent file.
    pub async fn shutdown(mut self) -> Result<(), ServerError> {
        // Peers forget this daemon first: nothing should be sent to a daemon going away.
        drop(self.lan.take());
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(stop) = self.stop_serving.take() {
            let _ = stop.send(());
        }
        let served = self
            .task
            .await
            .map_err(|e| ServerError::Io(std::io::Error::other(e)));
        let served_agents = self
            .serving_task
            .await
            .map_err(|e| ServerError::Io(std::io::Error::other(e)));
        self.daemon.shutdown().await;
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

/// The serving listener's state: the daemon, and the gate whose `Host` rule it applies
/// (built for the serving port).
#[derive(Clone)]
struct ServingDoor {
    daemon: crate::daemon::Daemon,
    gate: Arc<crate::frontdoor::Gate>,
}

/// The serving listener's app: every request goes to [`serve_agent_content`].
fn serving_router(door: ServingDoor) -> axum::Router {
    axum::Router::new()
        .fallback(serve_agent_content)
        .with_state(door)
}

/// One request on the serving listener: a served path of a loaded agent, else 404. No
/// token is asked (agent content is public) and none is looked at: adf-net withholds
/// `Cookie` and `Authorization` from agent code.
async fn serve_agent_content(
    axum::extract::State(door): axum::extract::State<ServingDoor>,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::http::StatusCode;
    if !crate::serving::authority_of(&request).is_some_and(|a| door.gate.host_allowed(&a)) {
        return crate::serving::json_error(
            StatusCode::MISDIRECTED_REQUEST,
            "the Host header does not name this daemon (start it with --allow-host NAME to accept a name)",
        );
    }
    if !crate::serving::is_served(request.method(), request.uri().path()) {
        return crate::serving::json_error(
            StatusCode::NOT_FOUND,
            "this port serves agents' routes and files only (/agents/{handle}/...); the control API, the Studio and the mesh endpoints (inbox, card, health) are on the daemon's control port",
        );
    }
    match door.daemon.serving() {
        Some(serving) => serving.handle(request).await,
        None => {
            crate::serving::json_error(StatusCode::SERVICE_UNAVAILABLE, "the daemon is not serving")
        }
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
