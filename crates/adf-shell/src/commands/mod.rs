//! The commands, by the tools guide's categories. Each takes its argv and the [`Io`] of its
//! stage and returns an exit status; file and agent access goes through the [`crate::Host`].

pub(crate) mod agent;
pub(crate) mod data;
pub(crate) mod fs;
pub(crate) mod text;

use crate::exec::{Abort, Io, Shell};

/// A command's body.
type Body = fn(&mut Shell<'_>, &[String], &mut Io) -> Result<i32, Abort>;

/// One command: name, category, usage and body.
pub(crate) struct Spec {
    pub(crate) name: &'static str,
    pub(crate) category: &'static str,
    pub(crate) usage: &'static str,
    body: Body,
}

macro_rules! spec {
    ($name:literal, $category:literal, $usage:literal, $body:path) => {
        Spec {
            name: $name,
            category: $category,
            usage: $usage,
            body: $body,
        }
    };
}

/// Every command, in the guide's table order.
pub(crate) const COMMANDS: &[Spec] = &[
    spec!(
        "cat",
        "Filesystem",
        "cat [FILE…] — print files (or stdin); media files print a marker and manifest",
        fs::cat
    ),
    spec!(
        "ls",
        "Filesystem",
        "ls [-l] [PREFIX…] — list files (flat paths; a prefix like lib/ lists under it)",
        fs::ls
    ),
    spec!(
        "rm",
        "Filesystem",
        "rm [-f] FILE… — delete files (protection applies)",
        fs::rm
    ),
    spec!("cp", "Filesystem", "cp SRC DEST — copy a file", fs::cp),
    spec!("mv", "Filesystem", "mv SRC DEST — rename a file", fs::mv),
    spec!(
        "touch",
        "Filesystem",
        "touch FILE… — create empty files that do not exist",
        fs::touch
    ),
    spec!(
        "find",
        "Filesystem",
        "find [PREFIX] [-name PATTERN] [-type f] — list paths matching a shell pattern",
        fs::find
    ),
    spec!(
        "du",
        "Filesystem",
        "du [-h] [FILE…] — sizes in bytes (-h human-readable); no files: every file",
        fs::du
    ),
    spec!(
        "chmod",
        "Filesystem",
        "chmod none|read_only|no_delete FILE… — always refused for the agent: protection is set at creation (fs_write protection) and changed only by the owner or authorized code",
        fs::chmod
    ),
    spec!(
        "head",
        "Filesystem",
        "head [-n N | -N] [-c N] [FILE…] — first lines",
        text::head
    ),
    spec!(
        "tail",
        "Filesystem",
        "tail [-n N | -n +N | -N] [-c N] [FILE…] — last lines",
        text::tail
    ),
    spec!(
        "grep",
        "Text",
        "grep [-EivcnlqowxFh] [-e PATTERN] PATTERN [FILE…] — lines matching an ERE",
        text::grep
    ),
    spec!(
        "sed",
        "Text",
        "sed [-E] [-n] [-i] SCRIPT [FILE…] — s/RE/REPL/[gip], p, d, q, NUMBER/ /RE/ addresses; ERE",
        text::sed
    ),
    spec!(
        "sort",
        "Text",
        "sort [-rnufhVbs] [-t SEP] [-k F[,F]] [-o FILE] [FILE…] — sort lines",
        text::sort
    ),
    spec!(
        "uniq",
        "Text",
        "uniq [-c] [-d] [-u] [-i] [-f N] [-s N] — collapse adjacent duplicate lines",
        text::uniq
    ),
    spec!(
        "wc",
        "Text",
        "wc [-lwcm] [FILE…] — count lines, words, bytes",
        text::wc
    ),
    spec!(
        "cut",
        "Text",
        "cut (-f LIST [-d SEP] [-s] | -c LIST | -b LIST) [FILE…] — select fields or characters",
        text::cut
    ),
    spec!(
        "tr",
        "Text",
        "tr [-d] [-s] [-c] SET1 [SET2] — translate, delete or squeeze characters (ranges, [:classes:])",
        text::tr
    ),
    spec!(
        "tee",
        "Text",
        "tee [-a] FILE… — copy stdin to files and stdout",
        text::tee
    ),
    spec!("rev", "Text", "rev [FILE…] — reverse each line", text::rev),
    spec!(
        "tac",
        "Text",
        "tac [FILE…] — lines in reverse order",
        text::tac
    ),
    spec!(
        "diff",
        "Text",
        "diff [-u] FILE1 FILE2 — line differences (exit 1 when they differ)",
        text::diff
    ),
    spec!(
        "xargs",
        "Text",
        "xargs [-n N] [-I STR] CMD [ARG…] — run CMD with stdin's words as arguments",
        text::xargs
    ),
    spec!(
        "jq",
        "Data",
        "jq [-rcnsejS] [--tab] [--arg N V] [--argjson N J] FILTER [FILE…] — the jq language (jaq)",
        data::jq
    ),
    spec!(
        "sqlite3",
        "Data",
        "sqlite3 [-json|-csv|-header] [FILE] SQL — query the agent database (SELECT via db_query, other statements via db_execute; the FILE argument is ignored)",
        data::sqlite3
    ),
    spec!(
        "msg",
        "Messaging",
        "msg send TO TEXT | msg list [STATUS] | msg read ID… — messages (msg_send, msg_list, msg_read)",
        agent::msg
    ),
    spec!(
        "who",
        "Messaging",
        "who — agents reachable from this runtime (agent_discover)",
        agent::who
    ),
    spec!(
        "ping",
        "Messaging",
        "ping AGENT — whether an agent is reachable (agent_discover)",
        agent::ping
    ),
    spec!(
        "curl",
        "Network",
        "curl [-sSfiI] [-X METHOD] [-H 'K: V'] [-d DATA] [--json DATA] [-o FILE] [-m SECONDS] URL — HTTP through sys_fetch and the egress policy; -f: exit 22 on HTTP >= 400; 7 when refused or unreachable, 28 on timeout",
        agent::curl
    ),
    spec!(
        "wget",
        "Network",
        "wget [-q] [-O FILE|-] [--header 'K: V'] [--post-data DATA] URL — save a URL to a file (named after the URL unless -O) through sys_fetch; exit 8 on HTTP >= 400",
        agent::wget
    ),
    spec!(
        "at",
        "Timers",
        "at WHEN [-- ] LAMBDA|COMMAND — one-shot timer (sys_set_timer); WHEN is an ISO time, a unix ms time, or +5m/+2h/+1d",
        agent::at
    ),
    spec!(
        "crontab",
        "Timers",
        "crontab -l | crontab -r ID | crontab 'CRON' LAMBDA — recurring timers (sys_list_timers, sys_delete_timer, sys_set_timer)",
        agent::crontab
    ),
    spec!(
        "node",
        "Code",
        "node -e CODE | node -p EXPR | node < code.js — run JavaScript in the sandbox (sys_code); console.log to stdout, console.error to stderr; ./lib/x.ts [FN] runs a lambda file",
        agent::node
    ),
    spec!(
        "ps",
        "Process",
        "ps — running and pending tasks, then the inner loops (TOOL loop, STATUS enabled|stopped)",
        agent::ps
    ),
    spec!(
        "kill",
        "Process",
        "kill [-STOP|-CONT] LOOP… — stop an inner loop (loop_manage enabled:false; -CONT starts it again); tasks are refused: a running task finishes by itself (wait ID), an approval request is the owner's to answer",
        agent::kill
    ),
    spec!(
        "wait",
        "Process",
        "wait [TASK_ID] — a task's status",
        agent::wait
    ),
    spec!(
        "whoami",
        "Identity",
        "whoami — the agent's name and handle",
        agent::whoami
    ),
    spec!(
        "config",
        "Identity",
        "config [get PATH] | config tools [NAME] | config card | config provider — read the agent config",
        agent::config
    ),
    spec!(
        "status",
        "Identity",
        "status — the agent's state and counts",
        agent::status
    ),
    spec!(
        "state",
        "Identity",
        "state [active|idle|hibernate|suspended] — read or set the agent state (sys_set_state)",
        agent::state
    ),
    spec!(
        "meta",
        "Identity",
        "meta [get KEY | set KEY VALUE | del KEY | incr KEY N] — agent metadata (sys_get_meta, sys_set_meta, sys_delete_meta)",
        agent::meta
    ),
    spec!("env", "Identity", "env — exported variables", general_env),
    spec!(
        "export",
        "Identity",
        "export NAME[=VALUE]… — export variables",
        general_export
    ),
    spec!(
        "pwd",
        "Identity",
        "pwd — the working directory (always /: the filesystem is flat)",
        general_pwd
    ),
    spec!(
        "date",
        "Identity",
        "date [-u] [+FORMAT] [-I] — the current time",
        general_date
    ),
    spec!(
        "help",
        "General",
        "help [COMMAND] — list commands, or one command's usage",
        general_help
    ),
    spec!(
        "echo",
        "General",
        "echo [-n] [-e] [ARG…] — print arguments",
        general_echo
    ),
    spec!("true", "General", "true — exit 0", general_true),
    spec!("false", "General", "false — exit 1", general_false),
    spec!(
        "sleep",
        "General",
        "sleep SECONDS — wait (capped per line)",
        general_sleep
    ),
];

/// Runs one command line's argv.
pub(crate) fn run(shell: &mut Shell<'_>, argv: &[String], io: &mut Io) -> Result<i32, Abort> {
    let Some(name) = argv.first() else {
        return Ok(0);
    };
    if name.starts_with("./") || (name.ends_with(".sh") && !name.contains(' ')) {
        return agent::script(shell, argv, io);
    }
    let Some(spec) = COMMANDS.iter().find(|s| s.name == name) else {
        io.err.push_str(&format!(
            "adf_shell: {name}: command not found (run `help` for the commands)\n"
        ));
        return Ok(127);
    };
    let args = &argv[1..];
    // `-h` alone, or `--help`, prints the usage; `-h` among other arguments is the command's
    // own flag (grep -h, sort -h, du -h).
    let help = matches!(args, [only] if only == "-h" && !matches!(spec.name, "echo" | "sort" | "du"))
        || args.first().is_some_and(|a| a == "--help");
    if help {
        io.out.push_str(&format!("usage: {}\n", spec.usage));
        return Ok(0);
    }
    (spec.body)(shell, args, io)
}

fn general_help(_: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    if let Some(name) = args.first() {
        return Ok(match COMMANDS.iter().find(|s| s.name == name) {
            Some(spec) => {
                io.out.push_str(&format!("usage: {}\n", spec.usage));
                0
            }
            None => io.fail("help", format!("no command '{name}'")),
        });
    }
    io.out
        .push_str("adf_shell commands (COMMAND -h for usage):\n");
    let mut category = "";
    for spec in COMMANDS {
        if spec.category != category {
            category = spec.category;
            io.out.push_str(&format!("\n{category}:"));
        }
        io.out.push(' ');
        io.out.push_str(spec.name);
    }
    io.out.push_str("\n\nSyntax: | && || ; > >> < 2>&1, $VAR ${VAR} $(cmd), quotes, heredocs (<<EOF, <<'EOF', <<-EOF), ./script.sh.\nNot supported: &, ( ), globs, $(( )), <( ), if/for/while/case.\n");
    Ok(0)
}

fn general_echo(_: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let mut newline = true;
    let mut escapes = false;
    let mut rest = args;
    while let Some(first) = rest.first() {
        let flags = first
            .strip_prefix('-')
            .filter(|f| !f.is_empty() && f.chars().all(|c| matches!(c, 'n' | 'e' | 'E')));
        let Some(flags) = flags else { break };
        for flag in flags.chars() {
            match flag {
                'n' => newline = false,
                'e' => escapes = true,
                _ => escapes = false,
            }
        }
        rest = &rest[1..];
    }
    let mut text = rest.join(" ");
    if escapes {
        let (expanded, stop) = text::unescape(&text);
        text = expanded;
        if stop {
            newline = false;
        }
    }
    io.out.push_str(&text);
    if newline {
        io.out.push('\n');
    }
    Ok(0)
}

fn general_true(_: &mut Shell<'_>, _: &[String], _: &mut Io) -> Result<i32, Abort> {
    Ok(0)
}

fn general_false(_: &mut Shell<'_>, _: &[String], _: &mut Io) -> Result<i32, Abort> {
    Ok(1)
}

fn general_sleep(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let Some(seconds) = args.first().and_then(|s| parse_duration(s)) else {
        return Ok(io.fail("sleep", "usage: sleep SECONDS (e.g. 1, 0.5, 2s, 1m)"));
    };
    let cap = shell.limits.max_sleep.min(shell.time_left());
    let wait = seconds.min(cap);
    if seconds > cap {
        io.err.push_str(&format!(
            "sleep: capped at {} s per command line\n",
            cap.as_secs_f64()
        ));
    }
    // In slices, so an abandoned call does not keep its thread asleep.
    let until = std::time::Instant::now() + wait;
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        if shell.host.cancelled() {
            return Err(Abort("the adf_shell call was abandoned".into()));
        }
        std::thread::sleep(left.min(std::time::Duration::from_millis(50)));
    }
    Ok(0)
}

