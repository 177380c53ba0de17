//! The parser: one pass over the characters of a command line (or a whole script) into a
//! [`Script`]. Words keep their quoting so expansion can split unquoted results as bash does.
//! Constructs the shell does not run are parse errors that name the construct and the form to
//! use instead, never a silent misreading.

use std::fmt;

/// Deepest nesting of `$(…)` (and of the parser's own recursion) a line may use.
pub const MAX_NESTING: usize = 32;

/// A parse failure: what was found, and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The human-readable message (`adf_shell: syntax error: …`).
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

fn unsupported(construct: &str, instead: &str) -> ParseError {
    ParseError {
        message: format!("{construct} is not supported; {instead}"),
    }
}

fn syntax(message: impl Into<String>) -> ParseError {
    ParseError {
        message: message.into(),
    }
}

/// A whole line or script: and-or lists run one after the other.
pub type Script = Vec<AndOr>;

/// `a && b || c`: the first pipeline, then each operator with the pipeline it guards.
#[derive(Debug, Clone, PartialEq)]
pub struct AndOr {
    /// The first pipeline.
    pub first: Pipeline,
    /// `(true for &&, false for ||, pipeline)`.
    pub rest: Vec<(bool, Pipeline)>,
}

/// `a | b | c`.
pub type Pipeline = Vec<Command>;

/// One simple command: assignments, words, redirects.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Command {
    /// `NAME=value` before the command name.
    pub assigns: Vec<(String, Word)>,
    /// The command name and its arguments, unexpanded.
    pub words: Vec<Word>,
    /// Redirects in the order written.
    pub redirects: Vec<Redirect>,
}

/// One word: parts that expand and concatenate.
pub type Word = Vec<Part>;

/// A piece of a word.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Literal text; `quoted` text is never split.
    Text {
        /// The characters.
        text: String,
        /// Whether it came from quotes or an escape.
        quoted: bool,
    },
    /// `$NAME`, `${NAME}`, `$?`: split when unquoted.
    Var {
        /// The variable name (`?` for the last status).
        name: String,
        /// Inside double quotes.
        quoted: bool,
    },
    /// `$(…)`: its stdout without trailing newlines; split when unquoted.
    Subst {
        /// The inner script.
        script: Script,
        /// Inside double quotes.
        quoted: bool,
    },
}

/// Where a redirect sends or takes a stream.
#[derive(Debug, Clone, PartialEq)]
pub enum RedirectKind {
    /// `< file`.
    Input(Word),
    /// `> file` (`append: false`) or `>> file`.
    Output {
        /// The target path.
        target: Word,
        /// `>>`.
        append: bool,
    },
    /// `n>&m`.
    Dup(u8),
    /// A heredoc's body (expanded unless the delimiter was quoted).
    Heredoc(Word),
}

/// One redirect of a file descriptor (0, 1 or 2).
#[derive(Debug, Clone, PartialEq)]
pub struct Redirect {
    /// The descriptor redirected.
    pub fd: u8,
    /// What it is redirected to.
    pub kind: RedirectKind,
}

/// Parses a command line or script.
pub fn parse(source: &str) -> Result<Script, ParseError> {
    let mut parser = Parser {
        chars: source.chars().collect(),
        pos: 0,
        depth: 0,
        pending: Vec::new(),
    };
    if parser.chars.contains(&'\0') {
        return Err(syntax(
            "the command line contains a NUL byte; remove it (NUL cannot appear in shell words)",
        ));
    }
    let script = parser.script(false)?;
    if !parser.pending.is_empty() {
        let delimiter = parser.pending[0].delimiter.clone();
        return Err(syntax(format!(
            "heredoc delimited by '{delimiter}' has no body: put the body on the lines after the command, ending with a line '{delimiter}'"
        )));
    }
    Ok(script)
}

