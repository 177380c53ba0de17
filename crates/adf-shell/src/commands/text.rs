//! Text commands with GNU coreutils results for the flags the tools guide lists (checked
//! against the real tools in the tests). `grep` and `sed` take ERE (and GNU BRE without
//! `-E`, translated to ERE).

use std::cmp::Ordering;

use crate::commands::fs;
use crate::exec::{Abort, Io, Shell};

/// The lines of `text` without their terminators (a final newline ends the last line).
pub(crate) fn lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    if text.ends_with('\n') || text.is_empty() {
        lines.pop();
    }
    lines
}

/// Reads up to `max` digits of `radix` from `chars` onto `value`: the value and how many were
/// read (an escape's `\0NNN`, `\xHH`).
fn digits(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    radix: u32,
    max: usize,
    mut value: u32,
) -> (u32, usize) {
    let mut read = 0;
    while read < max {
        match chars.peek().and_then(|c| c.to_digit(radix)) {
            Some(d) => {
                value = value * radix + d;
                chars.next();
                read += 1;
            }
            None => break,
        }
    }
    (value, read)
}

/// `echo -e` escapes; the flag is whether `\c` stopped the output.
pub(crate) fn unescape(text: &str) -> (String, bool) {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(letter) = chars.next() else {
            out.push('\\');
            continue;
        };
        if let Some(escaped) = c_escape(letter) {
            out.push(escaped);
            continue;
        }
        match letter {
            'e' => out.push('\u{1b}'),
            'c' => return (out, true),
            '0' => {
                let (value, _) = digits(&mut chars, 8, 3, 0);
                out.push(char::from_u32(value).unwrap_or('\u{fffd}'));
            }
            'x' => {
                let (value, digits) = digits(&mut chars, 16, 2, 0);
                if digits == 0 {
                    out.push_str("\\x");
                } else {
                    out.push(char::from_u32(value).unwrap_or('\u{fffd}'));
                }
            }
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    (out, false)
}

/// The one-letter C escapes `echo -e` and `tr` both read (`\n`, `\t`, `\\`, ...).
fn c_escape(letter: char) -> Option<char> {
    Some(match letter {
        'a' => '\u{7}',
        'b' => '\u{8}',
        'f' => '\u{c}',
        'n' => '\n',
        'r' => '\r',
        't' => '\t',
        'v' => '\u{b}',
        '\\' => '\\',
        _ => return None,
    })
}

/// A number argument of a flag: `-n5`, `-n 5`.
fn flag_value<'a>(args: &'a [String], index: &mut usize, attached: &'a str) -> Option<&'a str> {
    if !attached.is_empty() {
        return Some(attached);
    }
    *index += 1;
    args.get(*index).map(String::as_str)
}

/// GNU BRE to ERE: `\( \) \{ \} \| \+ \?` are the operators, their bare forms are literal.
pub(crate) fn bre_to_ere(pattern: &str) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars().peekable();
    let mut in_bracket = false;
    while let Some(c) = chars.next() {
        if in_bracket {
            out.push(c);
            if c == ']' {
                in_bracket = false;
            }
            continue;
        }
        match c {
            '[' => {
                in_bracket = true;
                out.push('[');
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
                if chars.peek() == Some(&']') {
                    out.push_str("\\]");
                    chars.next();
                }
            }
            '\\' => match chars.next() {
                Some(c @ ('(' | ')' | '{' | '}' | '|' | '+' | '?')) => out.push(c),
                Some(c) => {
                    out.push('\\');
                    out.push(c);
                }
                None => out.push_str("\\\\"),
            },
            '(' | ')' | '{' | '}' | '|' | '+' | '?' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// ERE as the regex crate reads it: a `]` first in a bracket is literal, `{` not starting a
/// bound is literal.
fn ere_fixup(pattern: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = pattern.chars().collect();
    let mut index = 0;
    while index < chars.len() {
        let c = chars[index];
        match c {
            '\\' => {
                out.push(c);
                if let Some(next) = chars.get(index + 1) {
                    out.push(*next);
                }
                index += 2;
                continue;
            }
            '[' => {
                out.push('[');
                index += 1;
                if chars.get(index) == Some(&'^') {
                    out.push('^');
                    index += 1;
                }
                if chars.get(index) == Some(&']') {
                    out.push_str("\\]");
                    index += 1;
                }
                while index < chars.len() && chars[index] != ']' {
                    if chars[index] == '[' && chars.get(index + 1) == Some(&':') {
                        while index < chars.len()
                            && !(chars[index] == ']' && chars[index - 1] == ':')
                        {
                            out.push(chars[index]);
                            index += 1;
                        }
                        if index < chars.len() {
                            out.push(']');
                            index += 1;
                        }
                        continue;
                    }
                    if chars[index] == '\\' || chars[index] == '[' {
                        out.push('\\');
                    }
                    out.push(chars[index]);
                    index += 1;
                }
                if index < chars.len() {
                    out.push(']');
                    index += 1;
                }
                continue;
            }
            '{' => {
                let rest: String = chars[index + 1..].iter().collect();
                let bound = rest
                    .find('}')
                    .map(|end| rest[..end].to_owned())
                    .filter(|b| !b.is_empty() && b.chars().all(|c| c.is_ascii_digit() || c == ','));
                match bound {
                    Some(bound) if index > 0 => {
                        out.push('{');
                        out.push_str(&bound);
                        out.push('}');
                        index += bound.chars().count() + 2;
                        continue;
                    }
                    _ => out.push_str("\\{"),
                }
            }
            '}' => out.push_str("\\}"),
            _ => out.push(c),
        }
        index += 1;
    }
    out
}

/// Compiles a grep/sed pattern.
pub(crate) fn compile(
    pattern: &str,
    extended: bool,
    fixed: bool,
    ignore_case: bool,
) -> Result<regex::Regex, String> {
    let source = if fixed {
        regex::escape(pattern)
    } else if extended {
        ere_fixup(pattern)
    } else {
        ere_fixup(&bre_to_ere(pattern))
    };
    regex::RegexBuilder::new(&source)
        .case_insensitive(ignore_case)
        .build()
        .map_err(|e| {
            format!(
                "invalid regular expression '{}': {}",
                shortened(pattern),
                first_line(&e.to_string())
            )
        })
}

/// A pattern as an error message quotes it: cut after 80 characters, so a pathological
/// pattern does not flood the output with itself.
fn shortened(pattern: &str) -> String {
    match pattern.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &pattern[..at]),
        None => pattern.to_owned(),
    }
}

fn first_line(text: &str) -> &str {
    text.lines().last().unwrap_or(text).trim()
}

/// What `grep`'s arguments ask for.
#[derive(Debug, Default)]
struct GrepOptions {
    patterns: Vec<String>,
    files: Vec<String>,
    extended: bool,
    fixed: bool,
    ignore: bool,
    invert: bool,
    count: bool,
    number: bool,
    list: bool,
    quiet: bool,
    only: bool,
    word: bool,
    whole: bool,
    no_name: bool,
    with_name: bool,
    max: Option<usize>,
}

impl GrepOptions {
    /// The options, or the offending argument.
    fn parse(args: &[String]) -> Result<Self, &String> {
        let mut o = Self::default();
        let mut index = 0;
        let mut options_done = false;
        while index < args.len() {
            let arg = &args[index];
            if !options_done && arg == "--" {
                options_done = true;
            } else if !options_done && arg.starts_with("--") {
                match arg.as_str() {
                    "--extended-regexp" => o.extended = true,
                    "--fixed-strings" => o.fixed = true,
                    "--ignore-case" => o.ignore = true,
                    "--invert-match" => o.invert = true,
                    "--count" => o.count = true,
                    "--line-number" => o.number = true,
                    "--quiet" | "--silent" => o.quiet = true,
                    "--only-matching" => o.only = true,
                    _ => return Err(arg),
                }
            } else if !options_done && arg.len() > 1 && arg.starts_with('-') {
                o.short_flags(args, &mut index)?;
            } else if o.patterns.is_empty() && !args_have_e(args) {
                o.patterns.push(arg.clone());
            } else {
                o.files.push(arg.clone());
            }
            index += 1;
        }
        Ok(o)
    }

    /// Reads the letters of `args[*index]`; `-e` and `-m` may take the next argument.
    fn short_flags<'a>(&mut self, args: &'a [String], index: &mut usize) -> Result<(), &'a String> {
        let arg = &args[*index];
        let flags: Vec<char> = arg[1..].chars().collect();
        for (at, &flag) in flags.iter().enumerate() {
            match flag {
                'E' => self.extended = true,
                'F' => self.fixed = true,
                'G' => self.extended = false,
                'i' | 'y' => self.ignore = true,
                'v' => self.invert = true,
                'c' => self.count = true,
                'n' => self.number = true,
                'l' => self.list = true,
                'q' | 's' => self.quiet |= flag == 'q',
                'o' => self.only = true,
                'w' => self.word = true,
                'x' => self.whole = true,
                'h' => self.no_name = true,
                'H' => self.with_name = true,
                'r' | 'R' => {}
                'e' | 'm' => {
                    let rest: String = flags[at + 1..].iter().collect();
                    let Some(value) = flag_value(args, index, &rest) else {
                        return Err(arg);
                    };
                    if flag == 'e' {
                        self.patterns.push(value.to_owned());
                    } else {
                        self.max = value.parse().ok();
                    }
                    return Ok(());
                }
                _ => return Err(arg),
            }
        }
        Ok(())
    }

    /// One regex for every pattern (and every line of a multi-line one), as the flags read it.
    fn regex(&self) -> Result<regex::Regex, regex::Error> {
        let mut alternatives = Vec::new();
        for pattern in &self.patterns {
            for piece in pattern.split('\n') {
                let mut source = if self.fixed {
                    regex::escape(piece)
                } else if self.extended {
                    ere_fixup(piece)
                } else {
                    ere_fixup(&bre_to_ere(piece))
                };
                if self.word {
                    source = format!(r"\b(?:{source})\b");
                }
                if self.whole {
                    source = format!("^(?:{source})$");
                }
                alternatives.push(source);
            }
        }
        regex::RegexBuilder::new(&alternatives.join("|"))
            .case_insensitive(self.ignore)
            .build()
    }
}

