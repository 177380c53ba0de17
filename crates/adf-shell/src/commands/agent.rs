//! Commands over the agent's own tools: messaging, network, timers, code, processes
//! (tasks), identity and config, and `./script.sh`. Each is a thin translation to one tool
//! call; the tool's result is printed as text (strings raw, the rest as JSON).

use adf_runtime::tools::{ErrorCode, ToolError};
use serde_json::{Value, json};

use crate::commands::fs;
use crate::exec::{Abort, Io, Shell};
use crate::parse::MAX_NESTING;

/// Calls `tool` and prints its result; a failure is `name: message` and status 1.
fn call_print(shell: &mut Shell<'_>, name: &str, tool: &str, args: Value, io: &mut Io) -> i32 {
    match shell.host.call(tool, args) {
        Ok(value) => {
            print_value(&value, io);
            0
        }
        Err(error) => io.fail(name, error.message),
    }
}

fn print_value(value: &Value, io: &mut Io) {
    match value {
        Value::String(text) => {
            io.out.push_str(text);
            if !text.ends_with('\n') {
                io.out.push('\n');
            }
        }
        Value::Null => {}
        other => {
            io.out
                .push_str(&serde_json::to_string_pretty(other).unwrap_or_default());
            io.out.push('\n');
        }
    }
}

pub(crate) fn msg(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let sub = args.first().map(String::as_str).unwrap_or("list");
    let rest = args.get(1..).unwrap_or(&[]);
    Ok(match sub {
        "send" => {
            let [to, text @ ..] = rest else {
                return Ok(io.fail(
                    "msg",
                    "usage: msg send TO TEXT (TEXT from stdin when omitted)",
                ));
            };
            let content = if text.is_empty() {
                std::mem::take(&mut io.stdin)
            } else {
                text.join(" ")
            };
            call_print(
                shell,
                "msg",
                "msg_send",
                json!({ "recipient": to, "content": content }),
                io,
            )
        }
        "list" => {
            let _ = rest;
            call_print(shell, "msg", "msg_list", json!({}), io)
        }
        "read" => {
            let mut args = json!({});
            if let Some(status) = rest.first() {
                args["status"] = Value::String(status.clone());
            }
            call_print(shell, "msg", "msg_read", args, io)
        }
        other => io.fail(
            "msg",
            format!("unknown subcommand '{other}' (send, list, read)"),
        ),
    })
}

pub(crate) fn who(shell: &mut Shell<'_>, _: &[String], io: &mut Io) -> Result<i32, Abort> {
    Ok(call_print(shell, "who", "agent_discover", json!({}), io))
}

pub(crate) fn ping(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let Some(handle) = args.first() else {
        return Ok(io.fail("ping", "usage: ping AGENT"));
    };
    match shell
        .host
        .call("agent_discover", json!({ "handle": handle }))
    {
        Ok(value) => {
            let found = value
                .get("agents")
                .and_then(Value::as_array)
                .or_else(|| value.as_array())
                .is_some_and(|agents| !agents.is_empty());
            if found {
                io.out.push_str(&format!("{handle} is reachable\n"));
                Ok(0)
            } else {
                io.out.push_str(&format!("{handle} is not reachable\n"));
                Ok(1)
            }
        }
        Err(error) => Ok(io.fail("ping", error.message)),
    }
}

/// One HTTP request as `curl`/`wget` describe it.
#[derive(Default)]
struct HttpRequest {
    method: Option<String>,
    headers: serde_json::Map<String, Value>,
    body: Option<String>,
    url: Option<String>,
    /// `-m SECONDS` as `sys_fetch`'s `timeout_ms`.
    timeout_ms: Option<u64>,
}

impl HttpRequest {
    /// The `sys_fetch` arguments; a body without `-X` is a POST, as in curl.
    fn to_args(&self, url: &str) -> Value {
        let mut request = json!({ "url": url });
        let method = self
            .method
            .clone()
            .or_else(|| self.body.as_ref().map(|_| "POST".to_owned()));
        if let Some(method) = method {
            request["method"] = Value::String(method);
        }
        if !self.headers.is_empty() {
            request["headers"] = Value::Object(self.headers.clone());
        }
        if let Some(body) = &self.body {
            request["body"] = Value::String(body.clone());
        }
        if let Some(timeout_ms) = self.timeout_ms {
            request["timeout_ms"] = Value::from(timeout_ms);
        }
        request
    }
}

