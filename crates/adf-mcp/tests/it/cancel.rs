//! A call the turn gives up on reaches the server as `notifications/cancelled`. The turn is
//! shaped as the daemon's: a current-thread runtime of its own, the tool call raced against
//! the abort signal, the runtime dropped when the turn ends. The server is an rmcp server on
//! 127.0.0.1 whose `wait` tool blocks until it is cancelled and which records every
//! cancellation it is told of.

use std::time::Duration;

use adf_mcp::install::{InstallRequest, Kind};
use adf_runtime::tools::ToolCaller;
use adf_runtime::tools::approval::DenyAll;
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
    ContentBlock, ErrorData, ListToolsResult, PaginatedRequestParams, RequestId,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio::sync::mpsc;

use crate::common::*;

/// Fails the test instead of hanging it when an expected event never comes.
const NEVER: Duration = Duration::from_secs(60);

#[derive(Clone)]
struct WaitServer {
    /// The id of each `wait` call, sent when it starts blocking.
    started: mpsc::UnboundedSender<RequestId>,
    /// Every `notifications/cancelled` the server receives.
    cancelled: mpsc::UnboundedSender<CancelledNotificationParam>,
}

impl ServerHandler for WaitServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object"}).as_object().cloned().unwrap();
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("wait", "Blocks until cancelled.", schema.clone()),
            Tool::new("ping", "Answers at once.", schema),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != "wait" {
            return Ok(CallToolResult::success(vec![ContentBlock::text("done")]).into());
        }
        let _ = self.started.send(context.id.clone());
        context.ct.cancelled().await;
        Err(ErrorData::internal_error("cancelled", None))
    }

    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        let _ = self.cancelled.send(notification);
    }
}

struct Probe {
    url: String,
    started: mpsc::UnboundedReceiver<RequestId>,
    cancelled: mpsc::UnboundedReceiver<CancelledNotificationParam>,
}

async fn serve() -> Probe {
    let (started_tx, started) = mpsc::unbounded_channel();
    let (cancelled_tx, cancelled) = mpsc::unbounded_channel();
    let server = WaitServer {
        started: started_tx,
        cancelled: cancelled_tx,
    };
    let service: StreamableHttpService<WaitServer, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(server.clone()),
            Default::default(),
            StreamableHttpServerConfig::default().with_sse_keep_alive(None),
        );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Probe {
        url: format!("http://{addr}/mcp"),
        started,
        cancelled,
    }
}

/// Runs one tool call as a daemon turn does: on its own thread and current-thread runtime,
/// raced against `abort`; the runtime is dropped when the turn ends. `None`: aborted.
fn turn(
    world: &World,
    path: &std::path::Path,
    tool: &'static str,
    abort: tokio::sync::oneshot::Receiver<()>,
) -> std::thread::JoinHandle<Option<serde_json::Value>> {
    let registry = world.registry();
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut file = adf_store::AdfFile::open(&path).unwrap();
        let finished = runtime.block_on(async {
            tokio::select! {
                biased;
                _ = abort => None,
                out = call(&registry, &mut file, &ToolCaller::Owner, tool, json!({}), &DenyAll) => Some(out.unwrap()),
            }
        });
        drop(runtime);
        finished
    })
}

/// Issue 13 (a): a call dropped by the turn's abort is cancelled at the server, and the
/// session the turn started outlives the turn's runtime (the next turn's call reuses it).
#[test]
fn mcp_call_aborted_by_the_turn_sends_notifications_cancelled_to_the_server() {
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut probe = server_runtime.block_on(serve());
    let world = World::new();
    let path = world.path("waiter");
    {
        let mut file = world.agent("waiter");
        let request = InstallRequest {
            kind: Kind::Http,
            url: Some(probe.url.clone()),
            name: Some("slow".into()),
            ..InstallRequest::default()
        };
        let (_, report) = server_runtime
            .block_on(world.manager().add(&mut file, &request))
            .unwrap();
        let mut added = report.added.clone();
        added.sort();
        assert_eq!(
            added,
            vec!["mcp_slow_ping".to_owned(), "mcp_slow_wait".to_owned()]
        );
        file.close().unwrap();
    }
    // The turn starts the server itself, as in the daemon.
    assert!(server_runtime.block_on(world.supervisor.stop_server(&path, "slow")));
    let starts_before = world.supervisor.starts();

    let (abort, aborted) = tokio::sync::oneshot::channel::<()>();
    let first = turn(&world, &path, "mcp_slow_wait", aborted);
    let call_id = server_runtime.block_on(async {
        tokio::time::timeout(NEVER, probe.started.recv())
            .await
            .expect("the call never reached the server")
            .unwrap()
    });
    abort.send(()).unwrap();
    assert_eq!(first.join().unwrap(), None, "the turn ended by its abort");

    let cancelled = server_runtime.block_on(async {
        tokio::time::timeout(NEVER, probe.cancelled.recv())
            .await
            .expect("the server was never told the call was cancelled")
            .unwrap()
    });
    assert_eq!(cancelled.request_id, Some(call_id));
    assert_eq!(
        cancelled.reason.as_deref(),
        Some("request abandoned by the caller")
    );
    assert_eq!(world.supervisor.starts(), starts_before + 1);

    // The next turn's call goes to the same session: it did not die with the first turn.
    let (_keep, never_aborted) = tokio::sync::oneshot::channel::<()>();
    let second = turn(&world, &path, "mcp_slow_ping", never_aborted);
    assert_eq!(second.join().unwrap(), Some(json!("done")));
    assert_eq!(
        world.supervisor.starts(),
        starts_before + 1,
        "the second turn reused the session the first one started"
    );
}