pub(crate) fn grep(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let options = match GrepOptions::parse(args) {
        Ok(options) => options,
        Err(arg) => return Ok(usage_error(io, "grep", arg)),
    };
    if options.patterns.is_empty() {
        io.err
            .push_str("usage: grep [-EivcnlqowxFh] [-e PATTERN] PATTERN [FILE…]\n");
        return Ok(2);
    }
    let regex = match options.regex() {
        Ok(regex) => regex,
        Err(e) => {
            io.err.push_str(&format!(
                "grep: invalid regular expression: {}\n",
                first_line(&e.to_string())
            ));
            return Ok(2);
        }
    };
    let (inputs, read_status) = fs::inputs(shell, "grep", &options.files, io);
    let mut matched_any = false;
    for (name, text) in &inputs {
        match grep_input(&options, &regex, name, text, io) {
            GrepInput::Quiet => return Ok(0),
            GrepInput::Matches(matches) => matched_any |= matches > 0,
        }
    }
    if read_status != 0 {
        return Ok(2);
    }
    Ok(if matched_any { 0 } else { 1 })
}

/// How one input went.
enum GrepInput {
    /// `-q` and a line matched: grep is done.
    Quiet,
    /// This many lines matched.
    Matches(usize),
}

/// Writes what `grep` prints for one input.
fn grep_input(
    o: &GrepOptions,
    regex: &regex::Regex,
    name: &str,
    text: &str,
    io: &mut Io,
) -> GrepInput {
    let show_name = o.with_name || (o.files.len() > 1 && !o.no_name);
    let label = if name == "-" {
        "(standard input)"
    } else {
        name
    };
    let mut matches = 0usize;
    for (line_number, line) in lines(text).into_iter().enumerate() {
        if o.max.is_some_and(|m| matches >= m) {
            break;
        }
        let hit = regex.is_match(line) != o.invert;
        if !hit {
            continue;
        }
        matches += 1;
        if o.quiet {
            return GrepInput::Quiet;
        }
        if o.count || o.list {
            continue;
        }
        let prefix = format!(
            "{}{}",
            if show_name {
                format!("{label}:")
            } else {
                String::new()
            },
            if o.number {
                format!("{}:", line_number + 1)
            } else {
                String::new()
            }
        );
        if o.only && !o.invert {
            for found in regex.find_iter(line) {
                if !found.as_str().is_empty() {
                    io.out.push_str(&format!("{prefix}{}\n", found.as_str()));
                }
            }
        } else {
            io.out.push_str(&format!("{prefix}{line}\n"));
        }
    }
    if o.count {
        if show_name {
            io.out.push_str(&format!("{label}:{matches}\n"));
        } else {
            io.out.push_str(&format!("{matches}\n"));
        }
    }
    if o.list && matches > 0 {
        io.out.push_str(label);
        io.out.push('\n');
    }
    GrepInput::Matches(matches)
}

fn args_have_e(args: &[String]) -> bool {
    args.iter().any(|a| {
        a.starts_with('-') && !a.starts_with("--") && a[1..].contains('e') && {
            // -e is an option letter only before any value-taking letter.
            let flags = &a[1..];
            flags.find('e').is_some_and(|at| !flags[..at].contains('m'))
        }
    })
}

fn usage_error(io: &mut Io, name: &str, arg: &str) -> i32 {
    io.err.push_str(&format!(
        "{name}: unsupported option '{arg}' (see `{name} -h`)\n"
    ));
    2
}

// ---------------------------------------------------------------------------------------------
// sed

enum Address {
    Line(usize),
    Last,
    Pattern(regex::Regex),
}

struct SedCommand {
    from: Option<Address>,
    to: Option<Address>,
    negate: bool,
    action: SedAction,
}

enum SedAction {
    Substitute {
        regex: regex::Regex,
        replacement: String,
        global: bool,
        nth: usize,
        print: bool,
    },
    Delete,
    Print,
    Quit,
    LineNumber,
    Append(String),
    Insert(String),
    Change(String),
}