/// curl's exit status for a `sys_fetch` failure: 28 timed out, 3 malformed request, 7 for
/// everything that kept the request from being answered (refused by the egress policy or
/// the owner, connection failed).
/// Whether curl's `-s` may hide a failed `sys_fetch`: only the failures real curl reports
/// (no connection, a timeout, a malformed URL). A refusal — the egress policy's, or the
/// runtime's (tool disabled, approval denied, access) — is always said, as `sys_fetch` says
/// it: a bare exit 7 would leave the agent guessing.
fn silenceable(error: &ToolError) -> bool {
    match error.code {
        ErrorCode::Timeout | ErrorCode::InvalidInput => true,
        ErrorCode::ToolError => !error.message.starts_with("sys_fetch refused"),
        _ => false,
    }
}

fn fetch_exit(error: &ToolError) -> i32 {
    match error.code {
        ErrorCode::Timeout => 28,
        ErrorCode::InvalidInput => 3,
        _ => 7,
    }
}

/// A response body as bytes: text as is, a binary body (base64 for the shell's callers)
/// decoded; `None` when it cannot be read.
fn body_bytes(response: &Value) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let body = response.get("body")?.as_str()?;
    if response.get("_body_encoding").and_then(Value::as_str) == Some("base64") {
        base64::engine::general_purpose::STANDARD.decode(body).ok()
    } else {
        Some(body.as_bytes().to_vec())
    }
}

/// Stores a response body at `path` through `fs_write` (binary bodies stay binary).
fn save_body(shell: &mut Shell<'_>, path: &str, response: &Value) -> Result<(), String> {
    match response.get("body") {
        Some(Value::String(body))
            if response.get("_body_encoding").and_then(Value::as_str) == Some("base64") =>
        {
            let path = fs::clean_path(path)?;
            let mut args =
                json!({ "mode": "write", "path": path, "content": body, "encoding": "base64" });
            if let Some(mime) = response
                .pointer("/headers/content-type")
                .and_then(Value::as_str)
            {
                args["mime_type"] =
                    Value::String(mime.split(';').next().unwrap_or(mime).trim().to_owned());
            }
            shell
                .host
                .call("fs_write", args)
                .map(|_| ())
                .map_err(|e| format!("{path}: {}", e.message))
        }
        Some(Value::String(body)) => fs::write_file(shell, path, body, false),
        _ => fs::write_file(shell, path, "", false),
    }
}

/// The status line and headers curl's `-i` prints before the body.
fn head_lines(response: &Value) -> String {
    let status = response.get("status").and_then(Value::as_u64).unwrap_or(0);
    let text = response
        .get("status_text")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut head = format!("HTTP/1.1 {status} {text}\r\n");
    if let Some(headers) = response.get("headers").and_then(Value::as_object) {
        for (name, value) in headers {
            head.push_str(&format!("{name}: {}\r\n", value.as_str().unwrap_or("")));
        }
    }
    head.push_str("\r\n");
    head
}

/// What `curl`'s arguments ask for.
#[derive(Default)]
struct CurlOptions {
    request: HttpRequest,
    silent: bool,
    show_errors: bool,
    fail: bool,
    include: bool,
    head_only: bool,
    output: Option<String>,
}

