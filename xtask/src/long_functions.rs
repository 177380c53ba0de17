//! `cargo xtask long-functions`: the non-test functions of `crates/*/src` whose text, from the
//! `fn` line to the closing brace, is longer than [`MAX_LINES`] lines.
//!
//! A long function is allowed when a `// Long because …` comment stands between the item before
//! it and its first body line, saying why it is not split; at most [`MAX_LONG`] may be. The scan
//! reads the tokens of the shared lexer (`rust_source.rs`), not a parse: braces inside comments,
//! strings and char literals do not count, and it skips test code (`#[test]` and
//! `#[cfg(test)]` items, and the files of `#[cfg(test)] mod x;`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use crate::rust_source::{self, Tok, Token};

/// Longer than this many lines is long.
pub(crate) const MAX_LINES: usize = 120;
/// How many long functions may stay, each with its reason.
pub(crate) const MAX_LONG: usize = 3;
/// What a reason comment starts with.
const REASON: &str = "// Long because";

/// One function longer than [`MAX_LINES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LongFn {
    /// The file, as the caller named it.
    pub(crate) file: String,
    /// The function's name.
    pub(crate) name: String,
    /// The line of its `fn` keyword (1-based).
    pub(crate) line: usize,
    /// Lines from the `fn` line to the closing brace, both included.
    pub(crate) lines: usize,
    /// Whether a `// Long because` comment gives its reason.
    pub(crate) reasoned: bool,
}