fn sed_parse(script: &str, extended: bool) -> Result<Vec<SedCommand>, String> {
    let chars: Vec<char> = script.chars().collect();
    let mut at = 0;
    let mut commands = Vec::new();
    let skip_ws = |at: &mut usize| {
        while *at < chars.len() && (chars[*at].is_whitespace() || chars[*at] == ';') {
            *at += 1;
        }
    };
    loop {
        skip_ws(&mut at);
        if at >= chars.len() {
            break;
        }
        let from = sed_address(&chars, &mut at, extended)?;
        let mut to = None;
        if from.is_some() && chars.get(at) == Some(&',') {
            at += 1;
            to = sed_address(&chars, &mut at, extended)?;
            if to.is_none() {
                return Err("unexpected ','".into());
            }
        }
        while chars.get(at) == Some(&' ') {
            at += 1;
        }
        let negate = chars.get(at) == Some(&'!');
        if negate {
            at += 1;
        }
        let Some(&command) = chars.get(at) else {
            return Err("missing command".into());
        };
        at += 1;
        let action = match command {
            's' => {
                let Some(&delimiter) = chars.get(at) else {
                    return Err("unterminated `s' command".into());
                };
                at += 1;
                let pattern = sed_part(&chars, &mut at, delimiter)?;
                let replacement = sed_part(&chars, &mut at, delimiter)?;
                let mut global = false;
                let mut ignore = false;
                let mut print = false;
                let mut nth = 1;
                while let Some(&flag) = chars.get(at) {
                    match flag {
                        'g' => global = true,
                        'i' | 'I' => ignore = true,
                        'p' => print = true,
                        '0'..='9' => nth = flag.to_digit(10).map_or(1, |d| d as usize),
                        ';' | '\n' | ' ' | '}' => break,
                        other => return Err(format!("unknown option to `s': {other}")),
                    }
                    at += 1;
                }
                let regex = compile(&pattern, extended, false, ignore)?;
                SedAction::Substitute {
                    regex,
                    replacement,
                    global,
                    nth,
                    print,
                }
            }
            'd' => SedAction::Delete,
            'p' => SedAction::Print,
            'q' => SedAction::Quit,
            '=' => SedAction::LineNumber,
            'a' | 'i' | 'c' => {
                if chars.get(at) == Some(&'\\') {
                    at += 1;
                }
                while chars.get(at) == Some(&' ') || chars.get(at) == Some(&'\n') {
                    at += 1;
                }
                let start = at;
                while at < chars.len() && chars[at] != '\n' {
                    at += 1;
                }
                let text: String = chars[start..at].iter().collect();
                match command {
                    'a' => SedAction::Append(text),
                    'i' => SedAction::Insert(text),
                    _ => SedAction::Change(text),
                }
            }
            other => {
                return Err(format!(
                    "unsupported command '{other}' (supported: s, d, p, q, =, a, i, c)"
                ));
            }
        };
        commands.push(SedCommand {
            from,
            to,
            negate,
            action,
        });
    }
    Ok(commands)
}

fn sed_address(chars: &[char], at: &mut usize, extended: bool) -> Result<Option<Address>, String> {
    match chars.get(*at) {
        Some(c) if c.is_ascii_digit() => {
            let start = *at;
            while chars.get(*at).is_some_and(char::is_ascii_digit) {
                *at += 1;
            }
            let text: String = chars[start..*at].iter().collect();
            Ok(Some(Address::Line(
                text.parse().map_err(|_| "bad line number")?,
            )))
        }
        Some('$') => {
            *at += 1;
            Ok(Some(Address::Last))
        }
        Some('/') => {
            *at += 1;
            let pattern = sed_part(chars, at, '/')?;
            Ok(Some(Address::Pattern(compile(
                &pattern, extended, false, false,
            )?)))
        }
        _ => Ok(None),
    }
}

/// One delimited part of an `s` command (or an address), with `\delimiter` unescaped.
fn sed_part(chars: &[char], at: &mut usize, delimiter: char) -> Result<String, String> {
    let mut out = String::new();
    while let Some(&c) = chars.get(*at) {
        *at += 1;
        if c == delimiter {
            return Ok(out);
        }
        if c == '\\' {
            match chars.get(*at) {
                Some(&next) if next == delimiter => {
                    out.push(next);
                    *at += 1;
                }
                Some('n') => {
                    out.push('\n');
                    *at += 1;
                }
                Some(&next) => {
                    out.push('\\');
                    out.push(next);
                    *at += 1;
                }
                None => out.push('\\'),
            }
            continue;
        }
        out.push(c);
    }
    Err(format!("unterminated `s' command (missing '{delimiter}')"))
}

fn sed_replace(captures: &regex::Captures<'_>, replacement: &str) -> String {
    let mut out = String::new();
    let mut chars = replacement.chars();
    while let Some(c) = chars.next() {
        match c {
            '&' => out.push_str(captures.get(0).map_or("", |m| m.as_str())),
            '\\' => match chars.next() {
                Some(d @ '0'..='9') => {
                    let group = d.to_digit(10).map_or(0, |d| d as usize);
                    out.push_str(captures.get(group).map_or("", |m| m.as_str()));
                }
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            },
            c => out.push(c),
        }
    }
    out
}

pub(crate) fn sed(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let mut scripts = Vec::new();
    let mut files = Vec::new();
    let (mut extended, mut quiet, mut in_place) = (false, false, false);
    let mut index = 0;
    while index < args.len() {
        let arg = &args[index];
        match arg.as_str() {
            "-E" | "-r" | "--regexp-extended" => extended = true,
            "-n" | "--quiet" | "--silent" => quiet = true,
            "-i" | "--in-place" => in_place = true,
            "-e" => {
                index += 1;
                match args.get(index) {
                    Some(script) => scripts.push(script.clone()),
                    None => return Ok(usage_error(io, "sed", arg)),
                }
            }
            flags
                if flags.starts_with('-')
                    && flags.len() > 1
                    && flags[1..].chars().all(|c| "nErsi".contains(c)) =>
            {
                for flag in flags[1..].chars() {
                    match flag {
                        'n' => quiet = true,
                        'E' | 'r' => extended = true,
                        'i' => in_place = true,
                        _ => {}
                    }
                }
            }
            _ if scripts.is_empty() => scripts.push(arg.clone()),
            _ => files.push(arg.clone()),
        }
        index += 1;
    }
    let Some(_) = scripts.first() else {
        return Ok(io.fail("sed", "usage: sed [-E] [-n] [-i] SCRIPT [FILE…]"));
    };
    let commands = match sed_parse(&scripts.join("\n"), extended) {
        Ok(commands) => commands,
        Err(message) => {
            io.err
                .push_str(&format!("sed: -e expression #1: {message}\n"));
            return Ok(1);
        }
    };
    let (inputs, status) = fs::inputs(shell, "sed", &files, io);
    if in_place {
        for (name, text) in &inputs {
            let mut out = String::new();
            sed_run(&commands, text, quiet, &mut out);
            if let Err(message) = fs::write_file(shell, name, &out, false) {
                return Ok(io.fail("sed", message));
            }
        }
        return Ok(status);
    }
    let text: String = inputs.iter().map(|(_, t)| t.as_str()).collect();
    let mut out = String::new();
    sed_run(&commands, &text, quiet, &mut out);
    io.out.push_str(&out);
    Ok(status)
}

fn sed_run(commands: &[SedCommand], text: &str, quiet: bool, out: &mut String) {
    let all = lines(text);
    let total = all.len();
    let mut active = vec![false; commands.len()];
    'lines: for (index, line) in all.iter().enumerate() {
        let number = index + 1;
        let mut space = (*line).to_owned();
        let mut after = Vec::new();
        let mut deleted = false;
        for (which, command) in commands.iter().enumerate() {
            let matches = |address: &Address, space: &str| match address {
                Address::Line(n) => *n == number,
                Address::Last => number == total,
                Address::Pattern(re) => re.is_match(space),
            };
            let selected = match (&command.from, &command.to) {
                (None, _) => true,
                (Some(from), None) => matches(from, &space),
                (Some(from), Some(to)) => {
                    if active[which] {
                        let ends = match to {
                            Address::Line(n) => number >= *n,
                            other => matches(other, &space),
                        };
                        if ends {
                            active[which] = false;
                        }
                        true
                    } else if matches(from, &space) {
                        let ends_now = matches!(to, Address::Line(n) if *n <= number);
                        active[which] = !ends_now;
                        true
                    } else {
                        false
                    }
                }
            };
            if selected == command.negate {
                continue;
            }
            match &command.action {
                SedAction::Substitute {
                    regex,
                    replacement,
                    global,
                    nth,
                    print,
                } => {
                    let mut result = String::new();
                    let mut last = 0;
                    let mut count = 0;
                    let mut replaced = false;
                    for captures in regex.captures_iter(&space) {
                        let Some(whole) = captures.get(0) else {
                            continue;
                        };
                        count += 1;
                        if count < *nth || (replaced && !global) {
                            continue;
                        }
                        result.push_str(&space[last..whole.start()]);
                        result.push_str(&sed_replace(&captures, replacement));
                        last = whole.end();
                        replaced = true;
                    }
                    if replaced {
                        result.push_str(&space[last..]);
                        space = result;
                        if *print {
                            out.push_str(&space);
                            out.push('\n');
                        }
                    }
                }
                SedAction::Delete => {
                    deleted = true;
                    break;
                }
                SedAction::Print => {
                    out.push_str(&space);
                    out.push('\n');
                }
                SedAction::LineNumber => out.push_str(&format!("{number}\n")),
                SedAction::Append(text) => after.push(text.clone()),
                SedAction::Insert(text) => {
                    out.push_str(text);
                    out.push('\n');
                }
                SedAction::Change(text) => {
                    out.push_str(text);
                    out.push('\n');
                    deleted = true;
                    break;
                }
                SedAction::Quit => {
                    if !quiet {
                        out.push_str(&space);
                        out.push('\n');
                    }
                    for text in after {
                        out.push_str(&text);
                        out.push('\n');
                    }
                    break 'lines;
                }
            }
        }
        if !deleted && !quiet {
            out.push_str(&space);
            out.push('\n');
        }
        for text in after {
            out.push_str(&text);
            out.push('\n');
        }
    }
}

