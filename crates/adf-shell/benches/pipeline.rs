//! `cat notes.md | grep x | sort | uniq -c | head` over a 1 MB file, through the whole tool
//! pipeline (the model's caller, `fs_read` access and audit), as the speed target.
//! Run: `CARGO_TARGET_DIR=… cargo bench -p adf-shell --bench pipeline`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use adf_runtime::tools::approval::DenyAll;
use adf_runtime::tools::{CallOutcome, ToolCaller, ToolRegistry};
use adf_store::{AdfFile, CreateOptions};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};

fn notes() -> String {
    let words = [
        "alpha", "box", "xenon", "delta", "taxi", "echo", "fox", "golf", "hex", "index",
    ];
    let mut text = String::new();
    let mut n: u64 = 7;
    while text.len() < 1_000_000 {
        n = n
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let a = words[(n >> 33) as usize % words.len()];
        let b = words[(n >> 45) as usize % words.len()];
        text.push_str(&format!("{a} {b} line {}\n", (n >> 50) % 100));
    }
    text
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut file =
        AdfFile::create(dir.path().join("bench.adf"), &CreateOptions::default()).unwrap();
    let mut registry = ToolRegistry::with_builtins();
    registry.register(adf_shell::tool());
    file.config_set_path(
        adf_store::Caller::Owner,
        "tools.adf_shell.enabled",
        adf_store::ConfigAction::Set,
        json!(true),
    )
    .unwrap();
    registry
        .call(
            &mut file,
            &ToolCaller::Owner,
            "fs_write",
            json!({ "mode": "write", "path": "notes.md", "content": notes() }),
            &DenyAll,
        )
        .unwrap();
    let caller = ToolCaller::Model {
        loop_name: "main".into(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut run = |command: &str| -> Value {
        match registry
            .call(
                &mut file,
                &caller,
                "adf_shell",
                json!({ "command": command }),
                &DenyAll,
            )
            .unwrap()
        {
            // The executor's driver; the line runs no code, so no sandbox opens.
            CallOutcome::Deferred(call) => runtime
                .block_on(adf_runtime::code::drive_deferred(
                    &mut file,
                    &registry,
                    &caller,
                    &call,
                    async {
                        Err::<adf_runtime::code::CodeEnv, _>(adf_runtime::tools::ToolError::new(
                            adf_runtime::tools::ErrorCode::InternalError,
                            "the benchmark runs no code",
                        ))
                    },
                    &DenyAll,
                    &adf_runtime::code::RunOptions::default(),
                ))
                .value
                .unwrap(),
            other => other.into_value(),
        }
    };
    let line = "cat notes.md | grep x | sort | uniq -c | head";
    let first = run(line);
    assert_eq!(first["exit_code"], 0, "{first}");
    c.bench_function("cat 1MB | grep | sort | uniq -c | head", |b| {
        b.iter(|| run(line))
    });
    // The same line on the calling thread through the synchronous RegistryHost: the
    // difference to the line above is the hosted call's thread and channel round trips.
    c.bench_function("same line, interpreter on the calling thread", |b| {
        b.iter(|| {
            let mut host = adf_shell::RegistryHost::new(&mut file, &registry, &caller, &DenyAll);
            let outcome = adf_shell::run_line(&mut host, line);
            assert_eq!(outcome.exit_code, 0);
            outcome
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
