//! Binding, the bearer-token rule, and graceful shutdown.
//!
//! Shutdown order: stop accepting, end SSE streams (the daemon's shutdown signal), let
//! in-flight requests finish, then close every agent file cleanly.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::api::{AppState, router};
use crate::daemon::Daemon;
use crate::error::ServerError;

/// The default address, as in the reference.
pub const DEFAULT_HOST: &str = "127.0.0.1";
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

/// The token a daemon on `host` requires: `ADF_DAEMON_TOKEN` when set (on any address, as
/// in the reference), else a fresh random one when `host` is not loopback, else none.
/// The flag says the token was generated and must be shown to the user.
pub fn choose_token(host: &str, from_env: Option<String>) -> Option<(String, bool)> {
    if let Some(token) = from_env.filter(|t| !t.is_empty()) {
        return Some((token, false));
    }
    if is_loopback(host) {
        return None;
    }
    let bytes: [u8; 24] = rand::random();
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Some((token, true))
}

/// A daemon serving HTTP in the background.
#[derive(Debug)]
pub struct RunningServer {
    pub addr: SocketAddr,
    pub daemon: Daemon,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl RunningServer {
    /// Binds `host:port` (port 0 picks a free one) and serves until [`shutdown`](Self::shutdown).
    pub async fn start(
        daemon: Daemon,
        host: &str,
        port: u16,
        token: Option<String>,
    ) -> Result<Self, ServerError> {
        let listener = TcpListener::bind((host, port)).await?;
        let addr = listener.local_addr()?;
        // §5.6 rule 2: no agent may reach this API — in this process (the registry), nor in
        // any other that runs agent code from this home (the record).
        adf_egress::protect_control_api(addr);
        let record = daemon.home().daemon_record_path();
        if let Err(error) = adf_egress::control::write_record(&record, &[addr]) {
            tracing::warn!(%error, "cannot record the control API address; `adf code`, `adf tool` and `adf run` will not know to refuse it");
        }
        daemon.mesh().set_base_url(format!("http://{addr}"));
        let state = AppState {
            daemon: daemon.clone(),
            token: token.map(Arc::from),
        };
        let app = router(state);
        let (stop, stopped) = oneshot::channel::<()>();
        let signal_daemon = daemon.clone();
        let task = tokio::spawn(async move {
            // The peer address decides which visibility tiers a mesh request may reach.
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
                // End the event streams, or graceful shutdown would wait on them forever.
                signal_daemon.begin_shutdown();
            })
            .await
        });
        daemon.emit_daemon(
            "daemon.started",
            serde_json::json!({
                "host": host,
                "port": addr.port(),
                "settingsPath": crate::settings::Settings::in_home(daemon.home()).path().display().to_string(),
            }),
        );
        Ok(Self {
            addr,
            daemon,
            stop: Some(stop),
            task,
        })
    }

    /// The base URL, e.g. `http://127.0.0.1:7385`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, finishes in-flight requests, then closes every agent file.
    pub async fn shutdown(mut self) -> Result<(), ServerError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let served = self
            .task
            .await
            .map_err(|e| ServerError::Io(std::io::Error::other(e)))?;
        self.daemon.shutdown().await;
        let record = self.daemon.home().daemon_record_path();
        if let Err(error) = adf_egress::control::remove_record(&record) {
            tracing::warn!(%error, "cannot remove the control API record (a stale one is harmless)");
        }
        served?;
        Ok(())
    }
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
    fn loopback_hosts() {
        for host in ["127.0.0.1", "localhost", "::1", "[::1]", "127.1.2.3"] {
            assert!(is_loopback(host), "{host}");
        }
        for host in ["0.0.0.0", "192.168.1.2", "::", "example.com"] {
            assert!(!is_loopback(host), "{host}");
        }
    }

    #[test]
    fn srv_token_required_off_loopback() {
        assert_eq!(choose_token("127.0.0.1", None), None);
        let (token, generated) = choose_token("0.0.0.0", None).unwrap();
        assert!(generated && token.len() == 48);
        assert_eq!(
            choose_token("0.0.0.0", Some("t0k".into())),
            Some(("t0k".into(), false))
        );
        assert_eq!(
            choose_token("127.0.0.1", Some("t0k".into())),
            Some(("t0k".into(), false))
        );
    }
}
