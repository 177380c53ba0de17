//! The shell's own semantics, beyond what bash can referee: refused constructs, bounds,
//! hostile lines, the tool pipeline inside a command line (protection, approvals, disabled
//! tools), media files, tool absorption, and one test per row of the guide's command table.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use adf_runtime::tools::approval::{ApproveAll, DenyAll};
use adf_runtime::tools::{ApprovalRequest, Approver, Decision, ToolCaller, ToolError};
use adf_shell::{Limits, RegistryHost, Shell};
use adf_store::AdfFile;
use common::{agent, model, put, registry, run_line, shell_call, text, to_run};
use serde_json::json;

/// Approves every request and remembers which tools it was asked about.
#[derive(Default)]
struct Recording {
    asked: std::sync::Mutex<Vec<String>>,
    approve: bool,
}

impl Approver for Recording {
    fn decide(&self, _: &mut AdfFile, request: &ApprovalRequest) -> Result<Decision, ToolError> {
        self.asked.lock().unwrap().push(request.tool.clone());
        Ok(if self.approve {
            Decision::Approved
        } else {
            Decision::Denied("the owner said no".into())
        })
    }
}

fn digest(file: &AdfFile) -> BTreeMap<String, Vec<u8>> {
    file.file_list("")
        .unwrap()
        .into_iter()
        .map(|info| {
            let content = file.file_read(&info.path).unwrap().unwrap().content;
            (info.path, content)
        })
        .collect()
}

fn with_limits(files: &[(&str, &str)], limits: Limits, line: &str) -> adf_shell::Outcome {
    let (_dir, mut file) = agent();
    for (path, content) in files {
        put(&mut file, path, content);
    }
    let registry = registry();
    let caller = model();
    let mut host = RegistryHost::new(&mut file, &registry, &caller, &DenyAll);
    Shell::new(&mut host, BTreeMap::new(), limits).run(line)
}

#[test]
fn tol_54_unsupported_syntax_is_a_parse_error_naming_the_construct_and_the_alternative() {
    let cases = [
        ("echo x &", "background", "at"),
        ("(echo x)", "subshell", "&&"),
        ("ls *.md", "glob", "find"),
        ("echo $((1+2))", "arithmetic", "jq"),
        ("cat <(echo a)", "process substitution", "file"),
        ("if true; then echo a; fi", "if", "&&"),
        ("for f in a b; do echo $f; done", "for", "xargs"),
        ("while true; do echo; done", "while", "xargs"),
        ("case x in x) echo;; esac", "case", "&&"),
        ("echo `date`", "backticks", "$("),
        ("echo {a,b}", "brace expansion", "quote"),
        ("echo ${X:-d}", "parameter expansion", "${NAME}"),
    ];
    for (line, construct, hint) in cases {
        let run = run_line(&[], line);
        assert_eq!(run.exit_code, 2, "{line}: {run:?}");
        assert!(run.stdout.is_empty(), "{line} printed {:?}", run.stdout);
        assert!(
            run.stderr.contains(construct) && run.stderr.contains(hint),
            "{line}: {}",
            run.stderr
        );
    }
}

#[test]
fn hostile_lines_fail_cleanly() {
    // Unterminated quotes and heredocs.
    for line in [
        "echo 'open",
        "echo \"open",
        "cat <<EOF\nno end",
        "echo $(echo a",
        "echo ${X",
    ] {
        let run = run_line(&[], line);
        assert_eq!(run.exit_code, 2, "{line}: {run:?}");
        assert!(
            run.stderr.contains("unterminated")
                || run.stderr.contains("not closed")
                || run.stderr.contains("no body"),
            "{line}: {}",
            run.stderr
        );
    }
    // NUL bytes.
    let run = run_line(&[], "echo a\0b");
    assert_eq!(run.exit_code, 2);
    assert!(run.stderr.contains("NUL"), "{}", run.stderr);
    // Nesting far past the bound is refused without exhausting the stack.
    let deep = format!("{}x{}", "$(echo ".repeat(5_000), ")".repeat(5_000));
    let run = run_line(&[], &format!("echo {deep}"));
    assert_eq!(run.exit_code, 2);
    assert!(run.stderr.contains("nesting"), "{}", run.stderr);
    // Within the bound it works.
    let nested = format!("echo {}ok{}", "$(echo ".repeat(20), ")".repeat(20));
    assert_eq!(run_line(&[], &nested).stdout, "ok\n");
}

