//! Pathological input for every evaluator the shell reaches (issue 28 findings 1 and 2, "every
//! tool call is bounded"): deep nesting, endless generators, huge repetition, catastrophic
//! patterns. Each case: the test process survives (a stack overflow here would abort it), the
//! call ends with a clear error within its budget, and the next call on the same agent works.
//! jq runs in its worker process (`adf-jq-worker`, which cargo builds beside this binary).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use adf_runtime::tools::ToolCaller;
use adf_runtime::tools::approval::ApproveAll;
use adf_shell::{Limits, RegistryHost, Shell};
use adf_store::AdfFile;
use common::{agent, model, put, registry, shell_call, shell_call_async, to_run};
use serde_json::json;

/// The cases that count the worker processes left behind run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn line(file: &mut AdfFile, command: &str) -> common::Run {
    to_run(&shell_call(file, &model(), command, &ApproveAll).unwrap())
}

/// After a pathological call: the same agent still answers an ordinary jq line.
fn still_works(file: &mut AdfFile) {
    let run = line(file, "echo '{\"ok\":[1,2]}' | jq -c .ok");
    assert_eq!(
        (run.stdout.as_str(), run.exit_code),
        ("[1,2]\n", 0),
        "{run:?}"
    );
}

/// Sets `limits.execution_timeout_ms`, the budget of one shell line.
fn set_timeout(file: &mut AdfFile, ms: u64) {
    file.config_set_path(
        adf_store::Caller::Owner,
        "limits.execution_timeout_ms",
        adf_store::ConfigAction::Set,
        json!(ms),
    )
    .unwrap();
}

/// The jq workers this process started that are still alive (Linux `/proc`; elsewhere none
/// are seen, and the assertions on it hold trivially).
fn live_workers() -> usize {
    adf_testkit::processes::live_children_named("adf-jq-worker")
}