fn parse_duration(text: &str) -> Option<std::time::Duration> {
    let (number, unit) = match text.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((at, _)) => (&text[..at], &text[at..]),
        None => (text, "s"),
    };
    let value: f64 = number.parse().ok()?;
    let factor = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        _ => return None,
    };
    let seconds = value * factor;
    (seconds.is_finite() && seconds >= 0.0)
        .then(|| std::time::Duration::from_secs_f64(seconds.min(1e9)))
}

fn general_env(shell: &mut Shell<'_>, _: &[String], io: &mut Io) -> Result<i32, Abort> {
    for name in &shell.exported {
        if let Some(value) = shell.vars.get(name) {
            io.out.push_str(&format!("{name}={value}\n"));
        }
    }
    Ok(0)
}

fn general_export(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let mut status = 0;
    for arg in args {
        let (name, value) = match arg.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (arg.as_str(), None),
        };
        let valid = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            status = io.fail("export", format!("'{arg}': not a valid identifier"));
            continue;
        }
        if let Some(value) = value {
            shell.vars.insert(name.to_owned(), value.to_owned());
        }
        shell.exported.insert(name.to_owned());
    }
    Ok(status)
}

fn general_pwd(_: &mut Shell<'_>, _: &[String], io: &mut Io) -> Result<i32, Abort> {
    io.out.push_str("/\n");
    Ok(0)
}

fn general_date(_: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let now = chrono::Utc::now();
    let mut format = "%a %b %e %H:%M:%S UTC %Y".to_owned();
    for arg in args {
        if let Some(f) = arg.strip_prefix('+') {
            format = f.to_owned();
        } else if arg == "-I" || arg == "--iso-8601" {
            format = "%Y-%m-%d".into();
        } else if arg == "-u" || arg == "--utc" {
        } else {
            return Ok(io.fail(
                "date",
                format!("unsupported argument '{arg}' (use -u, -I or +FORMAT)"),
            ));
        }
    }
    let mut text = String::new();
    use std::fmt::Write as _;
    if write!(text, "{}", now.format(&format)).is_err() {
        return Ok(io.fail("date", format!("invalid format '{format}'")));
    }
    io.out.push_str(&text);
    io.out.push('\n');
    Ok(0)
}