impl CurlOptions {
    /// The options, or the exit status after the error is written to `io`.
    fn parse(args: &[String], io: &mut Io) -> Result<Self, i32> {
        let mut o = Self::default();
        let mut index = 0;
        while index < args.len() {
            let arg = args[index].clone();
            let mut value = || {
                index += 1;
                args.get(index).cloned()
            };
            match arg.as_str() {
                "-X" | "--request" => o.request.method = value(),
                "-H" | "--header" => {
                    if let Some(header) = value()
                        && let Some((name, v)) = header.split_once(':')
                    {
                        o.request
                            .headers
                            .insert(name.trim().to_owned(), Value::String(v.trim().to_owned()));
                    }
                }
                "-d" | "--data" | "--data-raw" | "--data-binary" | "--json" => {
                    let data = value().unwrap_or_default();
                    // curl joins repeated -d with '&'.
                    o.request.body = Some(match o.request.body.take() {
                        Some(before) => format!("{before}&{data}"),
                        None => data,
                    });
                    if arg == "--json" {
                        o.request.headers.insert(
                            "Content-Type".into(),
                            Value::String("application/json".into()),
                        );
                        o.request
                            .headers
                            .insert("Accept".into(), Value::String("application/json".into()));
                    }
                }
                "-o" | "--output" => o.output = value(),
                "-m" | "--max-time" => {
                    let given = value().unwrap_or_default();
                    match given.parse::<f64>() {
                        Ok(seconds) if seconds > 0.0 => {
                            o.request.timeout_ms =
                                Some(((seconds * 1000.0) as u64).clamp(1, 60_000));
                        }
                        _ => {
                            io.err
                                .push_str(&format!("curl: (2) bad --max-time '{given}'\n"));
                            return Err(2);
                        }
                    }
                }
                "-s" | "--silent" => o.silent = true,
                "-S" | "--show-error" => o.show_errors = true,
                "-f" | "--fail" => o.fail = true,
                "-i" | "--include" => o.include = true,
                "-I" | "--head" => o.head_only = true,
                "-L" | "--location" | "-q" => {}
                flags
                    if flags.starts_with('-')
                        && !flags.starts_with("--")
                        && flags.len() > 2
                        && flags[1..].chars().all(|c| "sSfiLq".contains(c)) =>
                {
                    for flag in flags[1..].chars() {
                        match flag {
                            's' => o.silent = true,
                            'S' => o.show_errors = true,
                            'f' => o.fail = true,
                            'i' => o.include = true,
                            _ => {}
                        }
                    }
                }
                other if other.starts_with('-') && other.len() > 1 => {
                    return Err(io.fail(
                        "curl",
                        format!("unsupported option '{other}' (see curl -h)"),
                    ));
                }
                other => o.request.url = Some(other.to_owned()),
            }
            index += 1;
        }
        Ok(o)
    }
}

pub(crate) fn curl(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let mut o = match CurlOptions::parse(args, io) {
        Ok(options) => options,
        Err(status) => return Ok(status),
    };
    let Some(url) = o.request.url.clone() else {
        io.err.push_str("curl: (2) no URL specified\n");
        return Ok(2);
    };
    if o.head_only {
        o.request.method = Some("HEAD".into());
        o.include = true;
    }
    let quiet_errors = o.silent && !o.show_errors;
    let response = match shell.host.call("sys_fetch", o.request.to_args(&url)) {
        Ok(response) => response,
        Err(error) => {
            let code = fetch_exit(&error);
            if !quiet_errors || !silenceable(&error) {
                io.err
                    .push_str(&format!("curl: ({code}) {}\n", error.message));
            }
            return Ok(code);
        }
    };
    let status = response.get("status").and_then(Value::as_u64).unwrap_or(0);
    if o.fail && status >= 400 {
        if !quiet_errors {
            io.err.push_str(&format!(
                "curl: (22) The requested URL returned error: {status}\n"
            ));
        }
        return Ok(22);
    }
    Ok(print_response(shell, &o, &response, io))
}

/// Prints the fetched response as the options ask (or saves its body); the exit status.
fn print_response(shell: &mut Shell<'_>, o: &CurlOptions, response: &Value, io: &mut Io) -> i32 {
    let head = if o.include {
        head_lines(response)
    } else {
        String::new()
    };
    let binary = response.get("_body_encoding").and_then(Value::as_str) == Some("base64");
    match o.output.as_deref() {
        Some(path) if path != "-" => {
            if let Err(message) = save_body(shell, path, response) {
                io.err.push_str(&format!("curl: (23) {message}\n"));
                return 23;
            }
            io.out.push_str(&head);
        }
        _ if binary && !o.head_only => {
            io.out.push_str(&head);
            io.err.push_str(
                "curl: (23) the response is binary; save it with -o FILE instead of printing it\n",
            );
            return 23;
        }
        _ => {
            io.out.push_str(&head);
            if !o.head_only {
                let body = body_bytes(response).unwrap_or_default();
                io.out.push_str(&String::from_utf8_lossy(&body));
            }
        }
    }
    0
}

