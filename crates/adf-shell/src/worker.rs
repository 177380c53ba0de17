//! The jq worker: jq runs in a child process of its own, never in the process that holds
//! agents.
//!
//! jaq evaluates recursively and offers no hook to stop it, so `def f: [f]; f` exhausts any
//! stack, `last(range(1e15))` never returns and `[range(1e9)]` grows without end; in the
//! daemon's process any of these would abort every agent or keep a core busy after the call
//! was abandoned. The worker is a process that can be killed: it reads one request (a JSON
//! line, then the input) on stdin, evaluates it on a thread with a fixed stack
//! ([`JQ_STACK_BYTES`]), keeps its own time and memory budget (a watchdog thread that exits
//! the process), and prints jq's stdout and stderr. The shell's side (`run_jq`) kills it
//! when the line's time runs out, when the call is abandoned, or when its output passes the
//! cap; a crash (stack overflow, failed allocation) is reported as a clear jq error.
//!
//! Which program is the worker, first match wins: the `ADF_JQ_WORKER` environment variable
//! (a path); a program given to [`set_program`]; the running executable itself when its
//! `main` called [`run_if_requested`] (the `adf` binary does, with the hidden argument
//! [`WORKER_ARG`]); `adf-jq-worker` beside the running executable or in its parent directory
//! (cargo puts a crate's test binaries in `target/<profile>/deps/` and its `[[bin]]`s in
//! `target/<profile>/`). The worker gets an empty environment: jq's `env` and `$ENV` see
//! nothing of the daemon's.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::exec::{Abort, Shell};
use crate::jq_eval::{self, EXIT_OUTPUT, Evaluated, JqRequest};

/// The hidden first argument that makes a binary calling [`run_if_requested`] serve as the
/// jq worker.
pub const WORKER_ARG: &str = "__adf-jq-worker";

/// The environment variable naming the worker program (overrides every other choice).
pub const WORKER_ENV: &str = "ADF_JQ_WORKER";

/// The worker binary's name (`[[bin]]` of this crate).
pub const WORKER_BIN: &str = "adf-jq-worker";

/// The stack of the worker's evaluation thread: the bound on recursion of a filter (and of
/// jaq's parser over a filter); input nesting is bounded before parsing by
/// `Limits::max_json_depth`, far below what this stack holds.
pub const JQ_STACK_BYTES: usize = 64 * 1024 * 1024;

/// How often the worker's watchdog checks its time and memory.
const WATCH_EVERY: Duration = Duration::from_millis(10);

/// How long the shell waits past the worker's own deadline before killing it.
const KILL_GRACE: Duration = Duration::from_millis(500);

/// The most of the worker's stderr kept (jq's error messages).
const MAX_STDERR: usize = 64 * 1024;

/// Exit statuses of the worker besides jq's own (0–5).
const EXIT_TIME: i32 = 90;
const EXIT_MEMORY: i32 = 91;
const EXIT_PROTOCOL: i32 = 93;
const EXIT_PANIC: i32 = 94;

static SELF_SERVES: AtomicBool = AtomicBool::new(false);
static PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// Call first in a binary's `main`: when the process was started as the jq worker (first
/// argument [`WORKER_ARG`]) it serves one request and returns the exit status to end with;
/// otherwise it records that this executable can serve as the worker and returns `None`.
pub fn run_if_requested() -> Option<u8> {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == WORKER_ARG)
    {
        return Some(serve());
    }
    SELF_SERVES.store(true, Ordering::Relaxed);
    None
}

/// Names the worker program for this process (an embedder, or a test that knows where cargo
/// built `adf-jq-worker`); the first call wins.
pub fn set_program(path: impl Into<PathBuf>) {
    let _ = PROGRAM.set(path.into());
}

/// The worker program and its arguments, or why there is none.
pub fn locate() -> Result<(PathBuf, Vec<&'static str>), String> {
    if let Some(path) = std::env::var_os(WORKER_ENV).filter(|p| !p.is_empty()) {
        return Ok((PathBuf::from(path), Vec::new()));
    }
    if let Some(path) = PROGRAM.get() {
        return Ok((path.clone(), Vec::new()));
    }
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the running executable: {e}"))?;
    if SELF_SERVES.load(Ordering::Relaxed) {
        return Ok((exe, vec![WORKER_ARG]));
    }
    let name = format!("{WORKER_BIN}{}", std::env::consts::EXE_SUFFIX);
    let dir = exe.parent();
    for candidate in [dir, dir.and_then(Path::parent)]
        .into_iter()
        .flatten()
        .map(|d| d.join(&name))
    {
        if candidate.is_file() {
            return Ok((candidate, Vec::new()));
        }
    }
    Err(format!(
        "its worker program {name} was not found beside {} (build it: cargo build -p adf-shell --bin {WORKER_BIN}; or set {WORKER_ENV})",
        exe.display()
    ))
}

/// The bounds of one worker run.
#[derive(Debug, Clone, Copy)]
struct Budget {
    time: Duration,
    memory: u64,
}

