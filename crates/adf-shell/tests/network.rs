//! `curl`/`wget` over `sys_fetch` and `node`/`./lib/x.ts` over the sandbox, inside the shell:
//! the deferred tools run through the runtime's driver (`code::drive_deferred`, as in a model
//! turn), so the egress policy, owner approvals and `adf_logs` rows hold. The HTTP server is a
//! small raw-tokio one on `127.0.0.1:0`; refusals are proven through the egress policy with an
//! injected name lookup, so no test dials anything but loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use adf_runtime::fetch::{FetchSettings, Lookup};
use adf_runtime::tools::approval::{ApproveAll, DenyAll};
use adf_runtime::tools::builtin::fetch::SysFetch;
use adf_runtime::tools::{ApprovalRequest, Approver, Decision, ToolError, ToolRegistry};
use adf_store::AdfFile;
use common::{Run, agent, model, put, text, to_run};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Not UTF-8, so a body shown as text would show.
const PNG: &[u8] = &[
    0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0xff, 0xfe,
];

/// Request lines the server answered.
type Hits = Arc<Mutex<Vec<String>>>;

async fn server() -> (String, Hits) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let hits: Hits = Arc::default();
    let log = hits.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(serve(socket, log.clone()));
        }
    });
    (base, hits)
}

async fn serve(mut socket: TcpStream, hits: Hits) {
    let mut buf = [0u8; 4096];
    let Some(request) = adf_testkit::sockets::read_http_request(&mut socket).await else {
        return;
    };
    hits.lock().unwrap().push(request.request_line.clone());
    let (method, path, headers, body) = (
        request.method,
        request.target,
        request.headers,
        request.body,
    );
    let (status, content_type, payload): (&str, &str, Vec<u8>) = match path.as_str() {
        "/hello" => ("200 OK", "text/plain", b"hello\n".to_vec()),
        "/echo" => (
            "200 OK",
            "application/json",
            json!({
                "method": method,
                "body": String::from_utf8_lossy(&body),
                "test": headers.get("x-test"),
                "type": headers.get("content-type"),
            })
            .to_string()
            .into_bytes(),
        ),
        "/png" => ("200 OK", "image/png", PNG.to_vec()),
        // Holds the connection without answering, until the client gives up.
        "/hang" => {
            let _ = socket.read(&mut buf).await;
            return;
        }
        _ => ("404 Not Found", "text/plain", b"no such page\n".to_vec()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        payload.len()
    );
    let _ = socket.write_all(response.as_bytes()).await;
    if method != "HEAD" {
        let _ = socket.write_all(&payload).await;
    }
    let _ = socket.shutdown().await;
}

/// Names "resolved" from a table instead of DNS, so a name can point at a private address
/// that the egress policy refuses before any connection.
struct Names(HashMap<&'static str, Vec<IpAddr>>);

impl Lookup for Names {
    fn lookup(
        &self,
        host: &str,
        _port: u16,
    ) -> std::pin::Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>> {
        let found = self.0.get(host).cloned();
        Box::pin(async move {
            found.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "unknown name"))
        })
    }
}

/// The built-ins, `adf_shell`, and a `sys_fetch` whose lookup knows `intranet.test` as a
/// private address.
fn registry() -> Arc<ToolRegistry> {
    let mut registry = common::registry();
    let names = Names(HashMap::from([(
        "intranet.test",
        vec!["10.0.0.7".parse().unwrap()],
    )]));
    registry.register(Arc::new(SysFetch::with_settings(FetchSettings {
        lookup: Arc::new(names),
        ..FetchSettings::default()
    })));
    Arc::new(registry)
}

async fn line_as(file: &mut AdfFile, line: &str, approver: &(dyn Approver + Sync)) -> Run {
    let value = common::shell_call_async(
        &registry(),
        file,
        &model(),
        json!({ "command": line }),
        approver,
    )
    .await
    .unwrap();
    to_run(&value)
}

async fn line(file: &mut AdfFile, line: &str) -> Run {
    line_as(file, line, &ApproveAll).await
}

