//! A Streamable HTTP server (rmcp) on 127.0.0.1, reached through the agent's egress policy,
//! with its bearer token from `adf_identity`.

use std::sync::{Arc, Mutex};

use adf_mcp::install::{InstallRequest, Kind};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, schemars, tool, tool_handler, tool_router};
use serde_json::json;

use crate::common::*;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct SumRequest {
    a: i64,
    b: i64,
}

#[derive(Debug, Clone)]
struct SumServer {
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl SumServer {
    #[tool(description = "Sum two numbers")]
    fn sum(&self, Parameters(SumRequest { a, b }): Parameters<SumRequest>) -> String {
        (a + b).to_string()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for SumServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// Serves the sum server on 127.0.0.1:0, recording each request's Authorization header.
async fn serve() -> (String, Arc<Mutex<Vec<String>>>) {
    let service: StreamableHttpService<SumServer, LocalSessionManager> = StreamableHttpService::new(
        || {
            Ok(SumServer {
                tool_router: SumServer::tool_router(),
            })
        },
        Default::default(),
        StreamableHttpServerConfig::default().with_sse_keep_alive(None),
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let router =
        axum::Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn(
                move |request: axum::extract::Request, next: axum::middleware::Next| {
                    let record = record.clone();
                    async move {
                        if let Some(value) = request
                            .headers()
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                        {
                            record.lock().unwrap().push(value.to_owned());
                        }
                        next.run(request).await
                    }
                },
            ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (format!("http://{addr}/mcp"), seen)
}

#[test]
fn streamable_http_server_on_loopback_with_a_bearer_token_from_identity() {
    let runtime = runtime();
    runtime.block_on(async {
        let (url, seen) = serve().await;
        let world = World::new();
        let mut file = world.agent("h");
        // The token is sealed in adf_identity as `mcp:<server>:<KEY>` (IDN-38).
        seal_credential(&world, &mut file, "mcp:sum:SUM_TOKEN", b"tok-123456");
        let request = InstallRequest {
            kind: Kind::Http,
            url: Some(url),
            name: Some("sum".into()),
            bearer_token_env_var: Some("SUM_TOKEN".into()),
            ..InstallRequest::default()
        };
        let (name, report) = world.manager().add(&mut file, &request).await.unwrap();
        assert_eq!(
            (name.as_str(), report.added.clone()),
            ("sum", vec!["mcp_sum_sum".to_owned()])
        );
        let registry = world.registry();
        let out = owner_call(
            &registry,
            &mut file,
            "mcp_sum_sum",
            json!({"a": 2, "b": 40}),
        )
        .await;
        assert_eq!(out.unwrap(), json!("42"));
        let seen = seen.lock().unwrap().clone();
        assert!(
            !seen.is_empty() && seen.iter().all(|h| h == "Bearer tok-123456"),
            "{seen:?}"
        );
        // The config holds the variable's name, never its value.
        assert!(!file.config().unwrap().to_string().contains("tok-123456"));
    });
}

#[test]
fn an_http_server_on_a_link_local_address_is_refused_by_the_egress_policy() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let world = World::new();
        let mut file = world.agent("r");
        // Refused by the policy before any connection (rule 1): nothing is dialled.
        let request = InstallRequest {
            kind: Kind::Http,
            url: Some("http://169.254.169.254/mcp".into()),
            name: Some("meta".into()),
            ..InstallRequest::default()
        };
        let error = world.manager().add(&mut file, &request).await.unwrap_err();
        assert!(error.to_string().contains("link-local"), "{error}");
        assert!(
            file.config().unwrap()["mcp"]["servers"]
                .as_array()
                .unwrap()
                .is_empty()
        );
    });
}