pub(crate) fn wget(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let mut request = HttpRequest::default();
    let mut output: Option<String> = None;
    let mut quiet = false;
    let mut index = 0;
    while index < args.len() {
        let arg = args[index].clone();
        let mut value = || {
            index += 1;
            args.get(index).cloned()
        };
        match arg.as_str() {
            "-O" | "--output-document" => output = value(),
            "-q" | "--quiet" | "-nv" | "--no-verbose" => quiet = true,
            "-qO" | "-qO-" => {
                quiet = true;
                output = if arg == "-qO-" {
                    Some("-".into())
                } else {
                    value()
                };
            }
            "-O-" => output = Some("-".into()),
            "--header" => {
                if let Some(header) = value()
                    && let Some((name, v)) = header.split_once(':')
                {
                    request
                        .headers
                        .insert(name.trim().to_owned(), Value::String(v.trim().to_owned()));
                }
            }
            "--post-data" => request.body = value(),
            "--method" => request.method = value(),
            other if other.starts_with('-') && other.len() > 1 => {
                return Ok(io.fail(
                    "wget",
                    format!("unsupported option '{other}' (see wget -h)"),
                ));
            }
            other => request.url = Some(other.to_owned()),
        }
        index += 1;
    }
    let Some(url) = request.url.clone() else {
        io.err.push_str("wget: missing URL\n");
        return Ok(1);
    };
    let response = match shell.host.call("sys_fetch", request.to_args(&url)) {
        Ok(response) => response,
        Err(error) => {
            io.err.push_str(&format!("wget: {}\n", error.message));
            // wget: 4 network failure, 2 a request it could not parse.
            return Ok(if error.code == ErrorCode::InvalidInput {
                2
            } else {
                4
            });
        }
    };
    let status = response.get("status").and_then(Value::as_u64).unwrap_or(0);
    if status >= 400 {
        let text = response
            .get("status_text")
            .and_then(Value::as_str)
            .unwrap_or("");
        io.err
            .push_str(&format!("wget: server returned error: {status} {text}\n"));
        return Ok(8);
    }
    let target = output.unwrap_or_else(|| {
        // wget names the file after the last path segment of the URL.
        let path = url.split(['?', '#']).next().unwrap_or(&url);
        let path = path.split_once("://").map(|(_, rest)| rest).unwrap_or(path);
        match path
            .split_once('/')
            .map(|(_, p)| p.rsplit('/').next().unwrap_or(""))
        {
            Some(name) if !name.is_empty() => name.to_owned(),
            _ => "index.html".to_owned(),
        }
    });
    if target == "-" {
        if response.get("_body_encoding").and_then(Value::as_str) == Some("base64") {
            io.err
                .push_str("wget: the response is binary; save it with -O FILE\n");
            return Ok(1);
        }
        let body = body_bytes(&response).unwrap_or_default();
        io.out.push_str(&String::from_utf8_lossy(&body));
        return Ok(0);
    }
    if let Err(message) = save_body(shell, &target, &response) {
        io.err.push_str(&format!("wget: {message}\n"));
        return Ok(3);
    }
    if !quiet {
        io.err.push_str(&format!("wget: '{target}' saved\n"));
    }
    Ok(0)
}

/// `+5m`, `+2h`, `+1d`, `+30s`, an ISO time or Unix milliseconds, as epoch ms.
fn when(text: &str) -> Option<i64> {
    if let Some(relative) = text.strip_prefix('+') {
        let (number, unit) = relative.split_at(relative.find(|c: char| !c.is_ascii_digit())?);
        let n: i64 = number.parse().ok()?;
        let ms = match unit {
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return None,
        };
        return Some(chrono::Utc::now().timestamp_millis() + n * ms);
    }
    if let Ok(ms) = text.parse::<i64>() {
        return Some(ms);
    }
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}

pub(crate) fn at(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let [time, rest @ ..] = args else {
        return Ok(io.fail(
            "at",
            "usage: at WHEN LAMBDA|TEXT (WHEN: +5m, +2h, ISO time, epoch ms)",
        ));
    };
    let Some(at) = when(time) else {
        return Ok(io.fail(
            "at",
            format!("cannot read the time '{time}' (use +5m, +2h, an ISO time or epoch ms)"),
        ));
    };
    let rest: Vec<&String> = rest.iter().filter(|a| *a != "--").collect();
    let target = rest
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    let mut args = json!({ "schedule": { "type": "once", "at": at } });
    if target.ends_with(".sh") || target.contains(".ts:") || target.contains(".js:") {
        args["lambda"] = Value::String(target);
        args["scope"] = json!(["system"]);
    } else {
        args["payload"] = Value::String(if target.is_empty() {
            std::mem::take(&mut io.stdin)
        } else {
            target
        });
        args["scope"] = json!(["agent"]);
    }
    Ok(call_print(shell, "at", "sys_set_timer", args, io))
}