/// A heredoc whose body starts at the next newline.
struct PendingHeredoc {
    delimiter: String,
    expand: bool,
    strip_tabs: bool,
    /// Where the redirect sits: (and-or index path is awkward, so the redirect is patched
    /// through this slot once the body is read).
    slot: usize,
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
    pending: Vec<PendingHeredoc>,
}

/// Bodies read for heredocs, by slot, patched into commands as they finish.
type Bodies = Vec<Option<Word>>;

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).copied()
    }

    fn starts_with(&self, text: &str) -> bool {
        text.chars()
            .enumerate()
            .all(|(i, c)| self.peek_at(i) == Some(c))
    }

    fn skip_blanks(&mut self) {
        loop {
            match self.peek() {
                Some(' ' | '\t' | '\r') => self.pos += 1,
                Some('\\') if self.peek_at(1) == Some('\n') => self.pos += 2,
                Some('#') => {
                    while let Some(c) = self.peek() {
                        if c == '\n' {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                _ => return,
            }
        }
    }

    /// A list of and-or lists up to the end (or to `)` when `nested`).
    fn script(&mut self, nested: bool) -> Result<Script, ParseError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(syntax(format!(
                "nesting deeper than {MAX_NESTING} levels of $(…); flatten the command with variables"
            )));
        }
        let mut script = Vec::new();
        let mut bodies: Bodies = Vec::new();
        let mut slots: Vec<(usize, usize, usize, usize)> = Vec::new();
        loop {
            self.skip_blanks();
            match self.peek() {
                None => {
                    if nested {
                        return Err(syntax(
                            "unterminated $( … ): close the command substitution with ')'",
                        ));
                    }
                    break;
                }
                Some(')') if nested => {
                    self.pos += 1;
                    break;
                }
                Some('\n') => {
                    self.pos += 1;
                    self.read_heredoc_bodies(&mut bodies)?;
                    continue;
                }
                Some(';') => {
                    return Err(syntax("syntax error near unexpected token ';'"));
                }
                _ => {}
            }
            let and_or = self.and_or(&mut bodies, &mut slots, script.len())?;
            script.push(and_or);
            self.skip_blanks();
            match self.peek() {
                Some(';') => {
                    self.pos += 1;
                    if self.peek() == Some(';') {
                        return Err(unsupported("';;' (case)", "use && and || chaining instead"));
                    }
                }
                Some('\n') | None => {}
                Some(')') if nested => {}
                Some('&') => {
                    return Err(unsupported(
                        "background execution (&)",
                        "run the command in the foreground, or use `at` to schedule it",
                    ));
                }
                Some(c) => {
                    return Err(syntax(format!("syntax error near unexpected token '{c}'")));
                }
            }
        }
        if nested && !self.pending.is_empty() {
            return Err(syntax(
                "a heredoc inside $( … ) needs its body inside the parentheses",
            ));
        }
        // Patch heredoc bodies into the redirects that introduced them.
        for (slot, and_or, pipe, cmd) in slots {
            let Some(body) = bodies.get_mut(slot).and_then(Option::take) else {
                continue;
            };
            let Some(and) = script.get_mut(and_or) else {
                continue;
            };
            let pipeline = if pipe == 0 {
                Some(&mut and.first)
            } else {
                and.rest.get_mut(pipe - 1).map(|(_, p)| p)
            };
            if let Some(command) = pipeline.and_then(|p| p.get_mut(cmd)) {
                for redirect in &mut command.redirects {
                    if let RedirectKind::Heredoc(word) = &mut redirect.kind
                        && word.len() == 1
                        && matches!(&word[0], Part::Text { text, quoted: true } if text == &format!("\u{1}{slot}"))
                    {
                        *word = body;
                        break;
                    }
                }
            }
        }
        self.depth -= 1;
        Ok(script)
    }

    fn and_or(
        &mut self,
        bodies: &mut Bodies,
        slots: &mut Vec<(usize, usize, usize, usize)>,
        index: usize,
    ) -> Result<AndOr, ParseError> {
        let first = self.pipeline(bodies, slots, index, 0)?;
        let mut rest = Vec::new();
        loop {
            self.skip_blanks();
            let and = if self.starts_with("&&") {
                true
            } else if self.starts_with("||") {
                false
            } else {
                break;
            };
            self.pos += 2;
            // A newline may follow the operator.
            loop {
                self.skip_blanks();
                if self.peek() == Some('\n') {
                    self.pos += 1;
                    self.read_heredoc_bodies(bodies)?;
                } else {
                    break;
                }
            }
            let pipeline = self.pipeline(bodies, slots, index, rest.len() + 1)?;
            rest.push((and, pipeline));
        }
        Ok(AndOr { first, rest })
    }

    fn pipeline(
        &mut self,
        bodies: &mut Bodies,
        slots: &mut Vec<(usize, usize, usize, usize)>,
        index: usize,
        pipe: usize,
    ) -> Result<Pipeline, ParseError> {
        let mut commands = Vec::new();
        loop {
            let command = self.command(bodies, slots, (index, pipe, commands.len()))?;
            commands.push(command);
            self.skip_blanks();
            if self.peek() == Some('|') && self.peek_at(1) != Some('|') {
                self.pos += 1;
                if self.peek() == Some('&') {
                    return Err(unsupported("'|&'", "write '2>&1 |' instead"));
                }
                loop {
                    self.skip_blanks();
                    if self.peek() == Some('\n') {
                        self.pos += 1;
                        self.read_heredoc_bodies(bodies)?;
                    } else {
                        break;
                    }
                }
                continue;
            }
            break;
        }
        Ok(commands)
    }

    fn command(
        &mut self,
        bodies: &mut Bodies,
        slots: &mut Vec<(usize, usize, usize, usize)>,
        at: (usize, usize, usize),
    ) -> Result<Command, ParseError> {
        let mut command = Command::default();
        loop {
            self.skip_blanks();
            let Some(c) = self.peek() else { break };
            match c {
                '\n' | ';' | '&' | '|' | ')' => break,
                '(' => {
                    return Err(unsupported(
                        "a subshell '( … )'",
                        "run the commands directly, chained with && or ;",
                    ));
                }
                '<' | '>' => {
                    let redirect = self.redirect(None, bodies, slots, at)?;
                    command.redirects.push(redirect);
                    continue;
                }
                '0'..='2'
                    if matches!(self.peek_at(1), Some('<' | '>'))
                        && !(c == '0' && self.peek_at(1) == Some('>')) =>
                {
                    let fd = c as u8 - b'0';
                    self.pos += 1;
                    let redirect = self.redirect(Some(fd), bodies, slots, at)?;
                    command.redirects.push(redirect);
                    continue;
                }
                _ => {}
            }
            if command.words.is_empty() {
                if let Some((name, value)) = self.assignment()? {
                    command.assigns.push((name, value));
                    continue;
                }
                self.reject_keyword()?;
            }
            let word = self.word()?;
            command.words.push(word);
        }
        if command.words.is_empty() && command.assigns.is_empty() && command.redirects.is_empty() {
            let found = match self.peek() {
                Some('|') => "'|'",
                Some('&') => "'&&'",
                Some(';') => "';'",
                Some(')') => "')'",
                _ => "end of input",
            };
            return Err(syntax(format!(
                "syntax error: a command is missing before {found}"
            )));
        }
        Ok(command)
    }

    fn reject_keyword(&self) -> Result<(), ParseError> {
        let mut end = self.pos;
        while let Some(c) = self.chars.get(end) {
            if c.is_whitespace() || matches!(c, ';' | '|' | '&' | '<' | '>' | '(' | ')') {
                break;
            }
            end += 1;
        }
        let word: String = self.chars[self.pos..end].iter().collect();
        let keyword = match word.as_str() {
            "if" | "then" | "elif" | "else" | "fi" => "if blocks",
            "for" | "do" | "done" => "for loops",
            "while" | "until" => "while loops",
            "case" | "esac" => "case blocks",
            "function" => "function definitions",
            "select" => "select",
            "{" | "}" => "command groups '{ … }'",
            "[[" | "[" => "test expressions",
            "!" => "pipeline negation '!'",
            _ => return Ok(()),
        };
        let instead = match keyword {
            "for loops" | "while loops" => "use xargs (e.g. `… | xargs -n 1 cmd`) or && chaining",
            "test expressions" => "use grep -q, jq -e or && / || chaining",
            _ => "use && and || chaining instead",
        };
        Err(unsupported(&format!("{keyword} ('{word}')"), instead))
    }

    /// `NAME=value` at the start of a command.
    fn assignment(&mut self) -> Result<Option<(String, Word)>, ParseError> {
        let start = self.pos;
        let mut end = start;
        while let Some(c) = self.chars.get(end) {
            if c.is_ascii_alphanumeric() || *c == '_' {
                end += 1;
            } else {
                break;
            }
        }
        let first = self.chars.get(start).copied();
        if end == start
            || self.chars.get(end) != Some(&'=')
            || first.is_some_and(|c| c.is_ascii_digit())
        {
            return Ok(None);
        }
        let name: String = self.chars[start..end].iter().collect();
        self.pos = end + 1;
        let value = match self.peek() {
            None | Some(' ' | '\t' | '\n' | ';' | '|' | '&' | ')') => Vec::new(),
            Some('(') => {
                return Err(unsupported(
                    "arrays 'NAME=( … )'",
                    "store a list in a file or a plain string",
                ));
            }
            _ => self.word()?,
        };
        Ok(Some((name, value)))
    }

    fn redirect(
        &mut self,
        fd: Option<u8>,
        bodies: &mut Bodies,
        slots: &mut Vec<(usize, usize, usize, usize)>,
        at: (usize, usize, usize),
    ) -> Result<Redirect, ParseError> {
        if self.starts_with("<(") || self.starts_with(">(") {
            return Err(unsupported(
                "process substitution '<( … )'",
                "write the output to a file first, then read the file",
            ));
        }
        if self.starts_with("&>") {
            return Err(unsupported("'&>'", "write '> file 2>&1' instead"));
        }
        if self.starts_with("<<<") {
            return Err(unsupported(
                "here-strings '<<<'",
                "use `echo … |` or a heredoc",
            ));
        }
        if self.starts_with("<<") {
            self.pos += 2;
            let strip_tabs = if self.peek() == Some('-') {
                self.pos += 1;
                true
            } else {
                false
            };
            self.skip_blanks();
            let (delimiter, expand) = self.heredoc_delimiter()?;
            let slot = bodies.len();
            bodies.push(None);
            slots.push((slot, at.0, at.1, at.2));
            self.pending.push(PendingHeredoc {
                delimiter,
                expand,
                strip_tabs,
                slot,
            });
            return Ok(Redirect {
                fd: fd.unwrap_or(0),
                kind: RedirectKind::Heredoc(vec![Part::Text {
                    text: format!("\u{1}{slot}"),
                    quoted: true,
                }]),
            });
        }
        let input = self.peek() == Some('<');
        self.pos += 1;
        if input {
            if self.peek() == Some('>') {
                return Err(unsupported("'<>'", "use '<' or '>'"));
            }
            self.skip_blanks();
            let target = self.redirect_target()?;
            return Ok(Redirect {
                fd: fd.unwrap_or(0),
                kind: RedirectKind::Input(target),
            });
        }
        let append = if self.peek() == Some('>') {
            self.pos += 1;
            true
        } else {
            false
        };
        if self.peek() == Some('|') {
            self.pos += 1;
        }
        if !append && self.peek() == Some('&') {
            self.pos += 1;
            return match self.peek() {
                Some(c @ ('1' | '2')) => {
                    self.pos += 1;
                    Ok(Redirect {
                        fd: fd.unwrap_or(1),
                        kind: RedirectKind::Dup(c as u8 - b'0'),
                    })
                }
                _ => Err(unsupported(
                    "this '>&' form",
                    "use 2>&1 or >&2 (descriptors 1 and 2 only)",
                )),
            };
        }
        self.skip_blanks();
        let target = self.redirect_target()?;
        Ok(Redirect {
            fd: fd.unwrap_or(1),
            kind: RedirectKind::Output { target, append },
        })
    }

    fn redirect_target(&mut self) -> Result<Word, ParseError> {
        match self.peek() {
            None | Some('\n' | ';' | '|' | '&' | '<' | '>' | ')') => Err(syntax(
                "syntax error: a redirect needs a file name after it",
            )),
            _ => self.word(),
        }
    }

    fn heredoc_delimiter(&mut self) -> Result<(String, bool), ParseError> {
        let mut delimiter = String::new();
        let mut quoted = false;
        loop {
            match self.peek() {
                // Quoted with either quote, the delimiter is the text up to the closing one.
                Some(quote @ ('\'' | '"')) => {
                    quoted = true;
                    self.pos += 1;
                    loop {
                        match self.peek() {
                            Some(c) if c == quote => {
                                self.pos += 1;
                                break;
                            }
                            Some(c) => {
                                delimiter.push(c);
                                self.pos += 1;
                            }
                            None => {
                                return Err(syntax("unterminated quote in a heredoc delimiter"));
                            }
                        }
                    }
                }
                Some('\\') => {
                    quoted = true;
                    self.pos += 1;
                }
                Some(c)
                    if !c.is_whitespace()
                        && !matches!(c, ';' | '|' | '&' | '<' | '>' | '(' | ')') =>
                {
                    delimiter.push(c);
                    self.pos += 1;
                }
                _ => break,
            }
        }
        if delimiter.is_empty() {
            return Err(syntax(
                "syntax error: '<<' needs a delimiter word, e.g. <<EOF",
            ));
        }
        Ok((delimiter, !quoted))
    }

    /// Reads the bodies of the heredocs opened on the line just ended.
    fn read_heredoc_bodies(&mut self, bodies: &mut Bodies) -> Result<(), ParseError> {
        let pending = std::mem::take(&mut self.pending);
        for heredoc in pending {
            let mut lines = Vec::new();
            let mut found = false;
            while self.pos < self.chars.len() {
                let start = self.pos;
                while self.pos < self.chars.len() && self.chars[self.pos] != '\n' {
                    self.pos += 1;
                }
                let mut line: String = self.chars[start..self.pos].iter().collect();
                if self.pos < self.chars.len() {
                    self.pos += 1;
                }
                if heredoc.strip_tabs {
                    line = line.trim_start_matches('\t').to_owned();
                }
                if line == heredoc.delimiter {
                    found = true;
                    break;
                }
                lines.push(line);
            }
            if !found {
                return Err(syntax(format!(
                    "heredoc delimited by '{}' is not closed: end it with a line holding only '{}'",
                    heredoc.delimiter, heredoc.delimiter
                )));
            }
            let mut text = lines.join("\n");
            if !lines.is_empty() {
                text.push('\n');
            }
            let word = if heredoc.expand {
                self.depth += 1;
                let word = expandable_text(&text, self.depth)?;
                self.depth -= 1;
                word
            } else {
                vec![Part::Text { text, quoted: true }]
            };
            if let Some(slot) = bodies.get_mut(heredoc.slot) {
                *slot = Some(word);
            }
        }
        Ok(())
    }

    /// One word up to an unquoted metacharacter.
    fn word(&mut self) -> Result<Word, ParseError> {
        let mut parts = Vec::new();
        let mut text = String::new();
        let flush = |text: &mut String, parts: &mut Word, quoted: bool| {
            if !text.is_empty() {
                parts.push(Part::Text {
                    text: std::mem::take(text),
                    quoted,
                });
            }
        };
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' | '\n' | '\r' | ';' | '|' | '&' | '<' | '>' | ')' => break,
                '(' => {
                    return Err(unsupported(
                        "'(' inside a word",
                        "quote the text, e.g. 'f(x)'",
                    ));
                }
                '*' | '?' => {
                    return Err(unsupported(
                        &format!("glob expansion ('{c}')"),
                        "quote the pattern (e.g. '*.md'), or list files with `ls` / `find -name`",
                    ));
                }
                '`' => {
                    return Err(unsupported(
                        "backticks",
                        "use $( … ) for command substitution",
                    ));
                }
                '\'' => {
                    flush(&mut text, &mut parts, false);
                    self.pos += 1;
                    let mut quoted = String::new();
                    loop {
                        match self.peek() {
                            Some('\'') => {
                                self.pos += 1;
                                break;
                            }
                            Some(c) => {
                                quoted.push(c);
                                self.pos += 1;
                            }
                            None => {
                                return Err(syntax("unterminated single quote: close it with '"));
                            }
                        }
                    }
                    parts.push(Part::Text {
                        text: quoted,
                        quoted: true,
                    });
                }
                '"' => {
                    flush(&mut text, &mut parts, false);
                    self.pos += 1;
                    let inner = self.double_quoted()?;
                    if inner.is_empty() {
                        parts.push(Part::Text {
                            text: String::new(),
                            quoted: true,
                        });
                    }
                    parts.extend(inner);
                }
                '\\' => {
                    self.pos += 1;
                    match self.peek() {
                        Some('\n') => self.pos += 1,
                        Some(c) => {
                            flush(&mut text, &mut parts, false);
                            parts.push(Part::Text {
                                text: c.to_string(),
                                quoted: true,
                            });
                            self.pos += 1;
                        }
                        None => {}
                    }
                }
                '$' => {
                    flush(&mut text, &mut parts, false);
                    match self.dollar(false)? {
                        Some(part) => parts.push(part),
                        None => text.push('$'),
                    }
                }
                '{' if self.peek_at(1).is_some_and(|n| n != '}') && self.brace_list() => {
                    return Err(unsupported(
                        "brace expansion '{a,b}'",
                        "write each word out, or quote the braces",
                    ));
                }
                _ => {
                    text.push(c);
                    self.pos += 1;
                }
            }
        }
        flush(&mut text, &mut parts, false);
        Ok(parts)
    }

    /// Whether `{` at the cursor opens a brace expansion such as `{a,b}` or `{1..3}`.
    fn brace_list(&self) -> bool {
        let mut i = self.pos + 1;
        while let Some(&c) = self.chars.get(i) {
            match c {
                '}' => {
                    let inner: String = self.chars[self.pos + 1..i].iter().collect();
                    return inner.contains(',') || inner.contains("..");
                }
                ' ' | '\t' | '\n' | '"' | '\'' | '{' | ':' => return false,
                _ => i += 1,
            }
        }
        false
    }

    fn double_quoted(&mut self) -> Result<Word, ParseError> {
        let mut parts = Vec::new();
        let mut text = String::new();
        loop {
            match self.peek() {
                None => return Err(syntax("unterminated double quote: close it with \"")),
                Some('"') => {
                    self.pos += 1;
                    break;
                }
                Some('\\') => {
                    self.pos += 1;
                    match self.peek() {
                        Some(c @ ('$' | '`' | '"' | '\\')) => {
                            text.push(c);
                            self.pos += 1;
                        }
                        Some('\n') => self.pos += 1,
                        _ => text.push('\\'),
                    }
                }
                Some('`') => {
                    return Err(unsupported(
                        "backticks",
                        "use $( … ) for command substitution",
                    ));
                }
                Some('$') => {
                    if !text.is_empty() {
                        parts.push(Part::Text {
                            text: std::mem::take(&mut text),
                            quoted: true,
                        });
                    }
                    match self.dollar(true)? {
                        Some(part) => parts.push(part),
                        None => text.push('$'),
                    }
                }
                Some(c) => {
                    text.push(c);
                    self.pos += 1;
                }
            }
        }
        if !text.is_empty() {
            parts.push(Part::Text { text, quoted: true });
        }
        Ok(parts)
    }

    /// After a `$`: a variable, `${…}`, `$(…)`, or `None` for a literal dollar.
    fn dollar(&mut self, quoted: bool) -> Result<Option<Part>, ParseError> {
        self.pos += 1;
        match self.peek() {
            Some('(') if self.peek_at(1) == Some('(') => Err(unsupported(
                "arithmetic expansion $(( … ))",
                "compute with jq, e.g. $(jq -n '2 + 3')",
            )),
            Some('(') => {
                self.pos += 1;
                let script = self.script(true)?;
                Ok(Some(Part::Subst { script, quoted }))
            }
            Some('{') => {
                self.pos += 1;
                let mut name = String::new();
                loop {
                    match self.peek() {
                        Some('}') => {
                            self.pos += 1;
                            break;
                        }
                        Some(c)
                            if c.is_ascii_alphanumeric()
                                || c == '_'
                                || (name.is_empty() && c == '?') =>
                        {
                            name.push(c);
                            self.pos += 1;
                        }
                        Some(c) => {
                            return Err(unsupported(
                                &format!("the parameter expansion operator '{c}' in ${{…}}"),
                                "use plain ${NAME}; transform values with sed, cut or jq",
                            ));
                        }
                        None => return Err(syntax("unterminated ${ : close it with }")),
                    }
                }
                if name.is_empty() {
                    return Err(syntax("bad substitution: ${} names no variable"));
                }
                Ok(Some(Part::Var { name, quoted }))
            }
            Some('?') => {
                self.pos += 1;
                Ok(Some(Part::Var {
                    name: "?".into(),
                    quoted,
                }))
            }
            Some(c @ ('#' | '@' | '$' | '!' | '0'..='9')) => Err(unsupported(
                &format!("the special parameter ${c}"),
                "use named variables ($NAME)",
            )),
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                let mut name = String::new();
                while let Some(c) = self.peek() {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        name.push(c);
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
                Ok(Some(Part::Var { name, quoted }))
            }
            _ => Ok(None),
        }
    }
}

