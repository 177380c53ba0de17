//! Sandbox latency: cold lambda (fresh context, module, `main`, return), warm lambda, inline
//! code in the persistent context, and the round trip of one `adf.*` call.
//!
//! `cargo bench -p adf-sandbox`
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test or bench crate: its shared modules are private to it, and docs are for library users.
#![allow(unreachable_pub, missing_docs)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use adf_sandbox::{Entry, Host, HostError, Request, Sandbox, SandboxConfig};
use criterion::{Criterion, criterion_group, criterion_main};
use futures::future::BoxFuture;
use serde_json::{Value, json};

struct BenchHost {
    files: HashMap<String, String>,
}

impl Host for BenchHost {
    fn call(&self, _method: &str, args: Value) -> BoxFuture<'static, Result<Value, HostError>> {
        Box::pin(async move { Ok(args) })
    }
    fn load_module(&self, path: &str) -> BoxFuture<'static, Option<String>> {
        let s = self.files.get(path).cloned();
        Box::pin(async move { s })
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sb = rt.block_on(Sandbox::new(SandboxConfig::default())).unwrap();
    let mut files = HashMap::new();
    files.insert(
        "lib/plain.ts".to_string(),
        "export function main({ n }: { n: number }): number { return n + 1; }\n".to_string(),
    );
    files.insert(
        "lib/one.ts".to_string(),
        "export async function main({ n }: { n: number }) { const r = await adf.echo({ n }); return r.n + 1; }\n".to_string(),
    );
    files.insert(
        "lib/loop.js".to_string(),
        "export async function main({ n }) { for (let i = 0; i < n; i++) await adf.echo({ i }); return n; }\n".to_string(),
    );
    let host: Arc<dyn Host> = Arc::new(BenchHost { files });
    let run = |req: Request| {
        let out = rt.block_on(sb.run(req, host.clone())).unwrap();
        std::hint::black_box(out);
    };
    let lambda = |src: &str| {
        Request::new(Entry::lambda(src))
            .args(json!({"n": 1}))
            .timeout(Duration::from_secs(10))
    };

    // Warm the transpile cache so the figures are the per-call cost, as in a running agent.
    run(lambda("lib/plain.ts"));
    run(lambda("lib/one.ts"));

    let mut g = c.benchmark_group("sandbox");
    g.bench_function("cold_lambda", |b| b.iter(|| run(lambda("lib/plain.ts"))));
    g.bench_function("cold_lambda_one_adf_call", |b| {
        b.iter(|| run(lambda("lib/one.ts")))
    });
    g.bench_function("warm_lambda_one_adf_call", |b| {
        b.iter(|| run(lambda("lib/one.ts").warm(true)))
    });
    g.bench_function("inline_persistent", |b| {
        b.iter(|| run(Request::new(Entry::inline("return args.n + 1;")).args(json!({"n": 1}))))
    });
    // One adf.* round trip: a lambda making `iters` sequential calls, minus nothing (the
    // lambda's own overhead is amortised over the loop).
    g.bench_function("adf_call_round_trip", |b| {
        b.iter_custom(|iters| {
            let req = Request::new(Entry::lambda("lib/loop.js"))
                .args(json!({ "n": iters }))
                .timeout(Duration::from_secs(600))
                .warm(true);
            let start = Instant::now();
            run(req);
            start.elapsed()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