pub(crate) fn crontab(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    match args.first().map(String::as_str) {
        Some("-l") | None => Ok(call_print(
            shell,
            "crontab",
            "sys_list_timers",
            json!({}),
            io,
        )),
        Some("-r") => {
            let Some(id) = args.get(1) else {
                return Ok(io.fail("crontab", "usage: crontab -r TIMER_ID"));
            };
            let id: Value = id
                .parse::<i64>()
                .map(Value::from)
                .unwrap_or_else(|_| Value::String(id.clone()));
            Ok(call_print(
                shell,
                "crontab",
                "sys_delete_timer",
                json!({ "id": id }),
                io,
            ))
        }
        Some(expression) => {
            let target = args[1..].join(" ");
            if target.is_empty() {
                return Ok(io.fail("crontab", "usage: crontab 'CRON' LAMBDA|TEXT"));
            }
            let mut call = json!({ "schedule": { "type": "cron", "cron": expression } });
            if target.ends_with(".sh") || target.contains(".ts:") || target.contains(".js:") {
                call["lambda"] = Value::String(target);
                call["scope"] = json!(["system"]);
            } else {
                call["payload"] = Value::String(target);
                call["scope"] = json!(["agent"]);
            }
            Ok(call_print(shell, "crontab", "sys_set_timer", call, io))
        }
    }
}

/// The console lines of a code run (`{result, logs}`): `console.error`/`warn` to stderr as
/// node prints them, everything else to stdout.
fn print_logs(value: &Value, io: &mut Io) {
    for line in value
        .get("logs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        match line
            .strip_prefix("error: ")
            .or_else(|| line.strip_prefix("warn: "))
        {
            Some(message) => {
                io.err.push_str(message);
                io.err.push('\n');
            }
            None => {
                io.out.push_str(line);
                io.out.push('\n');
            }
        }
    }
}

pub(crate) fn node(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let (code, print) = match args {
        [flag, code, ..] if flag == "-e" || flag == "--eval" => (code.clone(), false),
        [flag, code, ..] if flag == "-p" || flag == "--print" => (code.clone(), true),
        [] => (std::mem::take(&mut io.stdin), false),
        _ => {
            return Ok(io.fail(
                "node",
                "usage: node -e CODE | node -p EXPRESSION | node < script.js (run a lambda file with ./lib/x.ts)",
            ));
        }
    };
    // Inline code is the body of an async function: `-p` returns the expression's value.
    let code = if print {
        format!("return (\n{code}\n);")
    } else {
        code
    };
    match shell.host.call("sys_code", json!({ "code": code })) {
        Ok(value) => {
            print_logs(&value, io);
            if print {
                match value.get("result") {
                    Some(Value::String(text)) => {
                        io.out.push_str(text);
                        io.out.push('\n');
                    }
                    Some(Value::Null) | None => io.out.push_str("undefined\n"),
                    Some(other) => {
                        io.out.push_str(&other.to_string());
                        io.out.push('\n');
                    }
                }
            }
            Ok(0)
        }
        Err(error) => {
            io.err.push_str(&error.message);
            io.err.push('\n');
            Ok(1)
        }
    }
}

/// `./lib/x.ts [FUNCTION]`: the file's lambda (`main` unless named) through `sys_lambda`;
/// a JSON object on stdin is its argument. Prints the console output, then the value.
fn lambda(shell: &mut Shell<'_>, path: &str, argv: &[String], io: &mut Io) -> i32 {
    let function = argv.get(1).map(String::as_str).unwrap_or("main");
    let mut args = json!({ "source": format!("{path}:{function}") });
    let stdin = std::mem::take(&mut io.stdin);
    if !stdin.trim().is_empty() {
        match serde_json::from_str::<Value>(&stdin) {
            Ok(input @ Value::Object(_)) => args["args"] = input,
            _ => {
                return io.fail(path, "stdin must be a JSON object (the lambda's argument)");
            }
        }
    }
    match shell.host.call("sys_lambda", args) {
        Ok(value) => {
            print_logs(&value, io);
            if let Some(result) = value.get("result").filter(|v| !v.is_null()) {
                print_value(result, io);
            }
            0
        }
        Err(error) => {
            io.err.push_str(&format!("{path}: {}\n", error.message));
            1
        }
    }
}