#[test]
fn paths_that_leave_the_flat_filesystem_are_refused() {
    let (run, files) = common::run_line_with(
        &[("a.txt", "a\n")],
        "cat ../a.txt; echo x > ../escape.txt; echo x > lib/../b.txt; echo $?",
    );
    assert_eq!(run.stdout, "1\n");
    assert!(run.stderr.contains("flat"), "{}", run.stderr);
    assert!(
        !files
            .keys()
            .any(|p| p.contains("escape") || p.contains("b.txt")),
        "{files:?}"
    );
}

#[test]
fn output_is_capped_with_a_marker() {
    let limits = Limits {
        max_output: 100,
        ..Limits::default()
    };
    let body = "y\n".repeat(10_000);
    let outcome = with_limits(&[("big.txt", &body)], limits, "cat big.txt; echo err >&2");
    assert!(outcome.stdout.len() < 400, "{}", outcome.stdout.len());
    assert!(outcome.stdout.starts_with("y\ny\n"));
    assert!(
        outcome
            .stdout
            .contains("stdout truncated: 19900 more bytes"),
        "{}",
        outcome.stdout
    );
    assert_eq!(outcome.stderr, "err\n");
    assert_eq!(outcome.exit_code, 0);
}

#[test]
fn a_huge_heredoc_is_bounded_by_the_output_cap() {
    let body = "line of a huge heredoc\n".repeat(200_000);
    let run = run_line(&[], &format!("cat <<EOF | wc -l\n{body}EOF"));
    assert_eq!(run.stdout, "200000\n");
    let run = run_line(&[], &format!("cat <<EOF\n{body}EOF"));
    assert!(run.stdout.contains("truncated"));
    assert!(run.stdout.len() < 100_000);
}

#[test]
fn the_step_budget_stops_a_runaway_line() {
    let limits = Limits {
        max_steps: 5,
        ..Limits::default()
    };
    let outcome = with_limits(
        &[],
        limits,
        "echo 1; echo 2; echo 3; echo 4; echo 5; echo 6; echo 7",
    );
    assert_eq!(outcome.stdout, "1\n2\n3\n4\n5\n");
    assert!(outcome.stderr.contains("step budget"), "{}", outcome.stderr);
    assert_eq!(outcome.exit_code, 124);
    // xargs counts every command it runs.
    let outcome = with_limits(
        &[],
        Limits {
            max_steps: 5,
            ..Limits::default()
        },
        "echo a b c d e f g | xargs -n 1 echo",
    );
    assert!(outcome.stderr.contains("step budget"), "{}", outcome.stderr);
}

#[test]
fn sleep_is_capped() {
    let limits = Limits {
        max_sleep: std::time::Duration::ZERO,
        ..Limits::default()
    };
    let outcome = with_limits(&[], limits, "sleep 3600 && echo woke");
    assert_eq!(outcome.stdout, "woke\n");
    assert!(outcome.stderr.contains("capped"), "{}", outcome.stderr);
    let run = run_line(&[], "sleep forever; echo $?");
    assert_eq!(run.stdout, "1\n");
}