// ---------------------------------------------------------------------------------------------
// The shell's side

/// Runs one `jq` in the worker, within the line's time left and the shell's memory bound.
/// A bound the worker hits is a jq error (exit 5) that names it; running out of the line's
/// time, or the call being abandoned, stops the line.
pub(crate) fn run_jq(
    shell: &mut Shell<'_>,
    request: &JqRequest,
    input: &str,
) -> Result<Evaluated, Abort> {
    let time = shell.time_left();
    if time.is_zero() {
        return Err(shell.time_abort());
    }
    let budget = Budget {
        time,
        memory: u64::try_from(shell.limits.jq_memory).unwrap_or(u64::MAX),
    };
    let (program, args) = match locate() {
        Ok(found) => found,
        Err(why) => {
            return Ok(failed(format!("jq: error: jq is unavailable: {why}\n"), 2));
        }
    };
    let mut header = request.to_json();
    if let Some(fields) = header.as_object_mut() {
        fields.insert(
            "time_ms".into(),
            json!(u64::try_from(budget.time.as_millis()).unwrap_or(u64::MAX)),
        );
        fields.insert("memory".into(), json!(budget.memory));
    }
    let mut message = header.to_string().into_bytes();
    message.push(b'\n');
    message.extend_from_slice(input.as_bytes());

    let child = Command::new(&program)
        .args(&args)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let child = match child {
        Ok(child) => Killed(child),
        Err(e) => {
            return Ok(failed(
                format!(
                    "jq: error: cannot start the jq worker {}: {e}\n",
                    program.display()
                ),
                2,
            ));
        }
    };
    supervise(shell, child, message, budget, request.max_output)
}

/// A child killed and reaped when dropped, whatever path leaves [`supervise`].
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// How a worker run ended, before it is put into jq's words.
enum Ended {
    Exited(ExitStatus),
    OutputCap,
    Timeout,
    Cancelled,
}

