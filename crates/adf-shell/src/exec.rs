//! The interpreter: expands words, wires pipes and redirects, and runs commands with bash's
//! exit-status rules, inside the bounds of [`Limits`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Host;
use crate::parse::{self, AndOr, Command, Part, Redirect, RedirectKind, Script, Word};

/// Bounds on one command line.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Bytes of stdout (and of stderr) returned; the rest is cut with a marker.
    pub max_output: usize,
    /// Bytes one pipe or variable may hold while the line runs.
    pub max_buffer: usize,
    /// Commands one line may run (each command of a pipeline, each `$( … )`).
    pub max_steps: u64,
    /// Wall time one line may take.
    pub time_budget: Duration,
    /// The longest one `sleep` may wait.
    pub max_sleep: Duration,
    /// The deepest nesting of arrays and objects `jq` accepts in its input (checked before
    /// parsing, as jq 1.7 bounds its parser).
    pub max_json_depth: usize,
    /// Resident memory one `jq` evaluation may use (its worker process is stopped past it).
    pub jq_memory: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_output: 64 * 1024,
            max_buffer: 16 * 1024 * 1024,
            max_steps: 10_000,
            time_budget: Duration::from_secs(60),
            max_sleep: Duration::from_secs(10),
            max_json_depth: 10_000,
            jq_memory: 512 * 1024 * 1024,
        }
    }
}

/// What a command line ends with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Standard output (capped, with a marker when cut).
    pub stdout: String,
    /// Standard error (capped, with a marker when cut).
    pub stderr: String,
    /// The exit status of the last pipeline, as bash reports it.
    pub exit_code: i32,
}

impl Outcome {
    /// The tool result: `{stdout, stderr, exit_code}`.
    pub fn to_json(&self) -> Value {
        json!({ "stdout": self.stdout, "stderr": self.stderr, "exit_code": self.exit_code })
    }
}

/// Why a line stopped before its end (a bound was hit).
#[derive(Debug, Clone)]
pub(crate) struct Abort(pub(crate) String);

/// The streams one command sees.
#[derive(Debug, Default)]
pub(crate) struct Io {
    /// Everything on stdin (pipes are buffered: each command runs to its end).
    pub(crate) stdin: String,
    /// What it writes to stdout.
    pub(crate) out: String,
    /// What it writes to stderr.
    pub(crate) err: String,
}

impl Io {
    /// Writes `adf_shell`-style diagnostics: `name: message`.
    pub(crate) fn fail(&mut self, name: &str, message: impl std::fmt::Display) -> i32 {
        self.err.push_str(&format!("{name}: {message}\n"));
        1
    }
}

/// A running shell: its variables, the last status, and the budget left.
pub struct Shell<'h> {
    pub(crate) host: &'h mut dyn Host,
    pub(crate) vars: BTreeMap<String, String>,
    pub(crate) exported: BTreeSet<String>,
    pub(crate) status: i32,
    steps: u64,
    started: Instant,
    pub(crate) limits: Limits,
    /// Nesting of scripts (`./x.sh` inside `./y.sh`), bounded like `$( … )`.
    pub(crate) depth: usize,
    /// stderr of `$( … )` not yet handed to the enclosing command's stream.
    pending_err: String,
}

