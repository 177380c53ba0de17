//! Child processes in tests: a Python check fed on standard input, and counting this process's
//! live children by name (Linux `/proc`).

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `python3 script` with `input` on its standard input and panics unless it exits 0 and
/// prints `OK` (the interop checks' convention), showing what it printed otherwise.
pub fn assert_python_says_ok(script: &Path, input: &[u8]) {
    let mut child = match Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(error) => panic!("cannot start python3 {}: {error}", script.display()),
    };
    if let Some(mut stdin) = child.stdin.take()
        && let Err(error) = stdin.write_all(input)
    {
        panic!("cannot write to python3 {}: {error}", script.display());
    }
    let out = match child.wait_with_output() {
        Ok(out) => out,
        Err(error) => panic!("python3 {} did not finish: {error}", script.display()),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim() == "OK",
        "python check {} failed ({}):\n{stdout}\n{}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How many live processes named `name` this process is the parent of (Linux `/proc`;
/// elsewhere none are seen, so assertions that none are left hold trivially).
pub fn live_children_named(name: &str) -> usize {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let marker = format!("({name}");
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("stat")).ok())
        .filter(|stat| {
            // `pid (comm) state ppid …`: the command name may hold spaces and parentheses.
            let Some((head, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            head.ends_with(&marker) && rest.split_whitespace().nth(1) == Some(me.as_str())
        })
        .count()
}