// ---------------------------------------------------------------------------------------------
// head, tail

fn count_arg(
    args: &[String],
    name: &str,
    io: &mut Io,
) -> Result<(Option<i64>, bool, bool, Vec<String>), i32> {
    let mut count = None;
    let mut bytes = false;
    let mut from_start = false;
    let mut files = Vec::new();
    let mut index = 0;
    while index < args.len() {
        let arg = &args[index];
        let value = if let Some(rest) = arg.strip_prefix("-n") {
            Some(flag_value(args, &mut index, rest))
        } else if let Some(rest) = arg.strip_prefix("-c") {
            bytes = true;
            Some(flag_value(args, &mut index, rest))
        } else if arg.len() > 1
            && arg.starts_with('-')
            && arg[1..].chars().all(|c| c.is_ascii_digit())
        {
            Some(Some(&arg[1..]))
        } else {
            None
        };
        match value {
            Some(Some(text)) => {
                let text = if let Some(rest) = text.strip_prefix('+') {
                    from_start = true;
                    rest
                } else {
                    text
                };
                match text.parse::<i64>() {
                    Ok(n) => count = Some(n),
                    Err(_) => {
                        return Err(io.fail(name, format!("invalid number of lines: '{text}'")));
                    }
                }
            }
            Some(None) => return Err(io.fail(name, "option requires an argument")),
            None => files.push(arg.clone()),
        }
        index += 1;
    }
    Ok((count, bytes, from_start, files))
}

pub(crate) fn head(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let (count, bytes, _, files) = match count_arg(args, "head", io) {
        Ok(parsed) => parsed,
        Err(status) => return Ok(status),
    };
    let count = count.unwrap_or(10);
    let (inputs, status) = fs::inputs(shell, "head", &files, io);
    let headers = inputs.len() > 1;
    for (at, (name, text)) in inputs.iter().enumerate() {
        if headers {
            io.out.push_str(&format!(
                "{}==> {name} <==\n",
                if at > 0 { "\n" } else { "" }
            ));
        }
        if bytes {
            let bytes = text.as_bytes();
            let n = if count < 0 {
                bytes.len().saturating_sub(count.unsigned_abs() as usize)
            } else {
                (count as usize).min(bytes.len())
            };
            io.out.push_str(&String::from_utf8_lossy(&bytes[..n]));
            continue;
        }
        let pieces: Vec<&str> = text.split_inclusive('\n').collect();
        let n = if count < 0 {
            pieces.len().saturating_sub(count.unsigned_abs() as usize)
        } else {
            (count as usize).min(pieces.len())
        };
        io.out.push_str(&pieces[..n].concat());
    }
    Ok(status)
}

pub(crate) fn tail(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let (count, bytes, from_start, files) = match count_arg(args, "tail", io) {
        Ok(parsed) => parsed,
        Err(status) => return Ok(status),
    };
    let count = count.unwrap_or(10).unsigned_abs() as usize;
    let (inputs, status) = fs::inputs(shell, "tail", &files, io);
    let headers = inputs.len() > 1;
    for (at, (name, text)) in inputs.iter().enumerate() {
        if headers {
            io.out.push_str(&format!(
                "{}==> {name} <==\n",
                if at > 0 { "\n" } else { "" }
            ));
        }
        if bytes {
            let bytes = text.as_bytes();
            let start = if from_start {
                count.saturating_sub(1).min(bytes.len())
            } else {
                bytes.len().saturating_sub(count)
            };
            io.out.push_str(&String::from_utf8_lossy(&bytes[start..]));
            continue;
        }
        let pieces: Vec<&str> = text.split_inclusive('\n').collect();
        let start = if from_start {
            count.saturating_sub(1).min(pieces.len())
        } else {
            pieces.len().saturating_sub(count)
        };
        io.out.push_str(&pieces[start..].concat());
    }
    Ok(status)
}

// ---------------------------------------------------------------------------------------------
// sort

#[derive(Clone, Default)]
struct KeySpec {
    start_field: usize,
    start_char: usize,
    end_field: Option<usize>,
    end_char: usize,
    numeric: bool,
    reverse: bool,
    fold: bool,
    human: bool,
    version: bool,
    blanks: bool,
    general: bool,
}

fn parse_key(spec: &str) -> Option<KeySpec> {
    let (start, end) = match spec.split_once(',') {
        Some((s, e)) => (s, Some(e)),
        None => (spec, None),
    };
    let mut key = KeySpec::default();
    let split_flags = |part: &str| -> (String, String) {
        let at = part
            .find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(part.len());
        (part[..at].to_owned(), part[at..].to_owned())
    };
    let apply = |key: &mut KeySpec, flags: &str| {
        for flag in flags.chars() {
            match flag {
                'n' => key.numeric = true,
                'r' => key.reverse = true,
                'f' => key.fold = true,
                'h' => key.human = true,
                'V' => key.version = true,
                'b' => key.blanks = true,
                'g' => key.general = true,
                _ => {}
            }
        }
    };
    let (position, flags) = split_flags(start);
    let (field, ch) = match position.split_once('.') {
        Some((f, c)) => (f.parse().ok()?, c.parse().ok()?),
        None => (position.parse().ok()?, 1),
    };
    key.start_field = field;
    key.start_char = ch;
    apply(&mut key, &flags);
    if let Some(end) = end {
        let (position, flags) = split_flags(end);
        let (field, ch) = match position.split_once('.') {
            Some((f, c)) => (f.parse().ok()?, c.parse().ok()?),
            None => (position.parse().ok()?, 0),
        };
        key.end_field = Some(field);
        key.end_char = ch;
        apply(&mut key, &flags);
    }
    (key.start_field >= 1).then_some(key)
}

/// The `[start, end)` byte ranges of the fields of `line` (GNU: without `-t`, a field is
/// its leading blanks plus the non-blanks after them).
fn field_ranges(line: &str, separator: Option<char>) -> Vec<(usize, usize)> {
    let mut ranges = Vec::new();
    match separator {
        Some(sep) => {
            let mut start = 0;
            for (at, c) in line.char_indices() {
                if c == sep {
                    ranges.push((start, at));
                    start = at + c.len_utf8();
                }
            }
            ranges.push((start, line.len()));
        }
        None => {
            let bytes = line.as_bytes();
            let mut at = 0;
            while at < bytes.len() {
                let start = at;
                while at < bytes.len() && (bytes[at] == b' ' || bytes[at] == b'\t') {
                    at += 1;
                }
                while at < bytes.len() && bytes[at] != b' ' && bytes[at] != b'\t' {
                    at += 1;
                }
                ranges.push((start, at));
            }
        }
    }
    ranges
}

