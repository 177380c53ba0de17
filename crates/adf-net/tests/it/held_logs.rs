//! The log rows of a busy agent's read-only route requests wait in memory after their answers
//! and reach the file with no further request: when they are old enough, or at once when the
//! agent is released, before `Serving::wait_released` returns (SRV-05, AUD-23). Real HTTP on 127.0.0.1 to the seam's router, a real
//! agent file and its warm route lambda; the host is a stub that reports `lambda_ran` calls.
//! Every wait is for an event under a generous safety timeout.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::json;
use tokio::sync::mpsc;

use adf_net::{
    AgentDirectory, BodyHold, BodyReader, BodyRefused, ServedAgent, Serving, ServingLimits,
};
use adf_runtime::tools::ToolRegistry;
use adf_store::{AdfFile, Caller, ConfigAction, CreateOptions, FileWrite};

/// Only a hung test waits this long; no assertion depends on it.
const SAFETY: Duration = Duration::from_secs(20);
const ROUTES: &str = "export async function hello(req) { return { status: 200, body: 'hi' }; }";

/// The one agent `web`; every `lambda_ran` call is reported on a channel.
#[derive(Debug)]
struct OneAgent {
    agent: ServedAgent,
    ran: mpsc::UnboundedSender<()>,
}

impl AgentDirectory for OneAgent {
    fn find(&self, key: &str) -> Option<ServedAgent> {
        (key == "web").then(|| self.agent.clone())
    }
    fn lambda_ran(&self, _agent: &ServedAgent, _through: Option<adf_net::RowsThrough>) {
        let _ = self.ran.send(());
    }
}

/// Bodies read whole, with no budget beyond the limit.
#[derive(Debug)]
struct WholeBodies;

impl BodyReader for WholeBodies {
    fn read(
        &self,
        _headers: &axum::http::HeaderMap,
        body: axum::body::Body,
        limit: usize,
    ) -> BoxFuture<'static, Result<(Vec<u8>, BodyHold), BodyRefused>> {
        Box::pin(async move {
            let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| {
                adf_net::error_response(adf_net::ErrorCode::BodyTooLarge, "too large")
            })?;
            Ok((bytes.to_vec(), Box::new(()) as BodyHold))
        })
    }
}

/// A served agent `web` with the warm route `GET /hello`, behind the seam's router on an
/// ephemeral port: its base URL, its serving state, the `lambda_ran` reports.
struct Served {
    url: String,
    serving: Arc<Serving>,
    agent: ServedAgent,
    ran: mpsc::UnboundedReceiver<()>,
    _dir: tempfile::TempDir,
}

async fn serve(limits: ServingLimits) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let path = agent_file(dir.path());
    let agent = ServedAgent {
        id: "web-id".to_owned(),
        path: std::fs::canonicalize(&path).unwrap(),
    };
    let (ran_tx, ran) = mpsc::unbounded_channel();
    let serving = Serving::new(
        Arc::new(OneAgent {
            agent: agent.clone(),
            ran: ran_tx,
        }),
        Arc::new(WholeBodies),
        Arc::new(ToolRegistry::with_builtins()),
        limits,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = adf_net::router(Arc::clone(&serving));
    tokio::spawn(async move { axum::serve(listener, router).await });
    Served {
        url,
        serving,
        agent,
        ran,
        _dir: dir,
    }
}

fn agent_file(dir: &Path) -> PathBuf {
    let path = dir.join("web.adf");
    let mut file = AdfFile::create(&path, &CreateOptions::default()).unwrap();
    file.file_write(
        Caller::Owner,
        "lib/routes.ts",
        ROUTES.as_bytes(),
        &FileWrite::default(),
    )
    .unwrap();
    let routes = json!([
        { "method": "GET", "path": "/hello", "lambda": "lib/routes.ts:hello", "warm": true }
    ]);
    for (key, value) in [("handle", json!("web")), ("serving.api", routes)] {
        file.config_set_path(Caller::Owner, key, ConfigAction::Set, value)
            .unwrap();
    }
    file.close().unwrap();
    path
}

impl Served {
    async fn hello(&self) {
        let client = adf_egress::service_client(adf_egress::ClientOptions::default()).unwrap();
        let response = tokio::time::timeout(
            SAFETY,
            client.get(format!("{}/agents/web/hello", self.url)).send(),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(response.status().as_u16(), 200);
    }

    /// The `api_response` rows in the file now.
    fn responses_logged(&self) -> usize {
        let file = AdfFile::open_guest(&self.agent.path).unwrap();
        let logs = adf_store::test_support::tables(&file).logs().unwrap();
        logs.iter()
            .filter(|l| l.origin.as_deref() == Some("serving"))
            .filter(|l| l.event.as_deref() == Some("api_response"))
            .count()
    }

    /// Waits, `lambda_ran` report by report, until `count` responses are logged.
    async fn until_logged(&mut self, count: usize) {
        while self.responses_logged() < count {
            tokio::time::timeout(SAFETY, self.ran.recv())
                .await
                .expect("the held rows were written")
                .expect("the host stub lives");
        }
        assert_eq!(self.responses_logged(), count);
    }
}

/// Limits under which every agent that has run two batches is busy.
fn always_busy(held_logs_max_age: Duration) -> ServingLimits {
    ServingLimits {
        held_logs_max_age,
        busy_batch_gap: Duration::from_secs(3_600),
        ..ServingLimits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_05_a_busy_agents_held_log_rows_are_written_at_release_before_shutdown_goes_on() {
    let served = serve(always_busy(Duration::from_secs(3_600))).await;
    served.hello().await;
    assert_eq!(
        served.responses_logged(),
        1,
        "an agent not yet busy writes its rows before the answer"
    );
    served.hello().await;
    served.hello().await;
    assert_eq!(
        served.responses_logged(),
        1,
        "a busy agent's rows wait (for an hour, under these limits)"
    );
    // A release wakes the drain to write them; a shutdown waits for that.
    served.serving.release(&served.agent.id);
    served.serving.wait_released(SAFETY).await;
    assert_eq!(served.responses_logged(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn srv_05_a_busy_agents_held_log_rows_are_written_when_old_enough_without_another_request() {
    let mut served = serve(always_busy(Duration::from_millis(50))).await;
    for _ in 0..3 {
        served.hello().await;
    }
    served.until_logged(3).await;
}