#[test]
fn a_redirect_onto_a_read_only_file_asks_the_owner_and_a_denial_leaves_the_file() {
    let (_dir, mut file) = agent();
    registry()
        .call(
            &mut file,
            &ToolCaller::Owner,
            "fs_write",
            json!({ "mode": "write", "path": "locked.md", "content": "keep\n", "protection": "read_only" }),
            &DenyAll,
        )
        .unwrap();
    let before = digest(&file);
    let owner = Recording::default();
    let run = to_run(
        &shell_call(
            &mut file,
            &model(),
            "echo overwrite > locked.md; echo $?",
            &owner,
        )
        .unwrap(),
    );
    assert_eq!(run.stdout, "1\n");
    assert!(run.stderr.contains("locked.md"), "{}", run.stderr);
    assert_eq!(
        *owner.asked.lock().unwrap(),
        ["fs_write"],
        "the owner was asked to lift the protection"
    );
    assert_eq!(digest(&file), before, "a denied write changed a file");

    let owner = Recording {
        approve: true,
        ..Recording::default()
    };
    let run = to_run(
        &shell_call(
            &mut file,
            &model(),
            "echo approved >> locked.md && cat locked.md",
            &owner,
        )
        .unwrap(),
    );
    assert_eq!(run.stdout, "keep\napproved\n", "{run:?}");
    assert_eq!(owner.asked.lock().unwrap().len(), 1);
}

#[test]
fn restricted_tools_inside_a_pipeline_wait_for_the_owner() {
    let (_dir, mut file) = agent();
    file.config_set_path(
        adf_store::Caller::Owner,
        "tools.db_execute.restricted",
        adf_store::ConfigAction::Set,
        json!(true),
    )
    .unwrap();
    let denied = Recording::default();
    let run = to_run(
        &shell_call(
            &mut file,
            &model(),
            "sqlite3 'CREATE TABLE local_t(a)' || echo refused",
            &denied,
        )
        .unwrap(),
    );
    assert_eq!(run.stdout, "refused\n");
    assert_eq!(*denied.asked.lock().unwrap(), ["db_execute"]);
    let approved = Recording {
        approve: true,
        ..Recording::default()
    };
    let line = "sqlite3 'CREATE TABLE local_t(a)' && sqlite3 \"INSERT INTO local_t VALUES ('x')\" && sqlite3 -json 'SELECT a FROM local_t'";
    let run = to_run(&shell_call(&mut file, &model(), line, &approved).unwrap());
    assert_eq!(run.stdout, "[{\"a\":\"x\"}]\n", "{run:?}");
    assert_eq!(
        approved.asked.lock().unwrap().len(),
        2,
        "each restricted call asks"
    );
}

#[test]
fn a_disabled_tool_stays_disabled_inside_the_shell() {
    let (_dir, mut file) = agent();
    file.config_set_path(
        adf_store::Caller::Owner,
        "tools.fs_delete.enabled",
        adf_store::ConfigAction::Set,
        json!(false),
    )
    .unwrap();
    put(&mut file, "a.txt", "a\n");
    let run = to_run(&shell_call(&mut file, &model(), "rm a.txt", &ApproveAll).unwrap());
    assert_eq!(run.exit_code, 1);
    assert!(run.stderr.contains("disabled"), "{}", run.stderr);
    assert_eq!(text(&file, "a.txt").as_deref(), Some("a\n"));
}

#[test]
fn adf_shell_itself_follows_its_declaration() {
    let (_dir, mut file) = agent();
    file.config_set_path(
        adf_store::Caller::Owner,
        "tools.adf_shell.enabled",
        adf_store::ConfigAction::Set,
        json!(false),
    )
    .unwrap();
    let error = shell_call(&mut file, &model(), "echo hi", &ApproveAll).unwrap_err();
    assert!(error.message.contains("disabled"), "{error}");
}