impl std::fmt::Debug for Shell<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shell")
            .field("vars", &self.vars)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl<'h> Shell<'h> {
    /// A shell over `host` with `env` as its exported variables.
    pub fn new(host: &'h mut dyn Host, env: BTreeMap<String, String>, limits: Limits) -> Self {
        let exported = env.keys().cloned().collect();
        Shell {
            host,
            vars: env,
            exported,
            status: 0,
            steps: 0,
            started: Instant::now(),
            limits,
            depth: 0,
            pending_err: String::new(),
        }
    }

    /// Parses and runs `source` (a line or a whole script).
    pub fn run(&mut self, source: &str) -> Outcome {
        let script = match parse::parse(source) {
            Ok(script) => script,
            Err(error) => {
                return Outcome {
                    stdout: String::new(),
                    stderr: format!("adf_shell: syntax error: {error}\n"),
                    exit_code: 2,
                };
            }
        };
        let mut io = Io::default();
        let exit_code = match self.script(&script, &mut io) {
            Ok(status) => status,
            Err(Abort(message)) => {
                io.err.push_str(&format!("adf_shell: {message}\n"));
                124
            }
        };
        Outcome {
            stdout: cap(io.out, self.limits.max_output, "stdout"),
            stderr: cap(io.err, self.limits.max_output, "stderr"),
            exit_code,
        }
    }

    /// Runs a parsed script, appending its output to `io`.
    pub(crate) fn script(&mut self, script: &Script, io: &mut Io) -> Result<i32, Abort> {
        let mut status = self.status;
        for and_or in script {
            status = self.and_or(and_or, io)?;
        }
        Ok(status)
    }

    fn and_or(&mut self, and_or: &AndOr, io: &mut Io) -> Result<i32, Abort> {
        let mut status = self.pipeline(&and_or.first, io)?;
        for (and, pipeline) in &and_or.rest {
            if (status == 0) == *and {
                status = self.pipeline(pipeline, io)?;
            }
        }
        Ok(status)
    }

    fn pipeline(&mut self, commands: &[Command], io: &mut Io) -> Result<i32, Abort> {
        let mut stdin = String::new();
        let mut status = 0;
        let last = commands.len().saturating_sub(1);
        for (index, command) in commands.iter().enumerate() {
            let mut stage = Io {
                stdin: std::mem::take(&mut stdin),
                ..Io::default()
            };
            status = self.command(command, &mut stage)?;
            io.err.push_str(&stage.err);
            if index == last {
                io.out.push_str(&stage.out);
            } else {
                stdin = stage.out;
            }
            self.check_buffer(&io.out)?;
            self.check_buffer(&io.err)?;
        }
        self.status = status;
        Ok(status)
    }

    fn check_buffer(&self, text: &str) -> Result<(), Abort> {
        if text.len() > self.limits.max_buffer {
            return Err(Abort(format!(
                "output exceeded {} bytes; narrow it with head, grep or a redirect",
                self.limits.max_buffer
            )));
        }
        Ok(())
    }

    /// Counts one step against the budget.
    pub(crate) fn step(&mut self) -> Result<(), Abort> {
        self.steps += 1;
        if self.steps > self.limits.max_steps {
            return Err(Abort(format!(
                "step budget exhausted ({} commands); split the work across calls",
                self.limits.max_steps
            )));
        }
        if self.started.elapsed() > self.limits.time_budget {
            return Err(self.time_abort());
        }
        if self.host.cancelled() {
            return Err(Abort("the adf_shell call was abandoned".into()));
        }
        Ok(())
    }

    /// Why the line stops when its time is up.
    pub(crate) fn time_abort(&self) -> Abort {
        Abort(format!(
            "time budget exhausted ({} s); split the work across calls",
            self.limits.time_budget.as_secs_f64()
        ))
    }

    /// The time left in the line's budget.
    pub(crate) fn time_left(&self) -> Duration {
        self.limits
            .time_budget
            .saturating_sub(self.started.elapsed())
    }

    fn command(&mut self, command: &Command, io: &mut Io) -> Result<i32, Abort> {
        self.step()?;
        let mut argv = Vec::new();
        for word in &command.words {
            argv.extend(self.expand(word)?);
        }
        let mut assigns = Vec::new();
        for (name, value) in &command.assigns {
            assigns.push((name.clone(), self.expand_joined(value)?));
        }
        io.err.push_str(&std::mem::take(&mut self.pending_err));

        // Redirects: where fd 1 and fd 2 end up, and what stdin holds.
        let mut out_to = Sink::Stdout;
        let mut err_to = Sink::Stderr;
        for redirect in &command.redirects {
            match self.redirect(redirect, io, &mut out_to, &mut err_to) {
                Ok(()) => {}
                Err(message) => {
                    io.err.push_str(&format!("adf_shell: {message}\n"));
                    self.status = 1;
                    return Ok(1);
                }
            }
        }

        let mut stage = Io {
            stdin: std::mem::take(&mut io.stdin),
            ..Io::default()
        };
        let status = if argv.is_empty() {
            for (name, value) in assigns {
                self.vars.insert(name, value);
            }
            0
        } else {
            let saved: Vec<(String, Option<String>, bool)> = assigns
                .iter()
                .map(|(name, _)| {
                    (
                        name.clone(),
                        self.vars.get(name).cloned(),
                        self.exported.contains(name),
                    )
                })
                .collect();
            for (name, value) in assigns {
                self.exported.insert(name.clone());
                self.vars.insert(name, value);
            }
            let status = crate::commands::run(self, &argv, &mut stage)?;
            for (name, value, was_exported) in saved {
                match value {
                    Some(value) => self.vars.insert(name.clone(), value),
                    None => self.vars.remove(&name),
                };
                if !was_exported {
                    self.exported.remove(&name);
                }
            }
            status
        };

        let mut status = status;
        let out = std::mem::take(&mut stage.out);
        let err = std::mem::take(&mut stage.err);
        for (text, sink) in [(out, &out_to), (err, &err_to)] {
            if let Err(message) = self.deliver(text, sink, io) {
                io.err.push_str(&format!("adf_shell: {message}\n"));
                status = 1;
            }
        }
        self.status = status;
        Ok(status)
    }

    fn redirect(
        &mut self,
        redirect: &Redirect,
        io: &mut Io,
        out_to: &mut Sink,
        err_to: &mut Sink,
    ) -> Result<(), String> {
        match &redirect.kind {
            RedirectKind::Input(word) => {
                let path = self.expand_joined(word).map_err(|Abort(m)| m)?;
                if redirect.fd != 0 {
                    return Err("only stdin (0) can be redirected from a file".into());
                }
                io.stdin = if path == "/dev/null" {
                    String::new()
                } else {
                    crate::commands::fs::read_text(self, &path)?
                };
            }
            RedirectKind::Heredoc(word) => {
                io.stdin = self.expand_joined(word).map_err(|Abort(m)| m)?;
                io.err.push_str(&std::mem::take(&mut self.pending_err));
            }
            RedirectKind::Output {
                target: word,
                append,
            } => {
                let path = self.expand_joined(word).map_err(|Abort(m)| m)?;
                let sink = if path == "/dev/null" {
                    Sink::Null
                } else {
                    let path = crate::commands::fs::clean_path(&path)?;
                    if !append {
                        // `>` truncates before the command runs, as in bash.
                        crate::commands::fs::write_file(self, &path, "", false)?;
                    }
                    Sink::File(path)
                };
                match redirect.fd {
                    1 => *out_to = sink,
                    2 => *err_to = sink,
                    _ => return Err("only descriptors 1 and 2 can be redirected to a file".into()),
                }
            }
            RedirectKind::Dup(to) => {
                let current = if *to == 1 {
                    out_to.clone()
                } else {
                    err_to.clone()
                };
                match redirect.fd {
                    1 => *out_to = current,
                    2 => *err_to = current,
                    _ => return Err("only descriptors 1 and 2 can be duplicated".into()),
                }
            }
        }
        Ok(())
    }

    fn deliver(&mut self, text: String, sink: &Sink, io: &mut Io) -> Result<(), String> {
        match sink {
            Sink::Stdout => io.out.push_str(&text),
            Sink::Stderr => io.err.push_str(&text),
            Sink::Null => {}
            Sink::File(path) => {
                if !text.is_empty() {
                    crate::commands::fs::write_file(self, path, &text, true)?;
                }
            }
        }
        Ok(())
    }

    /// Expands a word into fields (unquoted expansions split on blanks).
    pub(crate) fn expand(&mut self, word: &Word) -> Result<Vec<String>, Abort> {
        let mut fields: Vec<String> = Vec::new();
        let mut current = String::new();
        let mut has_field = false;
        for part in word {
            match part {
                Part::Text { text, .. } => {
                    current.push_str(text);
                    has_field = true;
                }
                Part::Var { name, quoted } => {
                    let value = self.var(name);
                    if *quoted {
                        current.push_str(&value);
                        has_field = true;
                    } else {
                        split_into(&value, &mut fields, &mut current, &mut has_field);
                    }
                }
                Part::Subst { script, quoted } => {
                    let value = self.substitute(script)?;
                    if *quoted {
                        current.push_str(&value);
                        has_field = true;
                    } else {
                        split_into(&value, &mut fields, &mut current, &mut has_field);
                    }
                }
            }
        }
        if has_field {
            fields.push(current);
        }
        Ok(fields)
    }

    /// Expands a word without splitting (assignments, redirect targets, heredocs).
    pub(crate) fn expand_joined(&mut self, word: &Word) -> Result<String, Abort> {
        let mut text = String::new();
        for part in word {
            match part {
                Part::Text { text: t, .. } => text.push_str(t),
                Part::Var { name, .. } => text.push_str(&self.var(name)),
                Part::Subst { script, .. } => text.push_str(&self.substitute(script)?),
            }
        }
        Ok(text)
    }

    fn var(&self, name: &str) -> String {
        if name == "?" {
            return self.status.to_string();
        }
        self.vars.get(name).cloned().unwrap_or_default()
    }

    fn substitute(&mut self, script: &Script) -> Result<String, Abort> {
        self.step()?;
        let mut io = Io::default();
        self.script(script, &mut io)?;
        self.check_buffer(&io.out)?;
        // stderr of a substitution goes to the line's stderr, as in bash; it is kept on the
        // shell so the caller's stream gets it.
        self.pending_err.push_str(&io.err);
        let trimmed = io.out.trim_end_matches('\n').len();
        io.out.truncate(trimmed);
        Ok(io.out)
    }
}