fn key_text<'l>(line: &'l str, key: &KeySpec, separator: Option<char>) -> &'l str {
    let ranges = field_ranges(line, separator);
    let Some(&(field_start, field_end)) = ranges.get(key.start_field - 1) else {
        return "";
    };
    let mut start_field_text = &line[field_start..field_end];
    if key.blanks {
        start_field_text = start_field_text.trim_start_matches([' ', '\t']);
    }
    let base = field_end - start_field_text.len();
    let start = start_field_text
        .char_indices()
        .nth(key.start_char.saturating_sub(1))
        .map_or(field_end, |(i, _)| base + i);
    let end = match key.end_field {
        None => line.len(),
        Some(end_field) => match ranges.get(end_field.saturating_sub(1)) {
            None => line.len(),
            Some(&(s, e)) => {
                if key.end_char == 0 {
                    e
                } else {
                    let text = &line[s..e];
                    let skip = if key.blanks {
                        text.len() - text.trim_start_matches([' ', '\t']).len()
                    } else {
                        0
                    };
                    line[s + skip..e]
                        .char_indices()
                        .nth(key.end_char)
                        .map_or(e, |(i, _)| s + skip + i)
                }
            }
        },
    };
    if end <= start { "" } else { &line[start..end] }
}

fn numeric_value(text: &str) -> f64 {
    let text = text.trim_start_matches([' ', '\t']);
    let mut end = 0;
    for (at, c) in text.char_indices() {
        if c.is_ascii_digit() || c == '.' || (at == 0 && c == '-') {
            end = at + c.len_utf8();
        } else {
            break;
        }
    }
    text[..end].parse().unwrap_or(0.0)
}

fn human_value(text: &str) -> f64 {
    let trimmed = text.trim_start();
    let number = numeric_value(trimmed);
    let digits = trimmed
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || *c == '.' || (*i == 0 && *c == '-')))
        .map(|(i, _)| i);
    let factor = match digits.and_then(|i| trimmed[i..].chars().next()) {
        Some('K' | 'k') => 1e3,
        Some('M') => 1e6,
        Some('G') => 1e9,
        Some('T') => 1e12,
        Some('P') => 1e15,
        _ => 1.0,
    };
    number * factor
}

/// GNU `sort -V`: Debian's version comparison (`verrevcmp`): non-digit runs compare with
/// letters before other characters and `~` before everything, digit runs numerically.
fn version_cmp(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    fn order(c: Option<u8>) -> i32 {
        match c {
            None => 0,
            Some(c) if c.is_ascii_digit() => 0,
            Some(c) if c.is_ascii_alphabetic() => i32::from(c),
            Some(b'~') => -1,
            Some(c) => i32::from(c) + 256,
        }
    }
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        while (i < a.len() && !a[i].is_ascii_digit()) || (j < b.len() && !b[j].is_ascii_digit()) {
            let (x, y) = (order(a.get(i).copied()), order(b.get(j).copied()));
            if x != y {
                return x.cmp(&y);
            }
            i += 1;
            j += 1;
        }
        while a.get(i) == Some(&b'0') {
            i += 1;
        }
        while b.get(j) == Some(&b'0') {
            j += 1;
        }
        let mut first_diff = Ordering::Equal;
        while i < a.len() && j < b.len() && a[i].is_ascii_digit() && b[j].is_ascii_digit() {
            if first_diff == Ordering::Equal {
                first_diff = a[i].cmp(&b[j]);
            }
            i += 1;
            j += 1;
        }
        if i < a.len() && a[i].is_ascii_digit() {
            return Ordering::Greater;
        }
        if j < b.len() && b[j].is_ascii_digit() {
            return Ordering::Less;
        }
        if first_diff != Ordering::Equal {
            return first_diff;
        }
    }
    Ordering::Equal
}

fn compare_key(a: &str, b: &str, key: &KeySpec) -> Ordering {
    let order = if key.numeric || key.general {
        numeric_value(a)
            .partial_cmp(&numeric_value(b))
            .unwrap_or(Ordering::Equal)
    } else if key.human {
        human_value(a)
            .partial_cmp(&human_value(b))
            .unwrap_or(Ordering::Equal)
    } else if key.version {
        version_cmp(a, b)
    } else if key.fold {
        a.bytes()
            .map(|c| c.to_ascii_uppercase())
            .cmp(b.bytes().map(|c| c.to_ascii_uppercase()))
    } else if key.blanks {
        a.trim_start_matches([' ', '\t'])
            .cmp(b.trim_start_matches([' ', '\t']))
    } else {
        a.cmp(b)
    };
    if key.reverse { order.reverse() } else { order }
}

/// What `sort`'s arguments ask for.
struct SortOptions {
    /// The ordering flags given outside any key; with no `-k`, the one key.
    global: KeySpec,
    keys: Vec<KeySpec>,
    separator: Option<char>,
    unique: bool,
    stable: bool,
    check: bool,
    output: Option<String>,
    files: Vec<String>,
}

impl SortOptions {
    /// The options, or the exit status after the error is written to `io`.
    fn parse(args: &[String], io: &mut Io) -> Result<Self, i32> {
        let mut o = Self {
            global: KeySpec {
                start_field: 1,
                start_char: 1,
                ..KeySpec::default()
            },
            keys: Vec::new(),
            separator: None,
            unique: false,
            stable: false,
            check: false,
            output: None,
            files: Vec::new(),
        };
        let mut index = 0;
        while index < args.len() {
            let arg = &args[index];
            if arg.len() > 1 && arg.starts_with('-') && !arg.starts_with("--") {
                o.short_flags(args, &mut index, io)?;
            } else {
                o.files.push(arg.clone());
            }
            index += 1;
        }
        o.inherit_global_flags();
        Ok(o)
    }

    /// Reads the letters of `args[*index]`; `-t`, `-k` and `-o` may take the next argument.
    fn short_flags(&mut self, args: &[String], index: &mut usize, io: &mut Io) -> Result<(), i32> {
        let flags: Vec<char> = args[*index][1..].chars().collect();
        for (at, &flag) in flags.iter().enumerate() {
            match flag {
                'r' => self.global.reverse = true,
                'n' => self.global.numeric = true,
                'g' => self.global.general = true,
                'f' => self.global.fold = true,
                'h' => self.global.human = true,
                'V' => self.global.version = true,
                'b' => self.global.blanks = true,
                'u' => self.unique = true,
                's' => self.stable = true,
                'c' => self.check = true,
                't' | 'k' | 'o' => {
                    let rest: String = flags[at + 1..].iter().collect();
                    let Some(value) = flag_value(args, index, &rest) else {
                        return Err(
                            io.fail("sort", format!("option requires an argument -- '{flag}'"))
                        );
                    };
                    return self.valued_flag(flag, value, io);
                }
                other => return Err(usage_error(io, "sort", &format!("-{other}"))),
            }
        }
        Ok(())
    }

    fn valued_flag(&mut self, flag: char, value: &str, io: &mut Io) -> Result<(), i32> {
        match flag {
            't' => {
                let value = if value == "\\t" { "\t" } else { value };
                let mut chars = value.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => self.separator = Some(c),
                    _ => return Err(io.fail("sort", "the separator must be one character")),
                }
            }
            'k' => match parse_key(value) {
                Some(key) => self.keys.push(key),
                None => return Err(io.fail("sort", format!("invalid key '{value}'"))),
            },
            _ => self.output = Some(value.to_owned()),
        }
        Ok(())
    }

    /// Keys inherit the global ordering flags when they carry none of their own.
    fn inherit_global_flags(&mut self) {
        let global = &self.global;
        for key in &mut self.keys {
            let own = key.numeric
                || key.reverse
                || key.fold
                || key.human
                || key.version
                || key.general
                || key.blanks;
            if !own {
                key.numeric = global.numeric;
                key.reverse = global.reverse;
                key.fold = global.fold;
                key.human = global.human;
                key.version = global.version;
                key.general = global.general;
                key.blanks = global.blanks;
            }
        }
    }

    /// The order of two lines by the keys (ties stay equal).
    fn compare(&self, a: &str, b: &str) -> Ordering {
        if self.keys.is_empty() {
            return compare_key(a, b, &self.global);
        }
        for key in &self.keys {
            let order = compare_key(
                key_text(a, key, self.separator),
                key_text(b, key, self.separator),
                key,
            );
            if order != Ordering::Equal {
                return order;
            }
        }
        Ordering::Equal
    }
}