#[test]
fn tol_58_media_cat_prints_a_marker_and_manifest_never_base64() {
    let (_dir, mut file) = agent();
    let png = [
        0x89u8, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, 0xff, 0xfe,
    ];
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(png);
    registry()
        .call(
            &mut file,
            &ToolCaller::Owner,
            "fs_write",
            json!({ "mode": "write", "path": "pic.png", "content": encoded, "encoding": "base64", "mime_type": "image/png" }),
            &DenyAll,
        )
        .unwrap();
    let run = to_run(&shell_call(&mut file, &model(), "cat pic.png", &DenyAll).unwrap());
    assert_eq!(run.exit_code, 0);
    assert!(
        run.stdout
            .starts_with("[media: pic.png (image/png, 14 bytes)]\n"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("\"media\""), "{}", run.stdout);
    assert!(!run.stdout.contains(&encoded), "base64 reached stdout");
    // A text command refuses it rather than printing bytes.
    let run = to_run(&shell_call(&mut file, &model(), "grep x pic.png", &DenyAll).unwrap());
    assert_eq!(run.exit_code, 2);
    assert!(run.stderr.contains("binary"), "{}", run.stderr);
}

#[test]
fn tol_52_prm_35_absorbed_tools_leave_the_model_list_while_adf_shell_is_advertised() {
    let (_dir, mut file) = agent();
    for tool in ["sys_fetch", "sys_code", "db_query"] {
        file.config_set_path(
            adf_store::Caller::Owner,
            &format!("tools.{tool}.enabled"),
            adf_store::ConfigAction::Set,
            json!(true),
        )
        .unwrap();
    }
    let config = file.config().unwrap();
    let names = |config: &serde_json::Value| -> Vec<String> {
        registry()
            .model_definitions(config)
            .iter()
            .map(|d| d["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let with_shell = names(&config);
    assert!(with_shell.contains(&"adf_shell".to_owned()));
    for absorbed in adf_shell::ABSORBED {
        assert!(
            !with_shell.contains(&(*absorbed).to_owned()),
            "{absorbed} still advertised: {with_shell:?}"
        );
    }
    // Turn tools stay: the shell has no `say`/`ask`.
    assert!(
        with_shell.contains(&"say".to_owned())
            || with_shell.contains(&"ask".to_owned())
            || !with_shell.is_empty()
    );
    file.config_set_path(
        adf_store::Caller::Owner,
        "tools.adf_shell.enabled",
        adf_store::ConfigAction::Set,
        json!(false),
    )
    .unwrap();
    let without = names(&file.config().unwrap());
    assert!(without.contains(&"fs_read".to_owned()), "{without:?}");
    assert!(!without.contains(&"adf_shell".to_owned()));
}

#[test]
fn tol_56_config_tools_lists_every_tool_and_prints_schemas() {
    let run = run_line(&[], "config tools");
    assert_eq!(run.exit_code, 0);
    for tool in ["fs_read", "fs_delete", "sys_code", "msg_send"] {
        assert!(
            run.stdout
                .lines()
                .any(|l| l.starts_with(&format!("{tool}\t"))),
            "{tool} missing:\n{}",
            run.stdout
        );
    }
    assert!(run.stdout.contains("absorbed"), "{}", run.stdout);
    let run = run_line(
        &[],
        "config tools fs_write | jq -r '.[0].parameters.properties.mode.enum | join(\",\")'",
    );
    assert_eq!(run.stdout, "write,edit,append\n", "{run:?}");
}

#[test]
fn tol_57_scripts_run_whole_files_with_heredocs_and_chains() {
    let script = "#!/bin/sh\n# build a report\ncat <<EOF > report.md\n# Report\nEOF\ngrep -c apple notes.md >> report.md\nfalse\necho after-failure\nfalse && echo skipped\necho done\n";
    let (run, files) = common::run_line_with(
        &[("job.sh", script), ("notes.md", "apple\napple pie\npear\n")],
        "./job.sh",
    );
    assert_eq!(run.stdout, "after-failure\ndone\n", "{run:?}");
    assert_eq!(
        files.get("report.md").map(String::as_str),
        Some("# Report\n2\n")
    );
    // A missing script is 127, a syntax error in one is 2.
    assert_eq!(run_line(&[], "./nope.sh").exit_code, 127);
    assert_eq!(
        run_line(&[("bad.sh", "echo 'open\n")], "./bad.sh").exit_code,
        2
    );
    // A script that runs itself stops at the nesting bound.
    let run = run_line(&[("loop.sh", "./loop.sh\n")], "./loop.sh");
    assert_eq!(run.exit_code, 124);
    assert!(run.stderr.contains("nested"), "{}", run.stderr);
}

#[test]
fn env_from_the_call_is_exported() {
    let (_dir, mut file) = agent();
    let registry = registry();
    let value = common::shell_call_with(
        &std::sync::Arc::new(registry),
        &mut file,
        &model(),
        json!({ "command": "echo $EVENT && env", "env": { "EVENT": "file_change" } }),
        &DenyAll,
    )
    .unwrap();
    assert_eq!(value["stdout"], "file_change\nEVENT=file_change\n");
}

/// One row per row of the guide's command table: each command runs through its tool.
#[test]
fn every_row_of_the_command_table_runs() {
    let files = [("notes.md", "b\na\nb\n"), ("data.json", "{\"k\":[1,2]}")];
    let rows: &[(&str, i32, &str)] = &[
        // Filesystem
        ("cat notes.md", 0, "b\na\nb\n"),
        ("ls notes.md", 0, "notes.md\n"),
        ("ls -l notes.md | cut -d' ' -f1", 0, "none\n"),
        (
            "rm notes.md && cat notes.md 2>/dev/null || echo gone",
            0,
            "gone\n",
        ),
        ("cp notes.md n2.md && cat n2.md | wc -l", 0, "3\n"),
        (
            "mv notes.md n3.md && ls n3.md && ls notes.md 2>/dev/null; echo $?",
            0,
            "n3.md\n1\n",
        ),
        ("touch t.md && wc -c < t.md", 0, "0\n"),
        ("find -name 'notes.*'", 0, "notes.md\n"),
        ("du notes.md", 0, "6\tnotes.md\n"),
        ("chmod read_only notes.md; echo $?", 0, "1\n"),
        ("head -1 notes.md", 0, "b\n"),
        ("tail -1 notes.md", 0, "b\n"),
        // Text (bash-compared in the table; here one line each for the record)
        ("grep -c b notes.md", 0, "2\n"),
        ("sed -n 2p notes.md", 0, "a\n"),
        ("sort notes.md | uniq -c", 0, "      1 a\n      2 b\n"),
        ("wc -l notes.md", 0, "3 notes.md\n"),
        ("echo a:b | cut -d: -f2", 0, "b\n"),
        ("echo ab | tr a b", 0, "bb\n"),
        ("echo x | tee t2.md >/dev/null; cat t2.md", 0, "x\n"),
        ("echo ab | rev", 0, "ba\n"),
        ("tac notes.md | head -2", 0, "b\na\n"),
        (
            "echo b > x.md; diff notes.md x.md >/dev/null; echo $?",
            0,
            "1\n",
        ),
        ("echo notes.md | xargs cat | wc -l", 0, "3\n"),
        // Data
        ("jq -c .k data.json", 0, "[1,2]\n"),
        (
            "sqlite3 'CREATE TABLE local_n(v)' && sqlite3 'INSERT INTO local_n VALUES (7)' && sqlite3 'SELECT v FROM local_n'",
            0,
            "7\n",
        ),
        // Messaging (no mesh outside the daemon: the guide's MESH_NOT_ENABLED)
        ("msg list | jq .total", 0, "0\n"),
        ("msg read", 0, "[]\n"),
        ("who 2>&1 | grep -c 'adf daemon'", 0, "1\n"),
        ("ping bob 2>&1 | grep -c mesh", 0, "1\n"),
        // Network: sys_fetch through the runtime's driver (a closed loopback port: curl's 7,
        // wget's 4; tests/network.rs serves real responses).
        ("curl -s http://127.0.0.1:1/; echo $?", 0, "7\n"),
        ("wget -q http://127.0.0.1:1/; echo $?", 0, "4\n"),
        // Timers
        ("at +5m remind me | jq -r .payload", 0, "remind me\n"),
        (
            "crontab '0 9 * * 1' standup | jq -r .schedule.cron && crontab -l | jq length",
            0,
            "0 9 * * 1\n1\n",
        ),
        // Code: sys_code in the sandbox (more in tests/network.rs).
        ("node -e 'console.log(1+1)'", 0, "2\n"),
        // Process
        ("ps | head -1", 0, "ID\tTOOL\tSTATUS\n"),
        ("kill nosuch; echo $?", 0, "1\n"),
        ("wait nope; echo $?", 0, "1\n"),
        // Identity and config
        ("whoami | grep -c '('", 0, "1\n"),
        ("config get model.temperature", 0, "0.7\n"),
        ("status | head -1", 0, "state: active\n"),
        ("state", 0, "active\n"),
        // Both read the stored state that `state X` (sys_set_state) just wrote.
        ("state hibernate >/dev/null && state", 0, "hibernate\n"),
        (
            "state idle >/dev/null && status | head -1",
            0,
            "state: idle\n",
        ),
        (
            "meta set k v && meta get k && meta incr n 2 && meta incr n 3",
            0,
            "v\n2\n5\n",
        ),
        ("X=1 env", 0, "X=1\n"),
        ("export Y=2 && env", 0, "Y=2\n"),
        ("pwd", 0, "/\n"),
        ("date -u +%Y | wc -c", 0, "5\n"),
        // General
        (
            "help | head -1",
            0,
            "adf_shell commands (COMMAND -h for usage):\n",
        ),
        ("echo -n a; echo b", 0, "ab\n"),
        ("true && false || echo f", 0, "f\n"),
        ("sleep 0 && echo slept", 0, "slept\n"),
        ("nosuch; echo $?", 0, "127\n"),
    ];
    let mut failures = Vec::new();
    for (line, exit, stdout) in rows {
        let run = run_line(&files, line);
        if run.exit_code != *exit || run.stdout != *stdout {
            failures.push(format!("{line:?}: expected {exit} {stdout:?}, got {run:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_command_prints_usage_with_h() {
    let run = run_line(&[], "help");
    let names: Vec<String> = run
        .stdout
        .lines()
        .filter_map(|l| l.split_once(": "))
        .filter(|(category, _)| !matches!(*category, "Syntax" | "Not supported"))
        .map(|(_, n)| n.to_owned())
        .flat_map(|n| n.split(' ').map(str::to_owned).collect::<Vec<_>>())
        .collect();
    assert!(names.len() >= 45, "{names:?}");
    for name in names {
        let flag = if matches!(name.as_str(), "sort" | "du" | "echo") {
            "--help"
        } else {
            "-h"
        };
        let run = run_line(&[], &format!("{name} {flag}"));
        assert_eq!(run.exit_code, 0, "{name}: {run:?}");
        assert!(
            run.stdout.starts_with(&format!("usage: {name}")),
            "{name}: {}",
            run.stdout
        );
    }
}

#[test]
fn tol_55_state_from_the_shell_sets_the_agent_state() {
    let (_dir, mut file) = agent();
    let run = to_run(
        &shell_call(
            &mut file,
            &model(),
            "echo done > out.md && state idle",
            &DenyAll,
        )
        .unwrap(),
    );
    assert_eq!(run.stdout, "state: idle\n");
    assert_eq!(text(&file, "out.md").as_deref(), Some("done\n"));
}

#[test]
fn kill_stops_and_restarts_an_inner_loop_and_refuses_tasks_and_main() {
    let (_dir, mut file) = agent();
    registry()
        .call(
            &mut file,
            &model(),
            "loop_manage",
            json!({ "action": "create", "name": "watcher", "config": { "goal": "watch the inbox", "enabled": true } }),
            &DenyAll,
        )
        .unwrap();
    let enabled = |file: &AdfFile| {
        file.config().unwrap()["loops"][0]["enabled"]
            .as_bool()
            .unwrap()
    };
    let run = |file: &mut AdfFile, line: &str| {
        to_run(&shell_call(file, &model(), line, &DenyAll).unwrap())
    };

    let ps = run(&mut file, "ps | grep watcher");
    assert_eq!(ps.stdout, "watcher\tloop\tenabled\n", "{ps:?}");
    let stop = run(&mut file, "kill watcher");
    assert_eq!(
        (stop.stdout.as_str(), stop.exit_code),
        ("stopped loop watcher\n", 0),
        "{stop:?}"
    );
    assert!(!enabled(&file));
    assert_eq!(
        run(&mut file, "ps | grep watcher").stdout,
        "watcher\tloop\tstopped\n"
    );
    let start = run(&mut file, "kill -CONT watcher");
    assert_eq!(start.stdout, "started loop watcher\n", "{start:?}");
    assert!(enabled(&file));
    assert_eq!(
        run(&mut file, "kill -9 watcher").stdout,
        "stopped loop watcher\n"
    );
    assert!(!enabled(&file));

    let main = run(&mut file, "kill main");
    assert_eq!(main.exit_code, 1);
    assert!(main.stderr.contains("end the turn"), "{main:?}");
    let missing = run(&mut file, "kill ghost");
    assert_eq!(
        (missing.stderr.as_str(), missing.exit_code),
        ("kill: (ghost) - No such process\n", 1)
    );
    let bad = run(&mut file, "kill -WINCH watcher");
    assert!(bad.stderr.contains("invalid signal"), "{bad:?}");

    // A task the model queued: listed by ps, and not the agent's to kill.
    let queued = registry()
        .call(
            &mut file,
            &model(),
            "fs_list",
            json!({ "_async": true }),
            &DenyAll,
        )
        .unwrap();
    let adf_runtime::tools::CallOutcome::Queued { task_id, .. } = queued else {
        panic!("an _async call is queued, got {queued:?}")
    };
    let listed = run(&mut file, &format!("ps | grep -c {task_id}"));
    assert_eq!(listed.stdout, "1\n", "{listed:?}");
    let refused = run(&mut file, &format!("kill {task_id}"));
    assert_eq!(refused.exit_code, 1);
    assert!(
        refused.stderr.contains("not the agent's to kill"),
        "{refused:?}"
    );
    assert_eq!(file.task(&task_id).unwrap().unwrap().status, "running");
}

#[test]
fn chmod_is_refused_for_the_agent_and_leaves_the_protection() {
    let (_dir, mut file) = agent();
    put(&mut file, "notes.md", "x\n");
    let before = digest(&file);
    let run = to_run(
        &shell_call(
            &mut file,
            &model(),
            "chmod read_only notes.md a.md; echo $?",
            &ApproveAll,
        )
        .unwrap(),
    );
    assert_eq!(run.stdout, "1\n");
    assert_eq!(run.stderr.lines().count(), 2, "one line per file: {run:?}");
    assert!(run.stderr.contains("owner or authorized code"), "{run:?}");
    let notes = file.file_read("notes.md").unwrap().unwrap();
    assert_eq!(notes.info.protection.as_str(), "none");
    assert_eq!(digest(&file), before);
    let usage =
        to_run(&shell_call(&mut file, &model(), "chmod 644 notes.md", &ApproveAll).unwrap());
    assert!(usage.stderr.contains("numeric modes"), "{usage:?}");
}

/// The `sys_shell` declaration (name, description, argument schema) against a snapshot taken
/// before it moved to `adf_runtime::declare_tool!`: models see the same tool, byte for byte.
#[test]
fn shell_tool_declaration_matches_its_snapshot() {
    let tool = adf_shell::tool();
    assert_eq!(tool.name(), adf_shell::SHELL_TOOL);
    adf_testkit::snapshot::assert_json_snapshot(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/tool-declarations.json"
        ),
        &json!([{
            "name": tool.name(),
            "description": tool.description(),
            "parameters": tool.parameters(),
        }]),
    );
}