/// `(event, message)` of the `sys_fetch` log rows.
fn fetch_logs(file: &AdfFile) -> Vec<(String, String)> {
    let logs = adf_store::test_support::tables(file).logs().unwrap();
    logs.into_iter()
        .filter(|l| l.origin.as_deref() == Some("sys_fetch"))
        .map(|l| (l.event.unwrap(), l.message))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn curl_gets_posts_sends_headers_and_saves_through_sys_fetch() {
    let (base, hits) = server().await;
    let (_dir, mut file) = agent();

    let run = line(&mut file, &format!("curl -s {base}/hello")).await;
    assert_eq!(
        (run.stdout.as_str(), run.exit_code),
        ("hello\n", 0),
        "{run:?}"
    );

    // A body without -X is a POST, and repeated -d join with '&', as in curl.
    for (command, expected) in [
        (
            format!(
                "curl -s -X POST -d 'a=1' -H 'X-Test: yes' {base}/echo | jq -r '.method + \" \" + .body + \" \" + .test'"
            ),
            "POST a=1 yes\n",
        ),
        (
            format!("curl -s -d a=1 -d b=2 {base}/echo | jq -r '.method + \" \" + .body'"),
            "POST a=1&b=2\n",
        ),
        (
            format!("curl -s --json '{{\"k\":1}}' {base}/echo | jq -r .type"),
            "application/json\n",
        ),
        (
            format!("curl -s -o page.txt {base}/hello && cat page.txt"),
            "hello\n",
        ),
    ] {
        let run = line(&mut file, &command).await;
        assert_eq!(run.stdout, expected, "{command}: {run:?}");
    }
    assert_eq!(text(&file, "page.txt").as_deref(), Some("hello\n"));

    let run = line(&mut file, &format!("curl -si {base}/hello")).await;
    assert!(
        run.stdout.starts_with("HTTP/1.1 200 OK\r\n"),
        "{:?}",
        run.stdout
    );
    assert!(
        run.stdout.contains("content-type: text/plain\r\n"),
        "{run:?}"
    );
    assert!(run.stdout.ends_with("\r\n\r\nhello\n"), "{run:?}");

    let served = hits.lock().unwrap().clone();
    assert_eq!(
        served,
        [
            "GET /hello HTTP/1.1",
            "POST /echo HTTP/1.1",
            "POST /echo HTTP/1.1",
            "POST /echo HTTP/1.1",
            "GET /hello HTTP/1.1",
            "GET /hello HTTP/1.1",
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn curl_exit_codes_follow_curl_on_http_errors_and_refusals() {
    let (base, hits) = server().await;
    let (_dir, mut file) = agent();

    // Without -f an HTTP error is a response like any other.
    let run = line(&mut file, &format!("curl -s {base}/missing; echo $?")).await;
    assert_eq!(run.stdout, "no such page\n0\n", "{run:?}");

    let run = line(&mut file, &format!("curl -f {base}/missing")).await;
    assert_eq!(run.exit_code, 22, "{run:?}");
    assert_eq!(run.stdout, "");
    assert_eq!(
        run.stderr,
        "curl: (22) The requested URL returned error: 404\n"
    );
    // -s hides the message, -S shows it again.
    let run = line(
        &mut file,
        &format!("curl -sf {base}/missing || echo failed"),
    )
    .await;
    assert_eq!((run.stdout.as_str(), run.stderr.as_str()), ("failed\n", ""));
    let run = line(&mut file, &format!("curl -sSf {base}/missing")).await;
    assert!(run.stderr.starts_with("curl: (22)"), "{run:?}");

    // A name resolving to a private address: the egress policy refuses it before any
    // connection; curl reports it as a failed connection (7) and sys_fetch logs the refusal.
    let run = line(&mut file, "curl http://intranet.test/secrets").await;
    assert_eq!(run.exit_code, 7, "{run:?}");
    assert!(run.stderr.starts_with("curl: (7) "), "{run:?}");
    assert!(run.stderr.contains("refused"), "{run:?}");
    assert!(run.stderr.contains("10.0.0.7"), "{run:?}");
    let logs = fetch_logs(&file);
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0].0, "rejected");
    // -s hides what curl itself would report, never a refusal (issue 28 finding 9c): the
    // agent learns why, as sys_fetch tells it.
    let run = line(&mut file, "curl -s http://intranet.test/; echo $?").await;
    assert_eq!(run.stdout, "7\n", "{run:?}");
    assert!(
        run.stderr.starts_with("curl: (7) sys_fetch refused ") && run.stderr.contains("10.0.0.7"),
        "{run:?}"
    );
    let run = line(&mut file, "curl -sf http://intranet.test/ || echo failed").await;
    assert_eq!(run.stdout, "failed\n", "{run:?}");
    assert!(run.stderr.contains("refused"), "{run:?}");

    // -m is sys_fetch's time limit; running out of it is curl's 28.
    let run = line(&mut file, &format!("curl -s -m 0.2 {base}/hang; echo $?")).await;
    assert_eq!(run.stdout, "28\n", "{run:?}");

    // A malformed URL is curl's 3.
    let run = line(&mut file, "curl -s ftp://127.0.0.1/x; echo $?").await;
    assert_eq!(run.stdout, "3\n", "{run:?}");

    // The timed-out request may end before its request line reaches the server on a busy
    // machine; every other loopback request must have arrived, and nothing else.
    let served = hits.lock().unwrap().clone();
    let without_hang: Vec<_> = served.iter().filter(|hit| !hit.contains("/hang")).collect();
    assert_eq!(
        without_hang.len(),
        4,
        "only the loopback requests: {served:?}"
    );
    assert!(served.len() <= 5, "only the loopback requests: {served:?}");
}

/// Denies every approval and records what it was asked.
#[derive(Default)]
struct Owner {
    asked: Mutex<Vec<String>>,
}

impl Approver for Owner {
    fn decide(&self, _: &mut AdfFile, request: &ApprovalRequest) -> Result<Decision, ToolError> {
        self.asked.lock().unwrap().push(request.tool.clone());
        Ok(Decision::Denied("not now".into()))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restricted_sys_fetch_asks_the_owner_inside_the_pipeline() {
    let (base, hits) = server().await;
    let (_dir, mut file) = agent();
    file.config_set_path(
        adf_store::Caller::Owner,
        "tools.sys_fetch.restricted",
        adf_store::ConfigAction::Set,
        Value::Bool(true),
    )
    .unwrap();
    let owner = Owner::default();
    let run = line_as(&mut file, &format!("curl {base}/hello; echo $?"), &owner).await;
    assert_eq!(run.stdout, "7\n", "{run:?}");
    assert!(run.stderr.contains("not now"), "{run:?}");
    assert_eq!(*owner.asked.lock().unwrap(), ["sys_fetch"]);
    assert!(
        hits.lock().unwrap().is_empty(),
        "a denied fetch never leaves"
    );

    let run = line_as(&mut file, &format!("curl -s {base}/hello"), &ApproveAll).await;
    assert_eq!(run.stdout, "hello\n", "{run:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn binary_bodies_are_saved_as_bytes_never_printed() {
    let (base, _hits) = server().await;
    let (_dir, mut file) = agent();
    let run = line(&mut file, &format!("curl -s -o pic.png {base}/png")).await;
    assert_eq!(run.exit_code, 0, "{run:?}");
    let saved = file.file_read("pic.png").unwrap().unwrap();
    assert_eq!(saved.content, PNG);
    assert_eq!(saved.info.mime_type.as_deref(), Some("image/png"));

    let run = line(&mut file, &format!("curl -s {base}/png")).await;
    assert_eq!(run.exit_code, 23, "{run:?}");
    assert_eq!(run.stdout, "");
    assert!(run.stderr.contains("-o FILE"), "{run:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn wget_saves_under_the_url_name_or_prints_with_o_dash() {
    let (base, _hits) = server().await;
    let (_dir, mut file) = agent();
    let run = line(&mut file, &format!("wget -q {base}/hello && cat hello")).await;
    assert_eq!(run.stdout, "hello\n", "{run:?}");
    let run = line(&mut file, &format!("wget -qO- {base}/hello | tr a-z A-Z")).await;
    assert_eq!(run.stdout, "HELLO\n", "{run:?}");
    let run = line(&mut file, &format!("wget -O page.txt {base}/hello")).await;
    assert_eq!(run.stderr, "wget: 'page.txt' saved\n");
    assert_eq!(text(&file, "page.txt").as_deref(), Some("hello\n"));
    let run = line(&mut file, &format!("wget -q {base}/missing; echo $?")).await;
    assert_eq!(run.stdout, "8\n", "{run:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn node_runs_code_in_the_sandbox_through_sys_code() {
    let (_dir, mut file) = agent();
    let run = line(&mut file, "node -e 'console.log(1+1)'").await;
    assert_eq!((run.stdout.as_str(), run.exit_code), ("2\n", 0), "{run:?}");

    // Code on stdin, as `node < file.js` or a pipe.
    let run = line(&mut file, "echo 'console.log(6*7)' | node").await;
    assert_eq!(run.stdout, "42\n", "{run:?}");
    put(
        &mut file,
        "calc.js",
        "console.log([1, 2, 3].map(n => n * 2).join(','))\n",
    );
    let run = line(&mut file, "node < calc.js").await;
    assert_eq!(run.stdout, "2,4,6\n", "{run:?}");

    let run = line(&mut file, "node -p '[1,2].length + 1'").await;
    assert_eq!(run.stdout, "3\n", "{run:?}");

    // console.error goes to stderr; a throw is exit 1 with the error on stderr.
    let run = line(
        &mut file,
        "node -e 'console.error(\"careful\"); console.log(\"ok\")'",
    )
    .await;
    assert_eq!(
        (run.stdout.as_str(), run.stderr.as_str()),
        ("ok\n", "careful\n")
    );
    let run = line(&mut file, "node -e 'throw new Error(\"boom\")'; echo $?").await;
    assert_eq!(run.stdout, "1\n", "{run:?}");
    assert!(run.stderr.contains("boom"), "{run:?}");

    // The code reaches the agent's file through adf.* (the same pipeline).
    let run = line(
        &mut file,
        "node -e 'await adf.fs_write({mode: \"write\", path: \"from-node.txt\", content: \"hi\"}); console.log(\"written\")' && cat from-node.txt",
    )
    .await;
    assert_eq!(run.stdout, "written\nhi", "{run:?}");

    // Output flows on through the pipeline.
    let run = line(
        &mut file,
        "node -e 'console.log(JSON.stringify({a: 5}))' | jq .a",
    )
    .await;
    assert_eq!(run.stdout, "5\n", "{run:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn dot_slash_ts_runs_the_files_lambda_with_stdin_as_its_argument() {
    let (_dir, mut file) = agent();
    put(
        &mut file,
        "lib/x.ts",
        "export function main(input: { a?: number; b?: number }) {\n  console.log('adding');\n  return { sum: (input.a ?? 0) + (input.b ?? 0) };\n}\nexport function greet() { return 'hello from greet'; }\n",
    );
    let run = line(&mut file, "echo '{\"a\":1,\"b\":2}' | ./lib/x.ts").await;
    assert_eq!(run.stdout, "adding\n{\n  \"sum\": 3\n}\n", "{run:?}");
    let run = line(&mut file, "./lib/x.ts greet").await;
    assert_eq!(run.stdout, "hello from greet\n", "{run:?}");
    let run = line(&mut file, "echo not-json | ./lib/x.ts; echo $?").await;
    assert_eq!(run.stdout, "1\n", "{run:?}");
    assert!(run.stderr.contains("JSON object"), "{run:?}");
    let run = line(&mut file, "./lib/none.ts; echo $?").await;
    assert_eq!(run.stdout, "1\n", "{run:?}");
}

#[test]
fn a_registry_host_runs_synchronous_tools_only_and_says_how_to_run_the_rest() {
    let (_dir, mut file) = agent();
    let registry = common::registry();
    let caller = model();
    let mut host = adf_shell::RegistryHost::new(&mut file, &registry, &caller, &DenyAll);
    let outcome = adf_shell::run_line(&mut host, "echo ok && node -e 'console.log(1)'");
    assert_eq!(outcome.stdout, "ok\n");
    assert!(outcome.stderr.contains("adf_shell tool"), "{outcome:?}");
}

/// Runs `source` as `sys_code` does (unauthorized agent code) with the shell registered.
async fn code(file: &mut AdfFile, source: &str) -> Value {
    use adf_runtime::code::{CodeEnv, RunOptions, Sandbox, SandboxConfig};
    let sandbox = Sandbox::new(SandboxConfig::default()).await.unwrap();
    let env = CodeEnv::new(sandbox, registry());
    let run =
        adf_runtime::code::run_inline(file, &env, source, false, &DenyAll, &RunOptions::default())
            .await;
    match run.result {
        Ok(value) => value,
        Err(error) => panic!("code failed: {error}; console: {:?}", run.logs),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn code_calls_the_shell_through_the_same_pipeline() {
    let (base, _hits) = server().await;
    let (_dir, mut file) = agent();
    put(&mut file, "notes.md", "b\na\nb\n");
    let value = code(
        &mut file,
        "return await adf.adf_shell({ command: 'sort notes.md | uniq -c | head -1 && echo made > out.txt' })",
    )
    .await;
    assert_eq!(value["stdout"], "      1 a\n", "{value}");
    assert_eq!(value["exit_code"], 0);
    assert_eq!(text(&file, "out.txt").as_deref(), Some("made\n"));

    // curl inside it reaches sys_fetch.
    let value = code(
        &mut file,
        &format!("return await adf.adf_shell({{ command: 'curl -s {base}/hello' }})"),
    )
    .await;
    assert_eq!(value["stdout"], "hello\n", "{value}");

    // Protection holds and code gets no owner to ask: the redirect onto a read_only file fails.
    common::registry()
        .call(
            &mut file,
            &adf_runtime::tools::ToolCaller::Owner,
            "fs_write",
            json!({ "mode": "write", "path": "locked.txt", "content": "keep\n", "protection": "read_only" }),
            &DenyAll,
        )
        .unwrap();
    let value = code(
        &mut file,
        "return await adf.adf_shell({ command: 'echo changed > locked.txt; echo $?' })",
    )
    .await;
    assert_eq!(value["stdout"], "1\n", "{value}");
    assert_eq!(text(&file, "locked.txt").as_deref(), Some("keep\n"));

    // Code → shell → code does not nest.
    let value = code(
        &mut file,
        "return await adf.adf_shell({ command: \"node -e 'console.log(1)'\" })",
    )
    .await;
    assert_eq!(value["exit_code"], 1, "{value}");
    assert!(
        value["stderr"].as_str().unwrap().contains("does not nest"),
        "{value}"
    );
}