/// Where one output stream of a command goes.
#[derive(Debug, Clone, PartialEq)]
enum Sink {
    Stdout,
    Stderr,
    Null,
    File(String),
}

/// Field splitting of an unquoted expansion on blanks and newlines.
fn split_into(value: &str, fields: &mut Vec<String>, current: &mut String, has_field: &mut bool) {
    if value.is_empty() {
        return;
    }
    let starts_blank = value.starts_with([' ', '\t', '\n']);
    let ends_blank = value.ends_with([' ', '\t', '\n']);
    let pieces: Vec<&str> = value
        .split([' ', '\t', '\n'])
        .filter(|p| !p.is_empty())
        .collect();
    if pieces.is_empty() {
        if *has_field {
            fields.push(std::mem::take(current));
            *has_field = false;
        }
        return;
    }
    if starts_blank && *has_field {
        fields.push(std::mem::take(current));
        *has_field = false;
    }
    let last = pieces.len() - 1;
    for (index, piece) in pieces.into_iter().enumerate() {
        current.push_str(piece);
        *has_field = true;
        if index < last || ends_blank {
            fields.push(std::mem::take(current));
            *has_field = false;
        }
    }
}

/// `text` cut to `max` bytes (on a character boundary) with a marker saying how much was cut.
pub(crate) fn cap(text: String, max: usize, stream: &str) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let omitted = text.len() - end;
    format!(
        "{}\n[adf_shell: {stream} truncated: {omitted} more bytes not shown; narrow the output with head, grep or a redirect to a file]\n",
        &text[..end]
    )
}