pub(crate) fn sort(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let o = match SortOptions::parse(args, io) {
        Ok(options) => options,
        Err(status) => return Ok(status),
    };
    let (inputs, status) = fs::inputs(shell, "sort", &o.files, io);
    if status != 0 {
        return Ok(2);
    }
    let text: String = inputs
        .iter()
        .map(|(_, t)| {
            if t.is_empty() || t.ends_with('\n') {
                t.clone()
            } else {
                format!("{t}\n")
            }
        })
        .collect();
    let mut all: Vec<&str> = lines(&text);
    if o.check {
        for (at, pair) in all.windows(2).enumerate() {
            if o.compare(pair[0], pair[1]) == Ordering::Greater {
                io.err
                    .push_str(&format!("sort: -:{}: disorder: {}\n", at + 2, pair[1]));
                return Ok(1);
            }
        }
        return Ok(0);
    }
    let last_resort = !(o.stable || o.unique);
    all.sort_by(|a, b| {
        let order = o.compare(a, b);
        if order == Ordering::Equal && last_resort {
            let fallback = a.cmp(b);
            if o.global.reverse {
                fallback.reverse()
            } else {
                fallback
            }
        } else {
            order
        }
    });
    if o.unique {
        all.dedup_by(|b, a| o.compare(a, b) == Ordering::Equal);
    }
    let mut out = String::new();
    for line in all {
        out.push_str(line);
        out.push('\n');
    }
    match o.output {
        Some(path) => {
            if let Err(message) = fs::write_file(shell, &path, &out, false) {
                return Ok(io.fail("sort", message));
            }
        }
        None => io.out.push_str(&out),
    }
    Ok(0)
}

pub(crate) fn uniq(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let (mut count, mut repeated, mut unique, mut ignore) = (false, false, false, false);
    let (mut skip_fields, mut skip_chars) = (0usize, 0usize);
    let mut files = Vec::new();
    let mut index = 0;
    while index < args.len() {
        let arg = &args[index];
        if arg.len() > 1 && arg.starts_with('-') {
            let flags: Vec<char> = arg[1..].chars().collect();
            let mut at = 0;
            while at < flags.len() {
                match flags[at] {
                    'c' => count = true,
                    'd' => repeated = true,
                    'u' => unique = true,
                    'i' => ignore = true,
                    'f' | 's' => {
                        let rest: String = flags[at + 1..].iter().collect();
                        let flag = flags[at];
                        let Some(value) =
                            flag_value(args, &mut index, &rest).and_then(|v| v.parse().ok())
                        else {
                            return Ok(io.fail("uniq", format!("invalid number for -{flag}")));
                        };
                        if flag == 'f' {
                            skip_fields = value;
                        } else {
                            skip_chars = value;
                        }
                        at = flags.len();
                        continue;
                    }
                    other => return Ok(usage_error(io, "uniq", &format!("-{other}"))),
                }
                at += 1;
            }
        } else {
            files.push(arg.clone());
        }
        index += 1;
    }
    if files.len() > 1 {
        return Ok(io.fail(
            "uniq",
            "writing to an output file is not supported; redirect with >",
        ));
    }
    let (inputs, status) = fs::inputs(shell, "uniq", &files, io);
    let text: String = inputs.into_iter().map(|(_, t)| t).collect();
    let compared = |line: &str| -> String {
        let mut rest = line;
        for _ in 0..skip_fields {
            rest = rest.trim_start_matches([' ', '\t']);
            rest = rest.trim_start_matches(|c: char| c != ' ' && c != '\t');
        }
        let rest: String = rest.chars().skip(skip_chars).collect();
        if ignore { rest.to_lowercase() } else { rest }
    };
    let mut groups: Vec<(&str, usize)> = Vec::new();
    let mut last_key: Option<String> = None;
    for line in lines(&text) {
        let key = compared(line);
        match (&last_key, groups.last_mut()) {
            (Some(previous), Some(group)) if *previous == key => group.1 += 1,
            _ => {
                groups.push((line, 1));
                last_key = Some(key);
            }
        }
    }
    for (line, n) in groups {
        if (repeated && n < 2) || (unique && n > 1) {
            continue;
        }
        if count {
            io.out.push_str(&format!("{n:>7} {line}\n"));
        } else {
            io.out.push_str(line);
            io.out.push('\n');
        }
    }
    Ok(status)
}

// ---------------------------------------------------------------------------------------------
// wc

pub(crate) fn wc(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let (mut l, mut w, mut c, mut m) = (false, false, false, false);
    let mut files = Vec::new();
    for arg in args {
        if arg.len() > 1 && arg.starts_with('-') {
            for flag in arg[1..].chars() {
                match flag {
                    'l' => l = true,
                    'w' => w = true,
                    'c' => c = true,
                    'm' => m = true,
                    other => return Ok(usage_error(io, "wc", &format!("-{other}"))),
                }
            }
        } else {
            files.push(arg.clone());
        }
    }
    if !(l || w || c || m) {
        (l, w, c) = (true, true, true);
    }
    let (inputs, status) = fs::inputs(shell, "wc", &files, io);
    let mut rows = Vec::new();
    let mut total = [0usize; 4];
    for (name, text) in &inputs {
        let counts = [
            text.matches('\n').count(),
            text.split_ascii_whitespace().count(),
            text.chars().count(),
            text.len(),
        ];
        for (t, n) in total.iter_mut().zip(counts) {
            *t += n;
        }
        rows.push((
            if files.is_empty() {
                String::new()
            } else {
                name.clone()
            },
            counts,
        ));
    }
    if inputs.len() > 1 {
        rows.push(("total".into(), total));
    }
    let selected = [l, w, m, c];
    let shown = selected.iter().filter(|s| **s).count();
    let width = if shown == 1 && rows.len() == 1 {
        0
    } else if files.is_empty() || files.iter().any(|f| f == "-") {
        7
    } else {
        total[3].to_string().len()
    };
    for (name, counts) in rows {
        let values = [counts[0], counts[1], counts[2], counts[3]];
        let fields: Vec<String> = selected
            .iter()
            .zip(values)
            .filter(|(s, _)| **s)
            .map(|(_, v)| format!("{v:>width$}"))
            .collect();
        let mut line = fields.join(" ");
        if !name.is_empty() {
            line.push(' ');
            line.push_str(&name);
        }
        io.out.push_str(&line);
        io.out.push('\n');
    }
    Ok(status)
}

// ---------------------------------------------------------------------------------------------
// cut

fn parse_list(list: &str) -> Option<Vec<(usize, usize)>> {
    let mut ranges = Vec::new();
    for piece in list.split(',') {
        let (start, end) = match piece.split_once('-') {
            Some(("", "")) => return None,
            Some((s, "")) => (s.parse().ok()?, usize::MAX),
            Some(("", e)) => (1, e.parse().ok()?),
            Some((s, e)) => (s.parse().ok()?, e.parse().ok()?),
            None => {
                let n = piece.parse().ok()?;
                (n, n)
            }
        };
        if start == 0 || end < start {
            return None;
        }
        ranges.push((start, end));
    }
    Some(ranges)
}

