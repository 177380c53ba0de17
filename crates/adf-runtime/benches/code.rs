//! Agent code through the whole runtime: an `adf.*` call from JavaScript through the runner's
//! channel, the tool pipeline (declaration, validation, access) and one SQLite transaction, and
//! back; plus a cold lambda run with `run_lambda` (authorization lookup, module load from
//! `adf_files`, fresh context, `main`, result).
//!
//! ```text
//! cargo bench -p adf-runtime --bench code -- [--calls N] [--runs R]
//! ```
//!
//! Each figure is the median of R runs (default 15) of N sequential calls (default 2000) inside
//! one `sys_code` execution, divided by N. Results go to BENCHMARKS.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test or bench crate: its shared modules are private to it, and docs are for library users.
#![allow(unreachable_pub, missing_docs)]

mod common;

use std::time::{Duration, Instant};

use adf_runtime::code::{self, Authorization, CodeEnv, LambdaRef, RunOptions};
use adf_runtime::tools::approval::DenyAll;
use adf_store::{AdfFile, CreateOptions, FileWrite};
use common::{arg, median};
use serde_json::json;

/// Runs `body` `calls` times in one `sys_code` execution; the time per iteration.
async fn per_call(file: &mut AdfFile, env: &CodeEnv, calls: usize, body: String) -> Duration {
    let code = format!("for (let i = 0; i < {calls}; i++) {{ {body} }}");
    let started = Instant::now();
    let run = code::run_inline(file, env, &code, false, &DenyAll, &RunOptions::default()).await;
    run.result.unwrap();
    started.elapsed() / u32::try_from(calls).unwrap()
}

fn main() {
    let calls = arg("--calls", 2000);
    let runs = arg("--runs", 15);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut file =
        AdfFile::create(dir.path().join("bench.adf"), &CreateOptions::default()).unwrap();
    file.file_write(
        adf_store::Caller::Owner,
        "lib/hello.ts",
        b"export function main({ n }: { n: number }) { return n + 1 }",
        &FileWrite::default(),
    )
    .unwrap();
    runtime.block_on(async {
        let env = CodeEnv::with_builtins().await.unwrap();
        let options = RunOptions::default();
        let cases = [
            (
                "adf.sys_get_meta (read: pipeline + one SELECT)",
                "await adf.sys_get_meta({ key: 'adf_name' })".to_owned(),
            ),
            (
                "adf.fs_read of a small file (read)",
                "await adf.fs_read({ path: 'lib/hello.ts' })".to_owned(),
            ),
            (
                "adf.sys_set_meta (write: pipeline + one transaction)",
                "await adf.sys_set_meta({ key: 'counter', value: String(i) })".to_owned(),
            ),
            (
                "adf.no_such_tool (refused in the pipeline, error thrown and caught)",
                "try { await adf.no_such_tool({}) } catch (e) {}".to_owned(),
            ),
        ];
        for (name, body) in cases {
            let mut samples = Vec::with_capacity(runs);
            for _ in 0..runs {
                samples.push(per_call(&mut file, &env, calls, body.clone()).await);
            }
            println!(
                "{name}: {:.1} µs per call",
                median(samples).as_secs_f64() * 1e6
            );
        }
        let lambda = LambdaRef::parse("lib/hello.ts").unwrap();
        let mut samples = Vec::with_capacity(runs * 20);
        for i in 0..runs * 20 {
            let started = Instant::now();
            let run = code::run_lambda(
                &mut file,
                &env,
                &lambda,
                json!({ "n": i }),
                Authorization::SourceFile,
                &DenyAll,
                &options,
            )
            .await;
            run.result.unwrap();
            samples.push(started.elapsed());
        }
        println!(
            "cold lambda through run_lambda: {:.3} ms",
            median(samples).as_secs_f64() * 1e3
        );
        let mut samples = Vec::with_capacity(runs);
        for _ in 0..runs {
            samples.push(
                per_call(
                    &mut file,
                    &env,
                    calls,
                    "await adf.sys_lambda({ source: 'lib/hello.ts', args: { n: i } })".to_owned(),
                )
                .await,
            );
        }
        println!(
            "nested adf.sys_lambda (cold context per call): {:.3} ms per call",
            median(samples).as_secs_f64() * 1e3
        );
    });
}
