//! Commands over the agent's own tools: messaging, network, timers, code, processes
//! (tasks), identity and config, and `./script.sh`. Each is a thin translation to one tool
//! call; the tool's result is printed as text (strings raw, the rest as JSON).

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

pub(crate) fn curl(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let mut method: Option<String> = None;
    let mut headers = serde_json::Map::new();
    let mut body: Option<String> = None;
    let mut output: Option<String> = None;
    let mut url = None;
    let mut index = 0;
    while index < args.len() {
        let arg = &args[index];
        let mut value = || {
            index += 1;
            args.get(index).cloned()
        };
        match arg.as_str() {
            "-s" | "--silent" | "-S" | "-L" | "--location" | "-q" | "-f" | "-sS" | "-sL"
            | "-fsSL" => {}
            "-X" | "--request" => method = value(),
            "-H" | "--header" => {
                if let Some(header) = value()
                    && let Some((name, v)) = header.split_once(':')
                {
                    headers.insert(name.trim().to_owned(), Value::String(v.trim().to_owned()));
                }
            }
            "-d" | "--data" | "--data-raw" | "--json" => {
                body = value();
                if arg == "--json" {
                    headers.insert(
                        "Content-Type".into(),
                        Value::String("application/json".into()),
                    );
                }
            }
            "-o" | "-O" | "--output" => output = value(),
            other if other.starts_with('-') => {
                return Ok(io.fail(
                    "curl",
                    format!("unsupported option '{other}' (see curl -h)"),
                ));
            }
            other => url = Some(other.to_owned()),
        }
        index += 1;
    }
    let Some(url) = url else {
        return Ok(io.fail(
            "curl",
            "usage: curl [-X METHOD] [-H 'K: V'] [-d DATA] [-o FILE] URL",
        ));
    };
    let mut request = json!({ "url": url });
    if let Some(method) = method.or_else(|| body.as_ref().map(|_| "POST".to_owned())) {
        request["method"] = Value::String(method);
    }
    if !headers.is_empty() {
        request["headers"] = Value::Object(headers);
    }
    if let Some(body) = body {
        request["body"] = Value::String(body);
    }
    match shell.host.call("sys_fetch", request) {
        Ok(response) => {
            let text = match response.get("body") {
                Some(Value::String(text)) => text.clone(),
                Some(other) => other.to_string(),
                None => response.to_string(),
            };
            match output {
                Some(path) => {
                    if let Err(message) = fs::write_file(shell, &path, &text, false) {
                        return Ok(io.fail("curl", message));
                    }
                }
                None => io.out.push_str(&text),
            }
            let status = response
                .get("status")
                .and_then(Value::as_u64)
                .unwrap_or(200);
            Ok(if status >= 400 { 22 } else { 0 })
        }
        Err(error) => Ok(io.fail("curl", error.message)),
    }
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

pub(crate) fn node(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let code = match args {
        [flag, code, ..] if flag == "-e" || flag == "--eval" => code.clone(),
        [] => std::mem::take(&mut io.stdin),
        _ => return Ok(io.fail("node", "usage: node -e CODE (or code on stdin)")),
    };
    match shell.host.call("sys_code", json!({ "code": code })) {
        Ok(value) => {
            if let Some(stdout) = value.get("stdout").and_then(Value::as_str) {
                io.out.push_str(stdout);
            }
            if let Some(result) = value.get("result").filter(|v| !v.is_null()) {
                print_value(result, io);
            }
            Ok(0)
        }
        Err(error) => Ok(io.fail("node", error.message)),
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
            Ok(0)
        }
        Err(error) => Ok(io.fail("ps", error.message)),
    }
}

pub(crate) fn kill(_: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let _ = args;
    Ok(io.fail("kill", "cancelling tasks from the shell is not supported yet (the owner denies or cancels them with `adf deny`)"))
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
    let state = shell
        .host
        .call("sys_get_meta", json!({ "key": "adf_state" }))
        .ok()
        .and_then(|v| v.get("value").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| "active".into());
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
        None => match shell
            .host
            .call("sys_get_meta", json!({ "key": "adf_state" }))
        {
            Ok(value) => {
                let state = value
                    .get("value")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| match &value {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    });
                io.out.push_str(&format!("{state}\n"));
                Ok(0)
            }
            Err(_) => {
                io.out.push_str("active\n");
                Ok(0)
            }
        },
    }
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
            let source = format!(
                "{path}:{}",
                argv.get(1).map(String::as_str).unwrap_or("main")
            );
            return Ok(call_print(
                shell,
                path,
                "sys_lambda",
                json!({ "source": source }),
                io,
            ));
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