/// An unquoted heredoc body: `$` expansions and `\$`, `` \` ``, `\\` escapes, no splitting.
fn expandable_text(text: &str, depth: usize) -> Result<Word, ParseError> {
    let mut parser = Parser {
        chars: text.chars().collect(),
        pos: 0,
        depth,
        pending: Vec::new(),
    };
    let mut parts = Vec::new();
    let mut literal = String::new();
    while let Some(c) = parser.peek() {
        match c {
            '\\' => {
                parser.pos += 1;
                match parser.peek() {
                    Some(c @ ('$' | '`' | '\\')) => {
                        literal.push(c);
                        parser.pos += 1;
                    }
                    Some('\n') => parser.pos += 1,
                    _ => literal.push('\\'),
                }
            }
            '`' => {
                return Err(unsupported(
                    "backticks",
                    "use $( … ) for command substitution",
                ));
            }
            '$' => {
                if !literal.is_empty() {
                    parts.push(Part::Text {
                        text: std::mem::take(&mut literal),
                        quoted: true,
                    });
                }
                match parser.dollar(true)? {
                    Some(part) => parts.push(part),
                    None => literal.push('$'),
                }
            }
            c => {
                literal.push(c);
                parser.pos += 1;
            }
        }
    }
    if !literal.is_empty() || parts.is_empty() {
        parts.push(Part::Text {
            text: literal,
            quoted: true,
        });
    }
    Ok(parts)
}
