//! The overhead of one MCP tool call through the tool pipeline over a stdio server, beside the
//! server's own round trip and a built-in tool's pipeline call.
//!
//! ```text
//! cargo bench -p adf-mcp --bench call
//! ```
//!
//! - `builtin_fs_read`: `ToolRegistry::call` of `fs_read` (declaration, validation, access,
//!   one transaction).
//! - `mcp_server_round_trip`: `Supervisor::call` alone — JSON-RPC over the child's pipes and the
//!   (Python, standard library) server's own work.
//! - `mcp_pipeline_call`: the same call as the model's or `adf tool`'s: pipeline, `prepare` in
//!   its transaction, the detached call, its log rows. Overhead = this − the round trip.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(unreachable_pub, missing_docs)]

use std::path::Path;
use std::sync::Arc;

use adf_mcp::connect::Launch;
use adf_mcp::install::{InstallRequest, Kind};
use adf_mcp::manage::Manager;
use adf_mcp::{McpSource, ServerSpec, Supervisor};
use adf_runtime::home::RuntimeHome;
use adf_runtime::tools::approval::DenyAll;
use adf_runtime::tools::{CallOutcome, ToolCaller, ToolRegistry};
use adf_store::{AdfFile, CreateOptions};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let home = RuntimeHome::at(dir.path().join("home"));
    let supervisor = Supervisor::default();
    let mut file =
        AdfFile::create(dir.path().join("bench.adf"), &CreateOptions::default()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/servers/misbehaving.py");
    let manager = Manager {
        home: home.clone(),
        supervisor: supervisor.clone(),
    };
    let request = InstallRequest {
        kind: Kind::Custom,
        package: Some("python3".into()),
        name: Some("bench".into()),
        args: vec![script.display().to_string()],
        ..InstallRequest::default()
    };
    runtime.block_on(manager.add(&mut file, &request)).unwrap();
    let mut registry = ToolRegistry::with_builtins();
    registry.add_source(Arc::new(McpSource::new(
        supervisor.clone(),
        Some(home.clone()),
    )));
    let config = file.config().unwrap();
    let spec = ServerSpec::parse(&config["mcp"]["servers"][0]).unwrap();
    let launch = Launch {
        file: file.path().to_path_buf(),
        credentials: Default::default(),
        egress: adf_egress::Policy::default(),
        packages: None,
    };
    let args = json!({"text": "hi"}).as_object().cloned().unwrap();

    c.bench_function("builtin_fs_read", |b| {
        b.iter(|| {
            registry
                .call(
                    &mut file,
                    &ToolCaller::Owner,
                    "fs_read",
                    json!({"path": "mind.md"}),
                    &DenyAll,
                )
                .unwrap()
        })
    });
    c.bench_function("mcp_server_round_trip", |b| {
        b.iter(|| {
            runtime
                .block_on(supervisor.call(&spec, &launch, "echo", args.clone()))
                .unwrap()
        })
    });
    c.bench_function("mcp_pipeline_call", |b| {
        b.iter(|| {
            runtime.block_on(async {
                match registry
                    .call(
                        &mut file,
                        &ToolCaller::Owner,
                        "mcp_bench_echo",
                        json!({"text": "hi"}),
                        &DenyAll,
                    )
                    .unwrap()
                {
                    CallOutcome::Deferred(call) => registry
                        .run_detached(&mut file, &ToolCaller::Owner, &call)
                        .await
                        .unwrap(),
                    other => other.into_value(),
                }
            })
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