/// Waits (bounded) until no worker of this process is left.
fn workers_gone_within(limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if live_workers() == 0 {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn jq_unbounded_recursion_in_the_filter_is_a_clear_error_not_a_crash() {
    let _serial = serial();
    let (_dir, mut file) = agent();
    let started = Instant::now();
    let run = line(&mut file, "jq -n 'def f: [f]; f'");
    assert_eq!(run.exit_code, 5, "{run:?}");
    assert!(run.stderr.contains("recurses too deeply"), "{run:?}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "within the line's budget"
    );
    // A filter nested deeper than any stack: jaq's parser recurses per level.
    let deep = format!(
        "jq -n '{}1{}'",
        "[".repeat(2_000_000),
        "]".repeat(2_000_000)
    );
    let run = line(&mut file, &deep);
    assert_eq!(run.exit_code, 5, "{}", &run.stderr);
    assert!(
        run.stderr.contains("recurses too deeply"),
        "{}",
        &run.stderr
    );
    still_works(&mut file);
    assert!(workers_gone_within(Duration::from_secs(5)));
}

#[test]
fn jq_input_nested_past_the_bound_is_refused_before_parsing() {
    let _serial = serial();
    let (_dir, mut file) = agent();
    let limit = Limits::default().max_json_depth;
    // The case: 200,000 `[` (the file is fetched or received data).
    put(&mut file, "deep.json", &"[".repeat(200_000));
    let run = line(&mut file, "jq . deep.json");
    assert_eq!(run.exit_code, 2, "{run:?}");
    assert!(
        run.stderr
            .contains(&format!("nests deeper than {limit} levels")),
        "{run:?}"
    );
    // The same through a pipe and as --argjson, and an object nesting inside strings' quotes.
    let run = line(&mut file, "cat deep.json | jq -c length");
    assert_eq!(run.exit_code, 2, "{run:?}");
    let run = line(&mut file, "jq -n --argjson v \"$(cat deep.json)\" '$v'");
    assert_eq!(run.exit_code, 2, "{run:?}");
    assert!(run.stderr.contains("--argjson"), "{run:?}");
    // At the bound, the input is accepted and printed back whole.
    let at_bound = format!("{}{}", "[".repeat(limit), "]".repeat(limit));
    put(&mut file, "at_bound.json", &at_bound);
    let run = line(&mut file, "jq -c . at_bound.json");
    assert_eq!(run.exit_code, 0, "{}", &run.stderr);
    assert_eq!(run.stdout, format!("{at_bound}\n"));
    // Brackets inside strings are not nesting.
    let run = line(
        &mut file,
        &format!(
            "echo '{{\"s\":\"{}\"}}' | jq -r '.s | length'",
            "[".repeat(50_000)
        ),
    );
    assert_eq!(run.stdout, "50000\n", "{run:?}");
    still_works(&mut file);
}

#[test]
fn jq_endless_generator_stops_at_the_line_budget_and_frees_its_core() {
    let _serial = serial();
    let (_dir, mut file) = agent();
    set_timeout(&mut file, 1_500);
    let started = Instant::now();
    let run = line(&mut file, "jq -n 'last(range(1e15))'; echo not reached");
    let took = started.elapsed();
    assert_eq!(run.exit_code, 124, "{run:?}");
    assert!(run.stderr.contains("time budget exhausted"), "{run:?}");
    assert!(!run.stdout.contains("not reached"), "{run:?}");
    assert!(
        took >= Duration::from_millis(1_400) && took < Duration::from_secs(15),
        "{took:?}"
    );
    // The worker is gone: nothing keeps spinning after the call ended.
    assert!(workers_gone_within(Duration::from_secs(5)));
    set_timeout(&mut file, 60_000);
    still_works(&mut file);
}

#[test]
fn jq_abandoned_call_kills_its_worker() {
    let _serial = serial();
    let (_dir, mut file) = agent();
    let registry = Arc::new(registry());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let caller = model();
    let abandoned = runtime.block_on(async {
        let call = shell_call_async(
            &registry,
            &mut file,
            &caller,
            json!({ "command": "jq -n 'last(range(1e15))'" }),
            &ApproveAll,
        );
        tokio::time::timeout(Duration::from_millis(800), call).await
    });
    assert!(
        abandoned.is_err(),
        "the call was still running: {abandoned:?}"
    );
    // The owner aborted: the future is dropped, and the worker goes with it, well before the
    // line's 60 s budget.
    assert!(
        workers_gone_within(Duration::from_secs(5)),
        "{} workers left",
        live_workers()
    );
    still_works(&mut file);
}

/// A shell over the pipeline (synchronous embedding) with these limits.
fn run_limited(file: &mut AdfFile, limits: Limits, command: &str) -> adf_shell::Outcome {
    let registry = registry();
    let caller = ToolCaller::Model {
        loop_name: "main".into(),
    };
    let mut host = RegistryHost::new(file, &registry, &caller, &ApproveAll);
    Shell::new(&mut host, BTreeMap::new(), limits).run(command)
}

#[test]
fn jq_memory_and_output_have_budgets() {
    let _serial = serial();
    let (_dir, mut file) = agent();
    let limits = Limits {
        jq_memory: 96 * 1024 * 1024,
        max_buffer: 256 * 1024,
        ..Limits::default()
    };
    // The 1.6 GB: stopped at the memory budget.
    let run = run_limited(&mut file, limits.clone(), "jq -n '[range(1e9)] | length'");
    assert_eq!(run.exit_code, 5, "{run:?}");
    assert!(run.stderr.contains("memory budget of 96 MiB"), "{run:?}");
    // An endless stream of output: stopped at the buffer cap.
    let run = run_limited(&mut file, limits.clone(), "jq -n 'repeat(\"x\")'");
    assert_eq!(run.exit_code, 5, "{run:?}");
    assert!(run.stderr.contains("output passed 262144 bytes"), "{run:?}");
    // An endless stream of errors too.
    let run = run_limited(&mut file, limits.clone(), "jq -n 'repeat(error(\"e\"))'");
    assert_eq!(run.exit_code, 5, "{run:?}");
    assert!(run.stderr.contains("output passed"), "{run:?}");
    let run = run_limited(&mut file, limits, "jq -n '[range(5)] | add'");
    assert_eq!((run.stdout.as_str(), run.exit_code), ("10\n", 0), "{run:?}");
    assert!(workers_gone_within(Duration::from_secs(5)));
}

#[test]
fn jq_sees_none_of_the_daemons_environment() {
    let (_dir, mut file) = agent();
    // This process has an environment (cargo sets several variables); the worker has none.
    assert!(std::env::vars().next().is_some());
    let run = line(&mut file, "jq -n 'env | length'");
    assert_eq!((run.stdout.as_str(), run.exit_code), ("0\n", 0), "{run:?}");
}

#[test]
fn regex_engines_refuse_or_finish_pathological_patterns() {
    let (_dir, mut file) = agent();
    let text = format!("{}b\n", "a".repeat(100_000));
    put(&mut file, "as.txt", &text);
    let started = Instant::now();
    // Catastrophic for a backtracking engine; linear here.
    let run = line(&mut file, "grep -cE '^(a+)+$' as.txt");
    assert_eq!((run.stdout.as_str(), run.exit_code), ("0\n", 1), "{run:?}");
    let run = line(&mut file, "sed -E 's/(a|aa)*c/x/' as.txt | wc -c");
    assert_eq!(run.stdout.trim(), text.len().to_string(), "{run:?}");
    assert!(started.elapsed() < Duration::from_secs(30), "linear time");
    // Nesting and repetition past the compiler's bounds: clear errors, exit 2.
    for pattern in [
        format!("{}a{}", "(".repeat(10_000), ")".repeat(10_000)),
        "a{1000}{1000}{1000}".to_owned(),
    ] {
        for command in [
            format!("grep -E '{pattern}' as.txt"),
            format!("sed -E 's/{pattern}/x/' as.txt"),
        ] {
            let run = line(&mut file, &command);
            assert_ne!(run.exit_code, 0, "{command:.40}: {run:?}");
            assert!(!run.stderr.is_empty(), "{command:.40}: {run:?}");
            assert!(
                run.stderr.len() < 4096,
                "a short error: {}",
                run.stderr.len()
            );
        }
    }
    // find's shell patterns become regexes too.
    let run = line(&mut file, &format!("find -name '{}b'", "*a".repeat(500)));
    assert_eq!(run.exit_code, 0, "{run:?}");
    still_works(&mut file);
}

#[test]
fn shell_parser_and_scripts_bound_their_depth() {
    let (_dir, mut file) = agent();
    // $( … ) nested past MAX_NESTING: a parse error, not a deep recursion.
    let deep = format!("{}1{}", "$(echo ".repeat(10_000), ")".repeat(10_000));
    let run = line(&mut file, &format!("echo {deep}"));
    assert_eq!(
        run.exit_code,
        2,
        "{}",
        &run.stderr[..run.stderr.len().min(300)]
    );
    assert!(run.stderr.contains("nesting deeper than"), "{run:?}");
    // A script that runs itself: bounded depth.
    put(&mut file, "loop.sh", "./loop.sh\n");
    let run = line(&mut file, "./loop.sh");
    assert_ne!(run.exit_code, 0, "{run:?}");
    assert!(!run.stderr.is_empty(), "{run:?}");
    // A huge pipeline and a huge list: the step budget.
    let pipeline = vec!["cat"; 20_000].join(" | ");
    let run = line(&mut file, &format!("echo x | {pipeline}"));
    assert_eq!(
        run.exit_code,
        124,
        "{}",
        &run.stderr[..run.stderr.len().min(300)]
    );
    assert!(run.stderr.contains("step budget"), "{run:?}");
    let list = vec!["true"; 50_000].join("; ");
    let run = line(&mut file, &list);
    assert_eq!(run.exit_code, 124, "{run:?}");
    still_works(&mut file);
}

#[test]
fn sqlite_and_code_reject_deep_json() {
    let (_dir, mut file) = agent();
    // SQLite's JSON functions have their own depth bound: balanced but too deep is invalid.
    let run = line(
        &mut file,
        &format!(
            "sqlite3 \"SELECT json_valid('{}{}')\"",
            "[".repeat(100_000),
            "]".repeat(100_000)
        ),
    );
    assert_eq!((run.stdout.as_str(), run.exit_code), ("0\n", 0), "{run:?}");
    // QuickJS: JSON.parse of deep input and unbounded recursion are JS errors.
    let run = line(
        &mut file,
        "node -e 'try { JSON.parse(\"[\".repeat(1000000)); console.log(\"parsed\") } catch (e) { console.log(\"refused\", e instanceof Error) }'",
    );
    assert_eq!(run.stdout, "refused true\n", "{run:?}");
    let run = line(
        &mut file,
        "node -e 'function f(n) { return f(n + 1) + 1 } try { f(0) } catch (e) { console.log(\"refused\", e instanceof Error) }'",
    );
    assert_eq!(run.stdout, "refused true\n", "{run:?}");
    still_works(&mut file);
}

#[test]
fn code_values_nested_without_end_cross_no_bridge() {
    let (_dir, mut file) = agent();
    // A value built deeper than any parser would accept, then printed, passed to a tool and
    // returned: each crossing of the JS/Rust bridge is bounded.
    let build = "let a = []; for (let i = 0; i < 200000; i++) a = [a];";
    for (what, body) in [
        (
            "stringify",
            "try { JSON.stringify(a); console.log(\"done\") } catch (e) { console.log(\"refused\") }",
        ),
        (
            "tool argument",
            "try { await adf.fs_write({ path: \"x.json\", content: \"x\", extra: a }); console.log(\"done\") } catch (e) { console.log(\"refused\") }",
        ),
    ] {
        let run = line(&mut file, &format!("node -e '{build} {body}'"));
        assert_eq!(
            (run.stdout.as_str(), run.exit_code),
            ("refused\n", 0),
            "{what}: {run:?}"
        );
    }
    // Printing it is bounded too: a placeholder, not a recursion.
    let run = line(
        &mut file,
        &format!("node -e '{build} console.log(a)' | wc -c"),
    );
    assert_eq!(run.exit_code, 0, "{run:?}");
    assert!(
        run.stdout.trim().parse::<usize>().unwrap() < 1024,
        "{run:?}"
    );
    still_works(&mut file);
}
