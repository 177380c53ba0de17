use crate::common;

use std::time::Duration;

use adf_sandbox::{Entry, LogLevel, Request, SandboxError, bytes_value, value_bytes};
use common::*;
use serde_json::json;

/// Runs `code` inline in a fresh sandbox whose host has no files; the run must succeed.
async fn run_inline(code: &str) -> serde_json::Value {
    let sb = sandbox().await;
    sb.run(inline(code), TestHost::new(&[]))
        .await
        .unwrap()
        .value
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_round_trip_records_calls_and_parses_results() {
    let sb = sandbox().await;
    let host = TestHost::new(&[(
        "lib/m.js",
        "export async function main({ a, b }) { const r = await adf.add({ a, b }); const e = await adf.echo({ deep: { x: [1, 'two'] } }); return { r: r * 2, e }; }\n",
    )]);
    let out = sb
        .run(lambda("lib/m.js", json!({"a": 2, "b": 3})), host.clone())
        .await
        .unwrap();
    assert_eq!(
        out.value,
        json!({"r": 10, "e": {"deep": {"x": [1, "two"]}}})
    );
    assert_eq!(
        host.calls(),
        vec![
            ("add".to_string(), json!({"a": 2, "b": 3})),
            ("echo".to_string(), json!({"deep": {"x": [1, "two"]}})),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cod_01_calls_take_one_object_argument() {
    let sb = sandbox().await;
    let host = TestHost::new(&[]);
    let out = sb
        .run(
            inline(
                "const codes = [];\nfor (const bad of [() => adf.fs_read('x'), () => adf.fs_read({}, {}), () => adf.fs_read(null), () => adf.fs_read([1])]) {\n  try { await bad(); } catch (e) { codes.push(e.code); }\n}\nawait adf.echo();\nreturn codes;",
            ),
            host.clone(),
        )
        .await
        .unwrap();
    assert_eq!(
        out.value,
        json!([
            "INVALID_INPUT",
            "INVALID_INPUT",
            "INVALID_INPUT",
            "INVALID_INPUT"
        ])
    );
    // Omitted argument is `{}`; refused calls never reach the host.
    assert_eq!(host.calls(), vec![("echo".to_string(), json!({}))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cod_02_text_results_are_parsed_when_json_else_raw() {
    let value = run_inline("return [await adf.text({ text: '{\"a\":1}' }), await adf.text({ text: 'plain words' }), await adf.text({ text: '[1,2]' })];").await;
    assert_eq!(value, json!([{"a": 1}, "plain words", [1, 2]]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cod_02_raw_text_answers_stay_strings_even_when_they_look_like_json() {
    let value = run_inline("const out = [];\nfor (const text of ['42', '{\"a\":1}', 'true', 'plain']) out.push(await adf.raw({ text }));\nreturn out.map((v) => [typeof v, v]);").await;
    assert_eq!(
        value,
        json!([
            ["string", "42"],
            ["string", "{\"a\":1}"],
            ["string", "true"],
            ["string", "plain"]
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cod_05_host_error_codes_reach_err_code() {
    let sb = sandbox().await;
    let host = TestHost::new(&[]);
    let codes = [
        "NOT_FOUND",
        "DISABLED",
        "REQUIRES_AUTHORIZED_CODE",
        "TOOL_ERROR",
        "CIRCULAR_CALL",
        "FN_ERROR",
        "INVALID_INPUT",
        "INVALID_STATE",
        "MODEL_ERROR",
        "MODEL_REFUSED",
        "INTERNAL_ERROR",
        "WRITE_ERROR",
        "MESH_NOT_ENABLED",
        "TIMEOUT",
        "REQUIRES_AUTHORIZED_CALLER",
        "EXCLUDED_TOOL",
    ];
    let code = format!(
        "const out = [];\nfor (const code of {}) {{\n  try {{ await adf.fail({{ code, message: 'm-' + code }}); out.push('no throw'); }}\n  catch (err) {{ out.push([err instanceof Error, err.code, err.message]); }}\n}}\nreturn out;",
        serde_json::to_string(&codes).unwrap()
    );
    let out = sb.run(inline(&code), host).await.unwrap();
    let expected: Vec<_> = codes
        .iter()
        .map(|c| json!([true, c, format!("m-{c}")]))
        .collect();
    assert_eq!(out.value, json!(expected));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncaught_host_error_keeps_its_code() {
    let sb = sandbox().await;
    let host = TestHost::new(&[(
        "a.js",
        "export async function main() { await adf.nope({}); }\n",
    )]);
    match sb.run(lambda("a.js", json!({})), host).await.unwrap_err() {
        e @ SandboxError::Thrown { .. } => {
            assert_eq!(e.proxy_code(), "NOT_FOUND");
            let SandboxError::Thrown { message, stack, .. } = e else {
                unreachable!()
            };
            assert_eq!(message, "unknown tool: nope");
            assert!(stack.unwrap_or_default().contains("a.js"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uint8array_crosses_both_ways() {
    let sb = sandbox().await;
    let host = TestHost::new(&[]);
    let code = "const r = await adf.bytes({});\nconst ok = r.body instanceof Uint8Array && r.body.length === 4 && r.body[3] === 255;\nawait adf.echo({ content: new Uint8Array([104, 105]), buf: new Uint16Array([1]).buffer, nested: [new TextEncoder().encode('é')] });\nreturn { ok, back: r.body, text: new TextDecoder().decode(new Uint8Array([0xc3, 0xa9])) };";
    let out = sb.run(inline(code), host.clone()).await.unwrap();
    assert_eq!(out.value["ok"], json!(true));
    assert_eq!(value_bytes(&out.value["back"]).unwrap(), vec![0, 1, 2, 255]);
    assert_eq!(out.value["text"], json!("é"));
    let (_, args) = host.calls()[1].clone();
    assert_eq!(args["content"], bytes_value(b"hi"));
    assert_eq!(args["buf"], bytes_value(&[1, 0]));
    assert_eq!(args["nested"][0], bytes_value("é".as_bytes()));
    // Bytes in args arrive as Uint8Array.
    let req = Request::new(Entry::inline(
        "return args.data instanceof Uint8Array ? Array.from(args.data) : null;",
    ))
    .args(json!({ "data": bytes_value(&[9, 8]) }));
    assert_eq!(sb.run(req, host).await.unwrap().value, json!([9, 8]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_is_captured_with_levels_and_capped() {
    let sb = sandbox().await;
    let host = TestHost::new(&[]);
    let out = sb
        .run(inline("console.log('a', 1, {b: [2]}); console.info('i'); console.warn('w'); console.error(new Error('boom')); console.debug(undefined, null); return 0;"), host.clone())
        .await
        .unwrap();
    let lines: Vec<(LogLevel, &str)> = out
        .logs
        .iter()
        .map(|l| (l.level, l.message.as_str()))
        .collect();
    assert_eq!(lines[0], (LogLevel::Log, "a 1 {\"b\":[2]}"));
    assert_eq!(lines[1], (LogLevel::Info, "i"));
    assert_eq!(lines[2], (LogLevel::Warn, "w"));
    assert!(lines[3].1.starts_with("Error: boom"), "{lines:?}");
    assert_eq!(lines[4], (LogLevel::Debug, "undefined null"));
    assert!(!out.logs_truncated);
    let ex = sb.execute(inline("for (let i = 0; i < 100000; i++) console.log('x'.repeat(100)); throw new Error('after');"), host).await;
    assert!(ex.logs_truncated);
    let total: usize = ex.logs.iter().map(|l| l.message.len()).sum();
    assert!(
        total <= sb.config().max_log_bytes + 64,
        "{total} {:?}",
        ex.logs.last()
    );
    assert!(matches!(ex.result, Err(SandboxError::Thrown { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adf_then_is_undefined_and_await_adf_is_the_proxy() {
    let sb = sandbox().await;
    let host = TestHost::new(&[]);
    let out = sb
        .run(inline("const a = await adf; return [adf.then === undefined, typeof adf.fs_read, a === adf, 'x' in adf];"), host.clone())
        .await
        .unwrap();
    assert_eq!(out.value, json!([true, "function", true, true]));
    assert!(host.calls().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sys_code_state_persists_between_calls() {
    let sb = sandbox().await;
    let host = TestHost::new(&[]);
    sb.run(
        inline("globalThis.counter = 41; implicitGlobal = 'kept'; let local = 1;"),
        host.clone(),
    )
    .await
    .unwrap();
    let out = sb
        .run(
            inline("return [++globalThis.counter, implicitGlobal, typeof local];"),
            host.clone(),
        )
        .await
        .unwrap();
    assert_eq!(out.value, json!([42, "kept", "undefined"]));
    // Lambdas are cold: they never see inline state.
    host.put(
        "a.js",
        "export function main() { return typeof globalThis.counter; }\n",
    );
    assert_eq!(
        sb.run(lambda("a.js", json!({})), host.clone())
            .await
            .unwrap()
            .value,
        json!("undefined")
    );
    sb.reset();
    assert_eq!(
        sb.run(inline("return typeof counter;"), host)
            .await
            .unwrap()
            .value,
        json!("undefined")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_lambda_keeps_its_context_cold_does_not() {
    let sb = sandbox().await;
    let host = TestHost::new(&[(
        "w.js",
        "let n = 0;\nexport function main() { return ++n; }\n",
    )]);
    let warm = || lambda("w.js", json!({})).warm(true);
    assert_eq!(sb.run(warm(), host.clone()).await.unwrap().value, json!(1));
    assert_eq!(sb.run(warm(), host.clone()).await.unwrap().value, json!(2));
    assert_eq!(sb.warm_len(), 1);
    assert_eq!(
        sb.run(lambda("w.js", json!({})), host.clone())
            .await
            .unwrap()
            .value,
        json!(1)
    );
    assert_eq!(sb.run(warm(), host).await.unwrap().value, json!(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_sys_lambda_through_the_host_does_not_deadlock() {
    let sb = sandbox().await;
    let host = TestHost::new(&[
        (
            "outer.js",
            "export async function main() { const r = await adf.sys_lambda({ source: 'inner.ts:twice', args: { n: 21 } }); return r + 0; }\n",
        ),
        (
            "inner.ts",
            "export function twice({ n }: { n: number }) { return n * 2; }\n",
        ),
    ]);
    host.sandbox.set(sb.clone()).ok();
    let out = sb
        .run(lambda("outer.js", json!({})), host.clone())
        .await
        .unwrap();
    assert_eq!(out.value, json!(42));
    // Inline code calling a lambda too.
    let out = sb
        .run(
            inline("return await adf.sys_lambda({ source: 'inner.ts:twice', args: { n: 1 } });"),
            host,
        )
        .await
        .unwrap();
    assert_eq!(out.value, json!(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cod_16_fetch_exists_only_with_network_and_goes_to_the_host() {
    let sb = sandbox().await;
    let host = TestHost::new(&[]);
    let out = sb
        .run(inline("return typeof fetch;"), host.clone())
        .await
        .unwrap();
    assert_eq!(out.value, json!("undefined"));
    let req = inline("const r = await fetch('https://example.com/x', { method: 'post', headers: { 'X-A': '1' }, body: 'hi' });\nreturn [r.ok, r.status, r.headers.get('content-type'), await r.json()];").network(true);
    let out = sb.run(req, host.clone()).await.unwrap();
    assert_eq!(
        out.value,
        json!([true, 200, "application/json", {"url": "https://example.com/x"}])
    );
    let (name, req) = host.calls().last().cloned().unwrap();
    assert_eq!(name, "<fetch>");
    assert_eq!(
        req,
        json!({"url": "https://example.com/x", "method": "POST", "headers": {"x-a": "1"}, "body": "hi"})
    );
    // Switching the network off again removes it from the persistent context too.
    let out = sb.run(inline("return typeof fetch;"), host).await.unwrap();
    assert_eq!(out.value, json!("undefined"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cod_18_no_keys_env_or_process_in_globals() {
    let sb = sandbox().await;
    let host = TestHost::new(&[]);
    // `Buffer` is there (a pure byte class for npm packages, globals.js); it reaches nothing.
    let out = sb
        .run(inline("const names = ['process', 'require', 'module', 'exports', 'Deno', 'Bun', 'std', 'os', 'fs', 'env', '__dirname', '__filename', 'importScripts', 'XMLHttpRequest', 'WebSocket', 'fetch'];\nreturn Object.getOwnPropertyNames(globalThis).filter(n => names.includes(n) || /key|secret|token|password/i.test(n));"), host)
        .await
        .unwrap();
    assert_eq!(out.value, json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cod_45_timers_work_within_an_execution() {
    let sb = sandbox().await;
    let host = TestHost::new(&[]);
    let code = "const order = [];\nawait new Promise(r => setTimeout(() => { order.push('t'); r(); }, 5));\nconst id = setTimeout(() => order.push('cleared'), 1); clearTimeout(id);\nlet n = 0; await new Promise(r => { const iv = setInterval(() => { if (++n === 3) { clearInterval(iv); r(); } }, 1); });\nawait new Promise(r => setTimeout(r, 5));\nreturn [order, n];";
    assert_eq!(
        sb.run(inline(code), host).await.unwrap().value,
        json!([["t"], 3])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cod_43_timeout_is_reported_as_timeout() {
    let sb = sandbox().await;
    let host = TestHost::new(&[("loop.js", "export function main() { for (;;) {} }\n")]);
    let req = lambda("loop.js", json!({})).timeout(Duration::from_millis(200));
    let err = sb.run(req, host).await.unwrap_err();
    assert_eq!(err, SandboxError::Timeout { limit_ms: 200 });
    assert_eq!(err.proxy_code(), "TIMEOUT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_survive_a_failure_and_the_sandbox_is_send() {
    let sb = sandbox().await;
    let host = TestHost::new(&[]);
    // The whole execution future can be spawned (axum handlers, tokio tasks).
    let ex = tokio::spawn(async move {
        sb.execute(
            inline("console.log('before'); throw new TypeError('bad');"),
            host,
        )
        .await
    })
    .await
    .unwrap();
    assert_eq!(ex.logs[0].message, "before");
    match ex.result.unwrap_err() {
        SandboxError::Thrown { name, message, .. } => {
            assert_eq!((name.as_str(), message.as_str()), ("TypeError", "bad"))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_executions_do_not_grow_the_heap() {
    let sb = sandbox().await;
    let host = TestHost::new(&[(
        "w.js",
        "export async function main({ n }) { return (await adf.echo({ n })).n + 1; }\n",
    )]);
    let mut marks = Vec::new();
    for i in 0..1500 {
        let req = if i % 2 == 0 {
            inline("return (await adf.echo({ n: 1 })).n;")
        } else {
            lambda("w.js", json!({"n": 1})).warm(i % 4 == 1)
        };
        sb.run(req, host.clone()).await.unwrap();
        if i == 500 || i == 1499 {
            marks.push(sb.memory_used().await);
        }
    }
    assert!(
        marks[1] <= marks[0] + 64 * 1024,
        "heap grew from {} to {}",
        marks[0],
        marks[1]
    );
}

/// Runs `code` (a lambda module) with a 60 s limit and flips its cancel signal once it has
/// called `adf.echo`; the run must end as cancelled long before its limit.
async fn cancelled_after_echo(code: &str) {
    let sb = sandbox().await;
    let host = TestHost::new(&[("lib/c.js", code)]);
    let (cancel, cancelled) = tokio::sync::watch::channel(false);
    let req = lambda("lib/c.js", json!({}))
        .timeout(Duration::from_secs(60))
        .cancel(Some(cancelled));
    let watcher = host.clone();
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while watcher.calls().is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cancel.send_replace(true);
    });
    let started = std::time::Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(40), sb.run(req, host.clone()))
        .await
        .expect("the cancelled run ended")
        .unwrap_err();
    assert_eq!(err, SandboxError::Cancelled);
    assert_eq!(host.calls().len(), 1);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    // The sandbox runs the next execution as usual.
    let next = sb
        .run(inline("return 1 + 1;"), TestHost::new(&[]))
        .await
        .unwrap();
    assert_eq!(next.value, json!(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_execution_is_interrupted_while_its_javascript_spins() {
    cancelled_after_echo("export async function main() { await adf.echo({}); for (;;) {} }\n")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_execution_ends_while_it_awaits() {
    cancelled_after_echo(
        "export async function main() { await adf.echo({}); await new Promise(() => {}); }\n",
    )
    .await;
}

/// The globals packages commonly need (README "Packages"): each checked against values
/// worked out by hand from the WHATWG URL spec, RFC 4648 and RFC 4122.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn package_globals_url_buffer_crypto_structured_clone() {
    let sb = sandbox().await;
    let host = TestHost::new(&[]);
    let code = r#"
const u = new URL('../b/c?x=1&y=a+b#frag', 'https://user:pw@example.test:8443/a/z');
u.searchParams.append('z', 'é & !');
const q = new URLSearchParams({ a: '1', b: 'two words' });
const r = new Uint32Array(4);
crypto.getRandomValues(r);
const uuid = crypto.randomUUID();
const src = { d: new Date(0), m: new Map([[1, { k: 'v' }]]), s: new Set([1]), bytes: new Uint8Array([1, 2]) };
src.self = src;
const c = structuredClone(src);
let refused = null;
try { structuredClone({ f() {} }); } catch (e) { refused = e.name; }
let bad = null;
try { new URL('not a url'); } catch (e) { bad = e instanceof TypeError; }
return {
  href: u.href, host: u.host, port: u.port, path: u.pathname, origin: u.origin,
  y: u.searchParams.get('y'), query: q.toString(), bad,
  hex: Buffer.from('hi!').toString('hex'), b64: Buffer.from('hi!').toString('base64'),
  fromB64: Buffer.from('aGkh', 'base64').toString(), concat: Buffer.concat([Buffer.from([1]), Buffer.from([2, 3])]).length,
  isBuffer: Buffer.isBuffer(Buffer.alloc(2)), utf8Len: Buffer.byteLength('é'),
  randomNonZero: r.some((x) => x !== 0), uuid: /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(uuid),
  cloneDistinct: c !== src && c.self === c && c.d.getTime() === 0 && c.m.get(1).k === 'v' && c.s.has(1) && c.bytes[1] === 2 && c.bytes !== src.bytes,
  refused, global: global === globalThis, micro: typeof queueMicrotask,
};
"#;
    let out = sb.run(inline(code), host).await.unwrap().value;
    assert_eq!(
        out,
        json!({
            "href": "https://user:pw@example.test:8443/b/c?x=1&y=a+b&z=%C3%A9+%26+%21#frag",
            "host": "example.test:8443", "port": "8443", "path": "/b/c",
            "origin": "https://example.test:8443",
            "y": "a b", "query": "a=1&b=two+words", "bad": true,
            "hex": "686921", "b64": "aGkh", "fromB64": "hi!", "concat": 3,
            "isBuffer": true, "utf8Len": 2,
            "randomNonZero": true, "uuid": true, "cloneDistinct": true,
            "refused": "DataCloneError", "global": true, "micro": "function",
        })
    );
}