/// The index of the brace that closes the one at `open`.
fn matching_brace(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, token) in tokens.iter().enumerate().skip(open) {
        match token.tok {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    tokens.len().saturating_sub(1)
}

/// The index after the attribute that starts at `hash` (`#[…]` or `#![…]`), and whether it marks
/// test code.
fn attribute(tokens: &[Token], hash: usize) -> (usize, bool) {
    let mut k = hash + 1;
    if tokens.get(k).map(|t| &t.tok) == Some(&Tok::Punct('!')) {
        k += 1;
    }
    if tokens.get(k).map(|t| &t.tok) != Some(&Tok::Punct('[')) {
        return (hash + 1, false);
    }
    let mut depth = 0usize;
    let mut words = Vec::new();
    while let Some(token) = tokens.get(k) {
        match &token.tok {
            Tok::Punct('[') => depth += 1,
            Tok::Punct(']') => {
                depth -= 1;
                if depth == 0 {
                    k += 1;
                    break;
                }
            }
            Tok::Ident(word) => words.push(word.as_str()),
            _ => {}
        }
        k += 1;
    }
    let test = match words.as_slice() {
        ["test"] => true,
        [_, "test", ..] => true,
        ["cfg", rest @ ..] => rest.first() == Some(&"test"),
        _ => false,
    };
    (k, test)
}

/// The long functions of one file's text, and the names of the modules it declares as test
/// code with `#[cfg(test)] mod name;`.
pub(crate) fn scan(file: &str, text: &str) -> (Vec<LongFn>, Vec<String>) {
    let rust_source::Lexed {
        tokens, comments, ..
    } = rust_source::lex(text);
    let mut long = Vec::new();
    let mut test_modules = Vec::new();
    // The line of the last token that ended an item or opened a block: a reason comment for
    // the next item stands after it.
    let mut boundary = 0;
    let mut test_pending = false;
    let mut k = 0;
    while k < tokens.len() {
        let Token { tok, line } = &tokens[k];
        match tok {
            Tok::Punct('#') => {
                let (after, test) = attribute(&tokens, k);
                test_pending |= test;
                k = after;
                continue;
            }
            Tok::Punct(';' | '{' | '}') => {
                boundary = *line;
                test_pending = false;
            }
            Tok::Ident(word) if word == "mod" && test_pending => {
                let name = match tokens.get(k + 1).map(|t| &t.tok) {
                    Some(Tok::Ident(name)) => name.clone(),
                    _ => String::new(),
                };
                match tokens.get(k + 2).map(|t| &t.tok) {
                    Some(Tok::Punct('{')) => k = matching_brace(&tokens, k + 2),
                    _ => {
                        test_modules.push(name);
                        k += 2;
                    }
                }
                test_pending = false;
                continue;
            }
            Tok::Ident(word) if word == "fn" => {
                let Some(Tok::Ident(name)) = tokens.get(k + 1).map(|t| &t.tok) else {
                    k += 1;
                    continue;
                };
                // The body is the first brace outside parentheses and brackets; a `;` there
                // first means a declaration without a body.
                let mut depth = 0i32;
                let mut open = None;
                for (j, token) in tokens.iter().enumerate().skip(k + 2) {
                    match token.tok {
                        Tok::Punct('(' | '[') => depth += 1,
                        Tok::Punct(')' | ']') => depth -= 1,
                        Tok::Punct('{') if depth <= 0 => {
                            open = Some(j);
                            break;
                        }
                        Tok::Punct(';') if depth <= 0 => break,
                        _ => {}
                    }
                }
                let Some(open) = open else {
                    k += 2;
                    continue;
                };
                let close = matching_brace(&tokens, open);
                if test_pending {
                    k = close + 1;
                    test_pending = false;
                    boundary = tokens[close].line;
                    continue;
                }
                let lines = tokens[close].line - line + 1;
                if lines > MAX_LINES {
                    let open_line = tokens[open].line;
                    let reasoned = comments.iter().any(|comment| {
                        comment.line > boundary
                            && comment.line <= open_line + 1
                            && comment.text.starts_with(REASON)
                    });
                    long.push(LongFn {
                        file: file.to_owned(),
                        name: name.clone(),
                        line: *line,
                        lines,
                        reasoned,
                    });
                }
                // Functions nested in the body are scanned too.
                boundary = tokens[open].line;
                test_pending = false;
                k = open + 1;
                continue;
            }
            _ => {}
        }
        k += 1;
    }
    (long, test_modules)
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// Where the file of `mod name;` declared in `file` lives: `name.rs` or `name/mod.rs` in the
/// declaring file's own folder when it is `lib.rs`, `main.rs` or `mod.rs`, else in the folder
/// named after it.
fn module_files(file: &Path, name: &str) -> [PathBuf; 2] {
    let parent = file.parent().unwrap_or(Path::new(""));
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let dir = if matches!(stem, "lib" | "main" | "mod") {
        parent.to_path_buf()
    } else {
        parent.join(stem)
    };
    [
        dir.join(format!("{name}.rs")),
        dir.join(name).join("mod.rs"),
    ]
}

/// The long functions of every crate's `src` below `root`, in file order.
pub(crate) fn workspace(root: &Path) -> Result<Vec<LongFn>> {
    let crates = root.join("crates");
    let mut files = Vec::new();
    for entry in
        std::fs::read_dir(&crates).with_context(|| format!("cannot list {}", crates.display()))?
    {
        let src = entry?.path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files)?;
        }
    }
    files.sort();
    let mut test_files = BTreeSet::new();
    let mut scanned = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let shown = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        let (long, test_modules) = scan(&shown, &text);
        for name in test_modules {
            test_files.extend(module_files(file, &name));
        }
        scanned.push((file.clone(), long));
    }
    Ok(scanned
        .into_iter()
        // A test module's own test modules are test code too, whatever their attributes.
        .filter(|(file, _)| {
            !file
                .ancestors()
                .any(|a| test_files.contains(a) || test_files.contains(&a.join("mod.rs")))
        })
        .flat_map(|(_, long)| long)
        .collect())
}