pub(crate) fn ps(shell: &mut Shell<'_>, _: &[String], io: &mut Io) -> Result<i32, Abort> {
    let sql = "SELECT id, tool, status, created_at FROM adf_tasks WHERE status IN ('running', 'pending', 'pending_approval') ORDER BY created_at";
    match shell.host.call("db_query", json!({ "sql": sql })) {
        Ok(result) => {
            io.out.push_str("ID\tTOOL\tSTATUS\n");
            for row in result
                .get("rows")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let cell = |k: &str| {
                    row.get(k)
                        .map(|v| {
                            v.as_str()
                                .map(str::to_owned)
                                .unwrap_or_else(|| v.to_string())
                        })
                        .unwrap_or_default()
                };
                io.out.push_str(&format!(
                    "{}\t{}\t{}\n",
                    cell("id"),
                    cell("tool"),
                    cell("status")
                ));
            }
            // Inner loops are the agent's other processes (`kill` stops them).
            if let Ok(list) = shell.host.call("loop_list", json!({})) {
                for l in list
                    .get("loops")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|l| l.get("name").and_then(Value::as_str) != Some("main"))
                {
                    let enabled = l.get("enabled").and_then(Value::as_bool) == Some(true);
                    io.out.push_str(&format!(
                        "{}\tloop\t{}\n",
                        l.get("name").and_then(Value::as_str).unwrap_or(""),
                        if enabled { "enabled" } else { "stopped" }
                    ));
                }
            }
            Ok(0)
        }
        Err(error) => Ok(io.fail("ps", error.message)),
    }
}