fn in_list(ranges: &[(usize, usize)], n: usize) -> bool {
    ranges.iter().any(|(s, e)| n >= *s && n <= *e)
}

pub(crate) fn cut(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let mut fields = None;
    let mut chars = None;
    let mut delimiter = '\t';
    let mut output_delimiter = None;
    let mut only_delimited = false;
    let mut complement = false;
    let mut files = Vec::new();
    let mut index = 0;
    while index < args.len() {
        let arg = &args[index];
        if let Some(rest) = arg.strip_prefix("--output-delimiter=") {
            output_delimiter = Some(rest.to_owned());
        } else if arg == "--complement" {
            complement = true;
        } else if arg.len() > 1 && arg.starts_with('-') {
            let flag = arg.chars().nth(1).unwrap_or('-');
            let rest = &arg[2..];
            match flag {
                's' => only_delimited = true,
                'f' | 'c' | 'b' | 'd' => {
                    let Some(value) = flag_value(args, &mut index, rest) else {
                        return Ok(
                            io.fail("cut", format!("option requires an argument -- '{flag}'"))
                        );
                    };
                    match flag {
                        'd' => {
                            let mut chars_of = value.chars();
                            match (chars_of.next(), chars_of.next()) {
                                (Some(c), None) => delimiter = c,
                                _ => {
                                    return Ok(
                                        io.fail("cut", "the delimiter must be a single character")
                                    );
                                }
                            }
                        }
                        'f' => fields = Some(value.to_owned()),
                        _ => chars = Some(value.to_owned()),
                    }
                }
                other => return Ok(usage_error(io, "cut", &format!("-{other}"))),
            }
        } else {
            files.push(arg.clone());
        }
        index += 1;
    }
    let (list, by_field) = match (fields, chars) {
        (Some(f), None) => (f, true),
        (None, Some(c)) => (c, false),
        _ => {
            return Ok(io.fail(
                "cut",
                "you must specify a list of bytes, characters, or fields",
            ));
        }
    };
    let Some(ranges) = parse_list(&list) else {
        return Ok(io.fail("cut", format!("invalid list '{list}'")));
    };
    let (inputs, status) = fs::inputs(shell, "cut", &files, io);
    let text: String = inputs.into_iter().map(|(_, t)| t).collect();
    let out_sep = output_delimiter.unwrap_or_else(|| delimiter.to_string());
    for line in lines(&text) {
        if by_field {
            if !line.contains(delimiter) {
                if !only_delimited {
                    io.out.push_str(line);
                    io.out.push('\n');
                }
                continue;
            }
            let picked: Vec<&str> = line
                .split(delimiter)
                .enumerate()
                .filter(|(i, _)| in_list(&ranges, i + 1) != complement)
                .map(|(_, f)| f)
                .collect();
            io.out.push_str(&picked.join(&out_sep));
        } else {
            let picked: String = line
                .chars()
                .enumerate()
                .filter(|(i, _)| in_list(&ranges, i + 1) != complement)
                .map(|(_, c)| c)
                .collect();
            io.out.push_str(&picked);
        }
        io.out.push('\n');
    }
    Ok(status)
}

// ---------------------------------------------------------------------------------------------
// tr

fn tr_set(spec: &str) -> Result<Vec<char>, String> {
    let chars: Vec<char> = unescape_tr(spec);
    let mut out = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        if chars[at] == '[' && chars.get(at + 1) == Some(&':') {
            let rest: String = chars[at..].iter().collect();
            if let Some(end) = rest.find(":]") {
                let class = &rest[2..end];
                let members: Vec<char> = match class {
                    "upper" => ('A'..='Z').collect(),
                    "lower" => ('a'..='z').collect(),
                    "digit" => ('0'..='9').collect(),
                    "alpha" => ('A'..='Z').chain('a'..='z').collect(),
                    "alnum" => ('0'..='9').chain('A'..='Z').chain('a'..='z').collect(),
                    "space" => vec!['\t', '\n', '\u{b}', '\u{c}', '\r', ' '],
                    "blank" => vec!['\t', ' '],
                    "punct" => (33u8..=126)
                        .map(char::from)
                        .filter(|c| c.is_ascii_punctuation())
                        .collect(),
                    "xdigit" => ('0'..='9').chain('A'..='F').chain('a'..='f').collect(),
                    "cntrl" => (0u8..32)
                        .map(char::from)
                        .chain(std::iter::once('\u{7f}'))
                        .collect(),
                    "print" => (32u8..=126).map(char::from).collect(),
                    "graph" => (33u8..=126).map(char::from).collect(),
                    other => return Err(format!("invalid character class '{other}'")),
                };
                out.extend(members);
                at += end + 2;
                continue;
            }
        }
        if chars.get(at + 1) == Some(&'-') && at + 2 < chars.len() {
            let (from, to) = (chars[at], chars[at + 2]);
            if to < from {
                return Err(format!(
                    "range-endpoints of '{from}-{to}' are in reverse collating sequence order"
                ));
            }
            out.extend(from..=to);
            at += 3;
            continue;
        }
        out.push(chars[at]);
        at += 1;
    }
    Ok(out)
}

fn unescape_tr(spec: &str) -> Vec<char> {
    let mut out = Vec::new();
    let mut chars = spec.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(letter) if c_escape(letter).is_some() => {
                out.extend(c_escape(letter));
            }
            Some(d @ '0'..='7') => {
                let (value, _) = digits(&mut chars, 8, 2, d.to_digit(8).unwrap_or(0));
                out.push(char::from_u32(value).unwrap_or('\u{fffd}'));
            }
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

pub(crate) fn tr(_: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let (mut delete, mut squeeze, mut complement) = (false, false, false);
    let mut sets = Vec::new();
    for arg in args {
        if arg.len() > 1
            && arg.starts_with('-')
            && sets.is_empty()
            && arg[1..].chars().all(|c| "dscC".contains(c))
        {
            for flag in arg[1..].chars() {
                match flag {
                    'd' => delete = true,
                    's' => squeeze = true,
                    _ => complement = true,
                }
            }
        } else {
            sets.push(arg.as_str());
        }
    }
    let parsed: Result<Vec<Vec<char>>, String> = sets.iter().map(|s| tr_set(s)).collect();
    let sets = match parsed {
        Ok(sets) => sets,
        Err(message) => return Ok(io.fail("tr", message)),
    };
    let input = std::mem::take(&mut io.stdin);
    let in_set1 = |c: char| sets.first().is_some_and(|s| s.contains(&c)) != complement;
    let mut out = String::with_capacity(input.len());
    match (delete, sets.len()) {
        (true, 1) | (true, 2) => {
            let squeeze_set = if squeeze { sets.get(1) } else { None };
            let mut last: Option<char> = None;
            for c in input.chars() {
                if in_set1(c) {
                    continue;
                }
                if squeeze_set.is_some_and(|s| s.contains(&c)) && last == Some(c) {
                    continue;
                }
                out.push(c);
                last = Some(c);
            }
        }
        (false, 1) if squeeze => {
            let mut last: Option<char> = None;
            for c in input.chars() {
                if in_set1(c) && last == Some(c) {
                    continue;
                }
                out.push(c);
                last = Some(c);
            }
        }
        (false, 2) => {
            let (from, to) = (&sets[0], &sets[1]);
            if to.is_empty() {
                return Ok(io.fail("tr", "when not truncating set1, string2 must be non-empty"));
            }
            let mut last: Option<char> = None;
            for c in input.chars() {
                let mapped = if complement {
                    if from.contains(&c) {
                        c
                    } else {
                        to[to.len() - 1]
                    }
                } else {
                    match from.iter().rposition(|f| *f == c) {
                        Some(at) => to[at.min(to.len() - 1)],
                        None => c,
                    }
                };
                let translated = complement != from.contains(&c);
                if squeeze && translated && to.contains(&mapped) && last == Some(mapped) {
                    continue;
                }
                out.push(mapped);
                last = Some(mapped);
            }
        }
        _ => return Ok(io.fail("tr", "usage: tr [-d] [-s] [-c] SET1 [SET2]")),
    }
    io.out.push_str(&out);
    Ok(0)
}

// ---------------------------------------------------------------------------------------------
// tee, rev, tac

pub(crate) fn tee(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let append = args.iter().any(|a| a == "-a");
    let input = std::mem::take(&mut io.stdin);
    let mut status = 0;
    for file in args.iter().filter(|a| !a.starts_with('-')) {
        if file == "/dev/null" {
            continue;
        }
        if let Err(message) = fs::write_file(shell, file, &input, append) {
            status = io.fail("tee", message);
        }
    }
    io.out.push_str(&input);
    Ok(status)
}

pub(crate) fn rev(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let (inputs, status) = fs::inputs(shell, "rev", args, io);
    for (_, text) in inputs {
        for piece in text.split_inclusive('\n') {
            let (line, newline) = match piece.strip_suffix('\n') {
                Some(line) => (line, "\n"),
                None => (piece, ""),
            };
            io.out.extend(line.chars().rev());
            io.out.push_str(newline);
        }
    }
    Ok(status)
}

pub(crate) fn tac(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let (inputs, status) = fs::inputs(shell, "tac", args, io);
    for (_, text) in inputs {
        let pieces: Vec<&str> = text.split_inclusive('\n').collect();
        for piece in pieces.into_iter().rev() {
            io.out.push_str(piece);
        }
    }
    Ok(status)
}

// ---------------------------------------------------------------------------------------------
// diff

/// Longest-common-subsequence edit script: runs of (kind, a range, b range).
fn diff_hunks(a: &[&str], b: &[&str]) -> Vec<(usize, usize, usize, usize)> {
    let (n, m) = (a.len(), b.len());
    let mut table = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            table[i][j] = if a[i] == b[j] {
                table[i + 1][j + 1] + 1
            } else {
                table[i + 1][j].max(table[i][j + 1])
            };
        }
    }
    let mut hunks = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            i += 1;
            j += 1;
            continue;
        }
        let (start_i, start_j) = (i, j);
        while (i < n || j < m) && !(i < n && j < m && a[i] == b[j]) {
            if j >= m || (i < n && table[i + 1][j] >= table[i][j + 1]) {
                i += 1;
            } else {
                j += 1;
            }
        }
        hunks.push((start_i, i, start_j, j));
    }
    hunks
}