/// Prints the long functions, the unreasoned ones marked, and fails above the limit.
pub(crate) fn report(root: &Path) -> Result<()> {
    let long = workspace(root)?;
    for f in &long {
        let mark = if f.reasoned {
            ""
        } else {
            "  (no `// Long because` reason)"
        };
        println!("{}:{} {} {} lines{mark}", f.file, f.line, f.name, f.lines);
    }
    println!(
        "{} functions over {MAX_LINES} lines ({} without a reason); at most {MAX_LONG} may be, each with a reason",
        long.len(),
        long.iter().filter(|f| !f.reasoned).count()
    );
    anyhow::ensure!(
        long.len() <= MAX_LONG && long.iter().all(|f| f.reasoned),
        "too many long functions, or one without its reason"
    );
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A function of `body_lines` lines between its `fn` line and its closing brace.
    fn function(name: &str, body_lines: usize, body: &str) -> String {
        let mut text = format!("fn {name}() {{\n");
        for _ in 0..body_lines {
            text.push_str(body);
            text.push('\n');
        }
        text.push_str("}\n");
        text
    }

    #[test]
    fn a_function_over_the_limit_is_counted_with_its_length() {
        let text = format!(
            "{}{}",
            function("short", MAX_LINES - 2, "    let a = 1;"),
            function("long", MAX_LINES - 1, "    let a = 1;")
        );
        let (long, _) = scan("f.rs", &text);
        assert_eq!(
            long,
            vec![LongFn {
                file: "f.rs".into(),
                name: "long".into(),
                line: MAX_LINES + 1,
                lines: MAX_LINES + 1,
                reasoned: false,
            }]
        );
    }

    #[test]
    fn braces_in_strings_chars_and_comments_do_not_count() {
        let body = "    let s = \"}\"; let r = r#\"}\"#; let c = '}'; let b = b'{'; // }\n    /* } */ let l: &'static str = \"\\\"}\";";
        let text = format!("{}fn after() {{}}\n", function("f", MAX_LINES, body));
        let (long, _) = scan("f.rs", &text);
        assert_eq!(long.len(), 1);
        assert_eq!(long[0].name, "f");
        assert_eq!(long[0].lines, 2 * MAX_LINES + 2);
    }

    #[test]
    fn test_code_is_skipped() {
        let long_fn = function("f", MAX_LINES, "    x();");
        let text = format!(
            "#[test]\n{long_fn}#[tokio::test(flavor = \"multi_thread\")]\nasync {long_fn}#[cfg(test)]\nmod tests {{\n{long_fn}}}\n#[cfg(test)]\nmod more;\n"
        );
        let (long, test_modules) = scan("f.rs", &text);
        assert!(long.is_empty(), "{long:?}");
        assert_eq!(test_modules, vec!["more".to_owned()]);
    }

    #[test]
    fn a_reason_comment_above_or_at_the_top_of_the_body_counts() {
        let long_fn = function("f", MAX_LINES, "    x();");
        let above =
            format!("fn g() {{}}\n/// Docs.\n{REASON} it is a table.\n#[inline]\npub {long_fn}");
        let inside = long_fn.replacen("{\n", &format!("{{\n    {REASON} it is a table.\n"), 1);
        let elsewhere = format!("{REASON} of g.\nfn g() {{}}\n{long_fn}");
        assert!(scan("f.rs", &above).0[0].reasoned);
        assert!(scan("f.rs", &inside).0[0].reasoned);
        assert!(!scan("f.rs", &elsewhere).0[0].reasoned);
    }

    #[test]
    fn declarations_without_a_body_are_not_functions() {
        let text = format!(
            "trait T {{\n    fn f(&self);\n}}\n{}",
            function("g", MAX_LINES, "    x();")
        );
        let (long, _) = scan("f.rs", &text);
        assert_eq!(long.len(), 1);
        assert_eq!((long[0].name.as_str(), long[0].line), ("g", 4));
    }

    /// Issue 30's acceptance: at most three non-test functions over 120 lines, each with its
    /// reason.
    #[test]
    fn at_most_three_functions_are_over_the_limit_and_each_says_why() {
        let long = workspace(&crate::repo_root()).unwrap();
        assert!(
            long.len() <= MAX_LONG && long.iter().all(|f| f.reasoned),
            "{} functions over {MAX_LINES} lines (at most {MAX_LONG}, each with a `{REASON}` comment):\n{}",
            long.len(),
            long.iter()
                .map(|f| format!(
                    "  {}:{} {} {} lines{}",
                    f.file,
                    f.line,
                    f.name,
                    f.lines,
                    if f.reasoned { "" } else { " (no reason)" }
                ))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}