/// `kill [-STOP|-TERM|-KILL|-9|-CONT] LOOP…`: stops an inner loop (`loop_manage` sets
/// `enabled: false`; `-CONT` enables it again). Tasks are not the agent's to kill: a running
/// one finishes by itself and a pending approval is the owner's to answer, so a task id is
/// refused with that explanation.
pub(crate) fn kill(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let mut enable = false;
    let mut targets = Vec::new();
    let mut index = 0;
    while index < args.len() {
        let arg = args[index].as_str();
        let signal = match arg {
            "-s" | "-n" => {
                index += 1;
                Some(args.get(index).map(String::as_str).unwrap_or(""))
            }
            other if other.starts_with('-') && other.len() > 1 => Some(&other[1..]),
            _ => None,
        };
        match signal.map(|s| s.trim_start_matches("SIG")) {
            Some("CONT" | "18") => enable = true,
            Some("STOP" | "TERM" | "KILL" | "INT" | "HUP" | "9" | "15" | "19" | "2" | "1") => {
                enable = false
            }
            Some(other) => {
                return Ok(io.fail(
                    "kill",
                    format!("{other}: invalid signal specification (STOP/TERM/KILL stop a loop, CONT starts it)"),
                ));
            }
            None => targets.push(arg.to_owned()),
        }
        index += 1;
    }
    if targets.is_empty() {
        return Ok(io.fail("kill", "usage: kill [-STOP|-CONT] LOOP… (see ps)"));
    }
    let mut status = 0;
    for target in targets {
        if target.eq_ignore_ascii_case("main") {
            status = io.fail(
                "kill",
                "(main) - main is the loop running this shell; end the turn instead (state idle)",
            );
            continue;
        }
        let escaped = target.replace('\'', "''");
        let sql = format!("SELECT status FROM adf_tasks WHERE id = '{escaped}'");
        let task = shell
            .host
            .call("db_query", json!({ "sql": sql }))
            .ok()
            .and_then(|r| {
                r.pointer("/rows/0/status")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
        if let Some(task_status) = task {
            status = io.fail(
                "kill",
                format!(
                    "({target}) - task {target} is {task_status}: tasks are not the agent's to kill (a running task finishes by itself, see `wait {target}`; an approval request is answered by the owner)"
                ),
            );
            continue;
        }
        let call = json!({
            "action": "update",
            "name": target,
            "config": { "enabled": enable },
        });
        match shell.host.call("loop_manage", call) {
            Ok(_) => io.out.push_str(&format!(
                "{} loop {target}\n",
                if enable { "started" } else { "stopped" }
            )),
            Err(error) if error.code == ErrorCode::NotFound => {
                status = io.fail("kill", format!("({target}) - No such process"));
            }
            Err(error) => status = io.fail("kill", error.message),
        }
    }
    Ok(status)
}

pub(crate) fn wait(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let Some(id) = args.first() else {
        return Ok(0);
    };
    let escaped = id.replace('\'', "''");
    let sql = format!("SELECT id, status, result, error FROM adf_tasks WHERE id = '{escaped}'");
    match shell.host.call("db_query", json!({ "sql": sql })) {
        Ok(result) => match result
            .get("rows")
            .and_then(Value::as_array)
            .and_then(|r| r.first())
        {
            Some(row) => {
                print_value(row, io);
                let status = row.get("status").and_then(Value::as_str).unwrap_or("");
                Ok(if status == "failed" || status == "denied" {
                    1
                } else {
                    0
                })
            }
            None => Ok(io.fail("wait", format!("no task {id}"))),
        },
        Err(error) => Ok(io.fail("wait", error.message)),
    }
}

fn config_value(shell: &mut Shell<'_>, section: Option<&str>) -> Result<Value, String> {
    let args = match section {
        Some(section) => json!({ "section": section }),
        None => json!({}),
    };
    shell
        .host
        .call("sys_get_config", args)
        .map_err(|e| e.message)
}

pub(crate) fn whoami(shell: &mut Shell<'_>, _: &[String], io: &mut Io) -> Result<i32, Abort> {
    match config_value(shell, None) {
        Ok(config) => {
            let config = config.get("config").unwrap_or(&config);
            let name = config.get("name").and_then(Value::as_str).unwrap_or("");
            let handle = config.get("handle").and_then(Value::as_str).unwrap_or("");
            io.out.push_str(&format!("{name} ({handle})\n"));
            Ok(0)
        }
        Err(message) => Ok(io.fail("whoami", message)),
    }
}

pub(crate) fn config(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let sub = args.first().map(String::as_str);
    let result = match sub {
        None => config_value(shell, None),
        Some("get") => {
            let path = args.get(1).cloned().unwrap_or_default();
            config_value(shell, None).map(|config| {
                let config = config.get("config").cloned().unwrap_or(config);
                let pointer = format!("/{}", path.replace('.', "/"));
                config.pointer(&pointer).cloned().unwrap_or(Value::Null)
            })
        }
        Some("tools") => config_value(shell, Some("tools")).map(|tools| {
            let list = tools.get("tools").cloned().unwrap_or(tools);
            let all = list.as_array().cloned().unwrap_or_default();
            match args.get(1) {
                Some(name) => Value::Array(
                    all.into_iter()
                        .filter(|t| {
                            t.get("name")
                                .and_then(Value::as_str)
                                .is_some_and(|n| n.contains(name.as_str()))
                        })
                        .collect(),
                ),
                None => {
                    let mut text = String::new();
                    for tool in all {
                        let flag = |k: &str| tool.get(k).and_then(Value::as_bool).unwrap_or(false);
                        let state = if !flag("enabled") {
                            "disabled"
                        } else if crate::ABSORBED
                            .contains(&tool.get("name").and_then(Value::as_str).unwrap_or(""))
                        {
                            "absorbed"
                        } else if !flag("visible") {
                            "hidden"
                        } else {
                            "enabled"
                        };
                        let summary = tool
                            .get("description")
                            .and_then(Value::as_str)
                            .map(|d| d.split(". ").next().unwrap_or(d).to_owned())
                            .unwrap_or_default();
                        text.push_str(&format!(
                            "{}\t{state}{}\t{summary}\n",
                            tool.get("name").and_then(Value::as_str).unwrap_or(""),
                            if flag("restricted") {
                                ",restricted"
                            } else {
                                ""
                            }
                        ));
                    }
                    Value::String(text)
                }
            }
        }),
        Some("card") => config_value(shell, Some("card")),
        Some("provider") => config_value(shell, Some("provider_status")),
        Some("limits") => config_value(shell, Some("limits")),
        Some(other) => Err(format!(
            "unknown subcommand '{other}' (get, tools, card, provider, limits)"
        )),
    };
    Ok(match result {
        Ok(value) => {
            print_value(&value, io);
            0
        }
        Err(message) => io.fail("config", message),
    })
}

pub(crate) fn status(shell: &mut Shell<'_>, _: &[String], io: &mut Io) -> Result<i32, Abort> {
    let state = match current_state(shell) {
        Ok(state) => state,
        Err(message) => return Ok(io.fail("status", message)),
    };
    let files = shell
        .host
        .call("fs_list", json!({}))
        .map(|v| v.as_array().map_or(0, Vec::len));
    let messages = shell.host.call("msg_list", json!({}));
    let timers = shell
        .host
        .call("sys_list_timers", json!({}))
        .map(|v| v.as_array().map_or(0, Vec::len));
    match (files, messages, timers) {
        (Ok(files), Ok(messages), Ok(timers)) => {
            let unread = messages.get("unread").and_then(Value::as_u64).unwrap_or(0);
            io.out.push_str(&format!(
                "state: {state}\nfiles: {files}\nunread messages: {unread}\ntimers: {timers}\n"
            ));
            Ok(0)
        }
        (Err(error), _, _) | (_, Err(error), _) | (_, _, Err(error)) => {
            Ok(io.fail("status", error.message))
        }
    }
}

pub(crate) fn state(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    match args.first() {
        Some(state) => match shell.host.call("sys_set_state", json!({ "state": state })) {
            Ok(_) => {
                io.out.push_str(&format!("state: {state}\n"));
                Ok(0)
            }
            Err(error) => Ok(io.fail("state", error.message)),
        },
        None => match current_state(shell) {
            Ok(state) => {
                io.out.push_str(&format!("{state}\n"));
                Ok(0)
            }
            Err(message) => Ok(io.fail("state", message)),
        },
    }
}

/// The agent's stored state: `config.state` (§6), which `sys_set_state` writes; a config
/// without one is active.
fn current_state(shell: &mut Shell<'_>) -> Result<String, String> {
    let config = config_value(shell, None)?;
    let config = config.get("config").unwrap_or(&config);
    Ok(config
        .get("state")
        .and_then(Value::as_str)
        .unwrap_or("active")
        .to_owned())
}

pub(crate) fn meta(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let sub = args.first().map(String::as_str);
    let arg = |i: usize| args.get(i).cloned();
    let (tool, call) = match sub {
        None | Some("list") => ("sys_get_meta", json!({})),
        Some("get") => match arg(1) {
            Some(key) => ("sys_get_meta", json!({ "key": key })),
            None => return Ok(io.fail("meta", "usage: meta get KEY")),
        },
        Some("set") => match (arg(1), arg(2)) {
            (Some(key), Some(value)) => ("sys_set_meta", json!({ "key": key, "value": value })),
            (Some(key), None) => (
                "sys_set_meta",
                json!({ "key": key, "value": std::mem::take(&mut io.stdin).trim_end_matches('\n') }),
            ),
            _ => return Ok(io.fail("meta", "usage: meta set KEY VALUE")),
        },
        Some("del" | "delete" | "rm") => match arg(1) {
            Some(key) => ("sys_delete_meta", json!({ "key": key })),
            None => return Ok(io.fail("meta", "usage: meta del KEY")),
        },
        Some("incr") => match (
            arg(1),
            arg(2).and_then(|n| n.parse::<f64>().ok()).or(Some(1.0)),
        ) {
            (Some(key), Some(n)) => (
                "sys_set_meta",
                json!({ "key": key, "value": n, "inc": true }),
            ),
            _ => return Ok(io.fail("meta", "usage: meta incr KEY [N]")),
        },
        Some(other) => {
            return Ok(io.fail(
                "meta",
                format!("unknown subcommand '{other}' (get, set, del, incr, list)"),
            ));
        }
    };
    match shell.host.call(tool, call) {
        Ok(value) => {
            let shown = match (sub, &value) {
                (Some("get"), Value::Object(o)) => o.get("value").cloned().unwrap_or(value.clone()),
                (Some("set" | "del" | "delete" | "rm"), _) => Value::Null,
                (Some("incr"), Value::Object(o)) => o
                    .get("value")
                    .or_else(|| o.get("total"))
                    .cloned()
                    .unwrap_or(value.clone()),
                _ => value,
            };
            print_value(&shown, io);
            Ok(0)
        }
        Err(error) => Ok(io.fail("meta", error.message)),
    }
}

/// `./script.sh [ARGS]`: the whole file parsed and run in this shell.
pub(crate) fn script(shell: &mut Shell<'_>, argv: &[String], io: &mut Io) -> Result<i32, Abort> {
    let Some(name) = argv.first() else {
        return Ok(0);
    };
    let path = name.trim_start_matches("./");
    if !path.ends_with(".sh") {
        if path.ends_with(".ts") || path.ends_with(".js") {
            return Ok(lambda(shell, path, argv, io));
        }
        io.err.push_str(&format!(
            "adf_shell: {name}: only .sh scripts and .ts/.js lambdas run with ./\n"
        ));
        return Ok(126);
    }
    let source = match fs::read_text(shell, path) {
        Ok(source) => source,
        Err(message) => {
            io.err.push_str(&format!("adf_shell: {message}\n"));
            return Ok(127);
        }
    };
    if shell.depth >= MAX_NESTING {
        return Err(Abort(format!(
            "scripts nested deeper than {MAX_NESTING} levels"
        )));
    }
    let script = match crate::parse::parse(&source) {
        Ok(script) => script,
        Err(error) => {
            io.err.push_str(&format!("{path}: syntax error: {error}\n"));
            return Ok(2);
        }
    };
    shell.depth += 1;
    let mut inner = Io {
        stdin: std::mem::take(&mut io.stdin),
        ..Io::default()
    };
    let result = shell.script(&script, &mut inner);
    shell.depth -= 1;
    io.out.push_str(&inner.out);
    io.err.push_str(&inner.err);
    result
}
