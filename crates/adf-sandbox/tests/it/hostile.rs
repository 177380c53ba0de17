//! A table of hostile snippets: each is contained (the expected failure or a harmless value),
//! and afterwards the same sandbox still runs a normal lambda and inline code.
use crate::common;

use std::time::Duration;

use adf_sandbox::{Entry, Request, Sandbox, SandboxConfig, SandboxError};
use common::*;
use serde_json::{Value, json};

#[derive(Debug)]
enum Expect {
    Timeout,
    MemoryLimit,
    /// A thrown error whose `name: message` contains the text.
    Thrown(&'static str),
    Syntax,
    Module,
    Value(Value),
    /// Any contained outcome (value or error), as long as the sandbox survives.
    Contained,
}

/// (name, inline code, expectation). Inline code runs cold here (a fresh sandbox context per
/// case is not needed: the point is that the *shared* sandbox survives every case).
fn table() -> Vec<(&'static str, String, Expect)> {
    use Expect::*;
    vec![
        ("infinite loop", "for (;;) {}".into(), Timeout),
        ("while(true) inside a promise executor", "await new Promise(() => { while (true) {} });".into(), Timeout),
        ("while(true) in a promise job", "await Promise.resolve().then(() => { while (true) {} });".into(), Timeout),
        ("uncatchable interrupt", "while (true) { try { for (;;) {} } catch (e) {} }".into(), Timeout),
        ("host call that never resolves", "await adf.never({});".into(), Timeout),
        ("promise that never settles", "await new Promise(() => {});".into(), Timeout),
        ("memory bomb", "let a = []; for (;;) a.push(new Array(1e6).fill(1));".into(), MemoryLimit),
        ("string doubling bomb", "let s = 'x'; for (;;) s += s;".into(), Contained),
        ("garbage source", "return (;\n}}}".into(), Syntax),
        ("deep recursion", "function f(n) { return f(n + 1) + 1; } return f(0);".into(), Thrown("RangeError")),
        ("deep JSON nesting", "let o = {}; for (let i = 0; i < 1e6; i++) o = { o }; return JSON.stringify(o).length;".into(), Contained),
        ("cyclic JSON.stringify", "const a = {}; a.self = a; return JSON.stringify(a);".into(), Thrown("TypeError")),
        // Native builtins are not interruptible and QuickJS polls the interrupt handler every
        // 10,000 operations, so each iteration must stay small for the test to be quick
        // (documented in the crate docs).
        ("long synchronous JSON.stringify loop", "const big = Array.from({ length: 100 }, (_, i) => ({ i, s: 'x'.repeat(50) })); for (;;) JSON.stringify(big);".into(), Timeout),
        ("require", "return require('fs');".into(), Thrown("ReferenceError")),
        ("process.env", "return process.env;".into(), Thrown("ReferenceError")),
        ("Deno", "return Deno.readTextFile('/etc/passwd');".into(), Thrown("ReferenceError")),
        ("dynamic import('fs')", "return await import('fs');".into(), Thrown("not available")),
        ("dynamic import('os')", "return await import('os');".into(), Thrown("not available")),
        ("static import of std", "import * as std from 'std';\nreturn std;".into(), Module),
        ("path escape import", "return await import('../../../etc/passwd');".into(), Thrown("leaves")),
        ("fetch without network", "return await fetch('http://127.0.0.1:1/');".into(), Thrown("ReferenceError")),
        ("globalThis via Function", "return typeof Function('return this')().process;".into(), Value(json!("undefined"))),
        ("eval of a huge string", "return eval('1+'.repeat(3e6) + '1');".into(), Contained),
        ("eval building a huge string", "return eval('\"' + 'a'.repeat(2e7) + '\"').length;".into(), Contained),
        ("throw a number", "throw 42;".into(), Thrown("number: 42")),
        ("throw a string", "throw 'boom';".into(), Thrown("string: boom")),
        ("throw an object", "throw { a: 1 };".into(), Thrown("object: {\"a\":1}")),
        // QuickJS cannot tell this from an allocation failure (documented).
        ("throw null", "throw null;".into(), MemoryLimit),
        ("adf.then is undefined", "return [adf.then === undefined, typeof (await adf)];".into(), Value(json!([true, "object"]))),
        ("overwrite adf", "globalThis.adf = null; delete globalThis.adf; return typeof adf;".into(), Value(json!("object"))),
        ("unhandled rejection", "Promise.reject(new Error('ignored')); return 1;".into(), Value(json!(1))),
        ("interval left running", "setInterval(() => { for (let i = 0; i < 1e5; i++); }, 0); return 'left';".into(), Value(json!("left"))),
        ("console flood", "for (let i = 0; i < 1e6; i++) console.log('spam spam spam'); return 1;".into(), Contained),
        ("deeply nested source", format!("return {}1{};", "(".repeat(50_000), ")".repeat(50_000)), Contained),
        ("prefix operator chain", format!("return {}1;", "!".repeat(200_000)), Contained),
        ("huge return value", "return 'x'.repeat(5e7);".into(), Contained),
        ("tamper with the bridge", "JSON.parse = () => 1; JSON.stringify = () => '1'; Array.prototype.map = () => 'x'; String.prototype.slice = () => ''; return await adf.echo({ ok: true });".into(), Value(json!({"ok": true}))),
    ]
}

fn check(name: &str, got: &Result<Value, SandboxError>, want: &Expect) {
    let ok = match (want, got) {
        (Expect::Timeout, Err(SandboxError::Timeout { .. })) => true,
        (Expect::MemoryLimit, Err(SandboxError::MemoryLimit { .. })) => true,
        (Expect::Thrown(text), Err(e @ SandboxError::Thrown { .. })) => {
            e.to_string().contains(text)
        }
        (Expect::Syntax, Err(SandboxError::Syntax { .. })) => true,
        (Expect::Module, Err(SandboxError::Module { .. })) => true,
        (Expect::Value(v), Ok(got)) => v == got,
        (Expect::Contained, Ok(_)) => true,
        (Expect::Contained, Err(e)) => !matches!(e, SandboxError::Internal(_)),
        _ => false,
    };
    assert!(ok, "{name}: expected {want:?}, got {got:?}");
}

async fn still_works(sb: &Sandbox, host: &std::sync::Arc<TestHost>, after: &str) {
    let out = sb
        .run(lambda("ok.ts", json!({"n": 20})), host.clone())
        .await;
    assert_eq!(
        out.map(|o| o.value),
        Ok(json!({"sum": 22, "clean": true})),
        "lambda after {after}"
    );
    let out = sb
        .run(
            inline("return [1, 2].map(x => x * 2).join(',') + ({}).polluted;"),
            host.clone(),
        )
        .await;
    assert_eq!(
        out.map(|o| o.value),
        Ok(json!("2,4undefined")),
        "inline after {after}"
    );
}

const OK_LAMBDA: &str = "export async function main({ n }: { n: number }) {\n  const clean = ({} as any).polluted === undefined && [1].map((x) => x + 1)[0] === 2 && typeof adf.fs_read === 'function';\n  return { sum: (await adf.add({ a: n, b: 2 })) as number, clean };\n}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_snippets_are_contained_and_the_sandbox_survives() {
    let sb = Sandbox::new(SandboxConfig {
        memory_limit: 64 << 20,
        ..SandboxConfig::default()
    })
    .await
    .unwrap();
    let host = TestHost::new(&[("ok.ts", OK_LAMBDA)]);
    let cases = table();
    assert!(cases.len() >= 15);
    for (name, code, want) in &cases {
        // Hostile code runs as a cold lambda body (module) and as inline code.
        // Only code that never ends gets a limit to reach; a bomb fills memory at the speed
        // of the machine, and the memory limit must be what stops it.
        let limit = match want {
            Expect::MemoryLimit => Duration::from_secs(120),
            _ => Duration::from_millis(400),
        };
        let req = Request::new(Entry::inline(code.clone())).timeout(limit);
        let got = sb.run(req, host.clone()).await.map(|o| o.value);
        eprintln!("{name}: {:?}", got.as_ref().map(|_| ()));
        check(name, &got, want);
        still_works(&sb, &host, name).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prototype_and_global_tampering_does_not_leak_into_cold_lambdas() {
    let sb = sandbox().await;
    let host = TestHost::new(&[
        ("ok.ts", OK_LAMBDA),
        (
            "evil.js",
            "export function main() {\n  Object.prototype.polluted = 1;\n  Array.prototype.map = () => 'pwned';\n  globalThis.console = null;\n  globalThis.leak = 'x';\n  try { globalThis.adf = null; } catch (e) {}\n  return ({}).polluted;\n}\n",
        ),
        (
            "probe.js",
            "export function main() { return [typeof leak, ({}).polluted === undefined, typeof console.log]; }\n",
        ),
    ]);
    assert_eq!(
        sb.run(lambda("evil.js", json!({})), host.clone())
            .await
            .unwrap()
            .value,
        json!(1)
    );
    assert_eq!(
        sb.run(lambda("probe.js", json!({})), host.clone())
            .await
            .unwrap()
            .value,
        json!(["undefined", true, "function"])
    );
    still_works(&sb, &host, "evil lambda").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_lambdas_time_out_and_oom_as_modules_too() {
    let sb = sandbox().await;
    let host = TestHost::new(&[
        ("ok.ts", OK_LAMBDA),
        ("spin.js", "export function main() { for (;;) {} }\n"),
        (
            "tla.js",
            "await new Promise(() => {});\nexport function main() { return 1; }\n",
        ),
        (
            "bomb.js",
            "export function main() { const a = []; for (;;) a.push(new Array(1e6).fill(0)); }\n",
        ),
        (
            "toplevel-spin.js",
            "for (;;) {}\nexport function main() {}\n",
        ),
    ]);
    for (path, want) in [
        ("spin.js", Expect::Timeout),
        ("tla.js", Expect::Timeout),
        ("bomb.js", Expect::MemoryLimit),
        ("toplevel-spin.js", Expect::Timeout),
    ] {
        // As in the table above: only code that never ends gets a limit to reach.
        let limit = match want {
            Expect::MemoryLimit => Duration::from_secs(120),
            _ => Duration::from_millis(300),
        };
        for warm in [false, true] {
            let req = lambda(path, json!({})).timeout(limit).warm(warm);
            let got = sb.run(req, host.clone()).await.map(|o| o.value);
            check(path, &got, &want);
            still_works(&sb, &host, path).await;
        }
    }
}