fn supervise(
    shell: &mut Shell<'_>,
    mut child: Killed,
    message: Vec<u8>,
    budget: Budget,
    max_output: usize,
) -> Result<Evaluated, Abort> {
    let over_cap = std::sync::Arc::new(AtomicBool::new(false));
    let writer = child.0.stdin.take().map(|mut stdin| {
        std::thread::spawn(move || {
            // A worker that stopped early closes its end; that is not an error of ours.
            let _ = stdin.write_all(&message);
        })
    });
    let stdout = child.0.stdout.take().map(|pipe| {
        let over_cap = over_cap.clone();
        std::thread::spawn(move || {
            let bytes = read_capped(pipe, max_output);
            if bytes.len() > max_output {
                over_cap.store(true, Ordering::Relaxed);
            }
            bytes
        })
    });
    let stderr = child
        .0
        .stderr
        .take()
        .map(|pipe| std::thread::spawn(move || read_capped(pipe, MAX_STDERR)));

    let deadline = Instant::now() + budget.time + KILL_GRACE;
    let mut pause = Duration::from_millis(1);
    let ended = loop {
        match child.0.try_wait() {
            Ok(Some(status)) => break Ended::Exited(status),
            Ok(None) => {}
            Err(_) => break Ended::Cancelled,
        }
        if over_cap.load(Ordering::Relaxed) {
            break Ended::OutputCap;
        }
        if shell.host.cancelled() {
            break Ended::Cancelled;
        }
        if Instant::now() >= deadline {
            break Ended::Timeout;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    };
    // Kill first (a no-op once it exited) so the pipes close and the helper threads end.
    drop(child);
    let out = stdout.and_then(|t| t.join().ok()).unwrap_or_default();
    let err = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    let out = String::from_utf8_lossy(&out).into_owned();
    let err = String::from_utf8_lossy(&err).into_owned();
    let status = match ended {
        Ended::Exited(status) => status,
        Ended::OutputCap => return Ok(output_cap(max_output)),
        Ended::Timeout => return Err(shell.time_abort()),
        Ended::Cancelled => {
            return Err(Abort(
                "the adf_shell call was abandoned; jq was stopped".into(),
            ));
        }
    };
    match status.code() {
        Some(code @ 0..=5) => Ok(Evaluated { out, err, code }),
        Some(EXIT_OUTPUT) => Ok(output_cap(max_output)),
        Some(EXIT_TIME) => Err(shell.time_abort()),
        Some(EXIT_MEMORY) => Ok(memory_exceeded(budget.memory)),
        Some(other) => Ok(crashed(&err, &format!("exit status {other}"), budget)),
        None => Ok(crashed(&err, &describe_signal(&status), budget)),
    }
}

fn failed(message: String, code: i32) -> Evaluated {
    Evaluated {
        out: String::new(),
        err: message,
        code,
    }
}

fn output_cap(max_output: usize) -> Evaluated {
    failed(
        format!(
            "jq: error: the output passed {max_output} bytes and jq was stopped; narrow the filter (limit(n; f), first, paths) or split the input\n"
        ),
        5,
    )
}

fn memory_exceeded(memory: u64) -> Evaluated {
    failed(
        format!(
            "jq: error: the evaluation passed its memory budget of {} MiB and was stopped; narrow the filter or split the input\n",
            memory / (1024 * 1024)
        ),
        5,
    )
}

/// A worker that died without an exit status of its own: its stderr says why when Rust's
/// runtime printed it (stack overflow, failed allocation).
fn crashed(stderr: &str, how: &str, budget: Budget) -> Evaluated {
    if stderr.contains("has overflowed its stack") {
        return failed(
            format!(
                "jq: error: the filter recurses too deeply (its {} MiB stack ran out) and was stopped; recursion in jq must end well before that\n",
                JQ_STACK_BYTES / (1024 * 1024)
            ),
            5,
        );
    }
    if stderr.contains("memory allocation of") {
        return memory_exceeded(budget.memory);
    }
    let detail = stderr.lines().last().unwrap_or_default();
    failed(
        format!("jq: error: the jq worker stopped ({how}) {detail}\n"),
        5,
    )
}

#[cfg(unix)]
fn describe_signal(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match status.signal() {
        Some(signal) => format!("signal {signal}"),
        None => status.to_string(),
    }
}

#[cfg(not(unix))]
fn describe_signal(status: &ExitStatus) -> String {
    status.to_string()
}

/// Reads a pipe to its end, keeping at most `cap + 1` bytes (one more than the cap says it
/// was passed); stops reading at that point so a flood is not buffered.
fn read_capped(pipe: impl Read, cap: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    let _ = pipe.take(limit).read_to_end(&mut bytes);
    bytes
}

// ---------------------------------------------------------------------------------------------
// The worker's side

/// Serves one request as the jq worker: reads it from stdin, prints jq's output, and returns
/// the exit status (jq's own, or one of the worker's for a bound it hit).
pub fn serve() -> u8 {
    let code = serve_inner();
    u8::try_from(code).unwrap_or(u8::MAX)
}

fn serve_inner() -> i32 {
    let mut bytes = Vec::new();
    if std::io::stdin().lock().read_to_end(&mut bytes).is_err() {
        eprintln!("adf-jq-worker: cannot read the request");
        return EXIT_PROTOCOL;
    }
    let Some(split) = bytes.iter().position(|b| *b == b'\n') else {
        eprintln!("adf-jq-worker: the request has no header line");
        return EXIT_PROTOCOL;
    };
    let header: Option<Value> = serde_json::from_slice(&bytes[..split]).ok();
    let request = header.as_ref().and_then(JqRequest::from_json);
    let budget = header.as_ref().and_then(|h| {
        Some(Budget {
            time: Duration::from_millis(h.get("time_ms")?.as_u64()?),
            memory: h.get("memory")?.as_u64()?,
        })
    });
    let (Some(request), Some(budget)) = (request, budget) else {
        eprintln!("adf-jq-worker: the request header is not one");
        return EXIT_PROTOCOL;
    };
    let input = String::from_utf8_lossy(&bytes[split + 1..]).into_owned();
    drop(bytes);
    watch(budget);
    let evaluation = std::thread::Builder::new()
        .name("jq".into())
        .stack_size(JQ_STACK_BYTES)
        .spawn(move || jq_eval::evaluate(&request, &input));
    let evaluated = match evaluation.map(std::thread::JoinHandle::join) {
        Ok(Ok(evaluated)) => evaluated,
        Ok(Err(_)) => {
            eprintln!("adf-jq-worker: the evaluation panicked");
            return EXIT_PANIC;
        }
        Err(e) => {
            eprintln!("adf-jq-worker: cannot start the evaluation: {e}");
            return EXIT_PANIC;
        }
    };
    // The shell may have stopped reading (its cap); nothing is left to do about that here.
    let _ = std::io::stdout().lock().write_all(evaluated.out.as_bytes());
    let _ = std::io::stderr().lock().write_all(evaluated.err.as_bytes());
    evaluated.code
}

/// The worker's own bounds, kept even if the shell that started it is gone: a thread that
/// ends the process when the time is up or the resident memory passes the budget.
fn watch(budget: Budget) {
    let started = Instant::now();
    let spawned = std::thread::Builder::new()
        .name("jq-watchdog".into())
        .spawn(move || {
            loop {
                if started.elapsed() >= budget.time {
                    std::process::exit(EXIT_TIME);
                }
                if resident_bytes().is_some_and(|bytes| bytes > budget.memory) {
                    std::process::exit(EXIT_MEMORY);
                }
                std::thread::sleep(WATCH_EVERY);
            }
        });
    if spawned.is_err() {
        // Without its watchdog the worker would have no bound of its own; the shell still
        // kills it at the deadline, but refusing is the clearer failure.
        eprintln!("adf-jq-worker: cannot start its watchdog");
        std::process::exit(EXIT_PROTOCOL);
    }
}

/// The process's resident memory (Linux: `/proc/self/status`); `None` where it cannot be read.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib.saturating_mul(1024))
}