fn range_text(start: usize, end: usize) -> String {
    if end - start <= 1 {
        format!("{}", if end == start { start } else { start + 1 })
    } else {
        format!("{},{}", start + 1, end)
    }
}

pub(crate) fn diff(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let unified = args.iter().any(|a| a == "-u");
    let files: Vec<String> = args
        .iter()
        .filter(|a| !a.starts_with('-') || *a == "-")
        .cloned()
        .collect();
    if files.len() != 2 {
        io.err.push_str("diff: usage: diff [-u] FILE1 FILE2\n");
        return Ok(2);
    }
    let (inputs, status) = fs::inputs(shell, "diff", &files, io);
    if status != 0 || inputs.len() != 2 {
        return Ok(2);
    }
    let a = lines(&inputs[0].1);
    let b = lines(&inputs[1].1);
    if a.len().saturating_mul(b.len()) > 25_000_000 {
        return Ok(io.fail(
            "diff",
            "the files are too large to compare here (over 5,000 lines each)",
        ));
    }
    let hunks = diff_hunks(&a, &b);
    if hunks.is_empty() {
        return Ok(0);
    }
    if unified {
        io.out
            .push_str(&format!("--- {}\n+++ {}\n", files[0], files[1]));
        for (a0, a1, b0, b1) in &hunks {
            let context_start_a = a0.saturating_sub(3);
            let context_start_b = b0.saturating_sub(3);
            let context_end_a = (*a1 + 3).min(a.len());
            let after = context_end_a - a1;
            io.out.push_str(&format!(
                "@@ -{},{} +{},{} @@\n",
                context_start_a + 1,
                context_end_a - context_start_a,
                context_start_b + 1,
                (b1 - context_start_b) + after
            ));
            for line in &a[context_start_a..*a0] {
                io.out.push_str(&format!(" {line}\n"));
            }
            for line in &a[*a0..*a1] {
                io.out.push_str(&format!("-{line}\n"));
            }
            for line in &b[*b0..*b1] {
                io.out.push_str(&format!("+{line}\n"));
            }
            for line in &a[*a1..context_end_a] {
                io.out.push_str(&format!(" {line}\n"));
            }
        }
        return Ok(1);
    }
    for (a0, a1, b0, b1) in hunks {
        let (kind, left, right) = if a0 == a1 {
            ('a', a0.to_string(), range_text(b0, b1))
        } else if b0 == b1 {
            ('d', range_text(a0, a1), b0.to_string())
        } else {
            ('c', range_text(a0, a1), range_text(b0, b1))
        };
        io.out.push_str(&format!("{left}{kind}{right}\n"));
        for line in &a[a0..a1] {
            io.out.push_str(&format!("< {line}\n"));
        }
        if kind == 'c' {
            io.out.push_str("---\n");
        }
        for line in &b[b0..b1] {
            io.out.push_str(&format!("> {line}\n"));
        }
    }
    Ok(1)
}

// ---------------------------------------------------------------------------------------------
// xargs

pub(crate) fn xargs(shell: &mut Shell<'_>, args: &[String], io: &mut Io) -> Result<i32, Abort> {
    let mut per_call: Option<usize> = None;
    let mut replace: Option<String> = None;
    let mut index = 0;
    while index < args.len() {
        let arg = &args[index];
        if let Some(rest) = arg.strip_prefix("-n") {
            match flag_value(args, &mut index, rest).and_then(|v| v.parse().ok()) {
                Some(n) if n > 0 => per_call = Some(n),
                _ => return Ok(io.fail("xargs", "-n needs a positive number")),
            }
        } else if let Some(rest) = arg.strip_prefix("-I") {
            match flag_value(args, &mut index, rest) {
                Some(value) => replace = Some(value.to_owned()),
                None => return Ok(io.fail("xargs", "-I needs a replacement string")),
            }
        } else if arg == "-0" || arg == "-r" || arg == "--no-run-if-empty" {
        } else {
            break;
        }
        index += 1;
    }
    let command: Vec<String> = if index < args.len() {
        args[index..].to_vec()
    } else {
        vec!["echo".into()]
    };
    let input = std::mem::take(&mut io.stdin);
    let mut status = 0;
    let mut run = |shell: &mut Shell<'_>, argv: Vec<String>, io: &mut Io| -> Result<(), Abort> {
        shell.step()?;
        let mut stage = Io::default();
        let code = super::run(shell, &argv, &mut stage)?;
        io.out.push_str(&stage.out);
        io.err.push_str(&stage.err);
        if code != 0 {
            status = if code == 127 { 127 } else { 123 };
        }
        Ok(())
    };
    if let Some(token) = replace {
        for line in lines(&input) {
            if line.trim().is_empty() {
                continue;
            }
            let argv = command.iter().map(|a| a.replace(&token, line)).collect();
            run(shell, argv, io)?;
        }
        return Ok(status);
    }
    let words: Vec<String> = input.split_ascii_whitespace().map(str::to_owned).collect();
    if words.is_empty() {
        if command[0] == "echo" {
            run(shell, command, io)?;
        }
        return Ok(status);
    }
    let size = per_call.unwrap_or(words.len());
    for chunk in words.chunks(size) {
        let mut argv = command.clone();
        argv.extend(chunk.iter().cloned());
        run(shell, argv, io)?;
    }
    Ok(status)
}
