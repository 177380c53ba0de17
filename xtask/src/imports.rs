//! `cargo xtask imports`: the file-level import graph of adf-server and adf-runtime, and its
//! circles (strongly connected components).
//!
//! An arrow `a.rs → b.rs` means code in `a.rs` names an item `b.rs` defines: through `use`
//! (`crate::…`, `super::…`, `self::…` or a child module's name) or a path written inline
//! (`crate::turns::start_chat(…)`). A re-export is followed to the file that defines the item
//! (`use crate::Agent` where `lib.rs` says `pub use daemon::Agent` is an arrow to `daemon.rs`),
//! so a facade adds no arrow of its own; `mod x;` declarations are not arrows. Code under
//! `#[cfg(test)] mod …` is left out: tests are not the architecture. Macros are not expanded.
//!
//! The circles there are today are listed in [`ALLOWED_CIRCLES`], which may only shrink: the
//! check fails when a circle appears that is not listed, when one grows, and when a listed one
//! shrinks or disappears (so the list is tightened with the code).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::rust_source;

/// The crates whose files must not import each other in a circle (paths from the workspace
/// root).
pub(crate) const ANALYZED: &[&str] = &["crates/adf-server", "crates/adf-runtime"];

/// The circles that exist today: none (issue 30 broke adf-server's, finding 3, and
/// adf-runtime's, finding 4). Each entry would be one strongly connected component, its files
/// relative to the crate's `src/`, sorted. This list may only shrink: a new circle is a design
/// error to fix, not to list.
pub(crate) const ALLOWED_CIRCLES: &[(&str, &[&str])] = &[];

/// One arrow: the importing file, the imported file, and the first line that names it.
#[derive(Debug, Clone)]
pub(crate) struct Arrow {
    pub(crate) line: usize,
    pub(crate) text: String,
}

/// The import graph of one crate: arrows by (from, to) file (relative to `src/`).
#[derive(Debug, Default)]
pub(crate) struct Graph {
    pub(crate) files: BTreeSet<String>,
    pub(crate) arrows: BTreeMap<(String, String), Arrow>,
}

/// A source token: an identifier or a punctuation character (`::` is one token), with its line.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Punct(&'static str),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

impl Token {
    fn is(&self, p: &str) -> bool {
        matches!(&self.tok, Tok::Punct(q) if *q == p)
            || matches!(&self.tok, Tok::Ident(i) if i == p)
    }
    fn ident(&self) -> Option<&str> {
        match &self.tok {
            Tok::Ident(i) => Some(i),
            Tok::Punct(_) => None,
        }
    }
}

/// Tokens of Rust source with comments, string, byte and char literals, lifetimes, numbers
/// and the punctuation paths do not need left out.
fn tokens(source: &str) -> Vec<Token> {
    rust_source::lex(source)
        .tokens
        .into_iter()
        .filter_map(|token| {
            let tok = match token.tok {
                rust_source::Tok::Ident(word) => Tok::Ident(word),
                rust_source::Tok::PathSep => Tok::Punct("::"),
                rust_source::Tok::Punct(c) => Tok::Punct(match c {
                    '{' => "{",
                    '}' => "}",
                    '(' => "(",
                    ')' => ")",
                    '[' => "[",
                    ']' => "]",
                    ',' => ",",
                    ';' => ";",
                    '*' => "*",
                    '#' => "#",
                    '$' => "$",
                    _ => return None,
                }),
                rust_source::Tok::Literal
                | rust_source::Tok::Lifetime
                | rust_source::Tok::Number => {
                    return None;
                }
            };
            Some(Token {
                tok,
                line: token.line,
            })
        })
        .collect()
}

/// A path a file names: where it starts, its segments, and the line.
#[derive(Debug, Clone)]
struct Named {
    /// The module the path is written in (`crate::a::b`, as segments after `crate`).
    scope: Vec<String>,
    segments: Vec<String>,
    line: usize,
    /// A `pub use` item: `(exported name, whether it is a glob)`.
    reexport: Option<String>,
}

/// One flattened use path and the name it binds (its alias, or its last segment).
type UsePath = (Vec<String>, Option<String>);

/// The use trees of `use …;` starting at `tokens[i]` (just after `use`), flattened into paths;
/// the leaf's alias (or last segment) alongside. Returns the index after the `;`.
fn use_tree(tokens: &[Token], mut i: usize) -> (Vec<UsePath>, usize) {
    let mut out = Vec::new();
    let mut stack: Vec<Vec<String>> = vec![Vec::new()];
    let mut current: Vec<String> = Vec::new();
    let flush = |current: &mut Vec<String>,
                 stack: &[Vec<String>],
                 out: &mut Vec<UsePath>,
                 alias: Option<String>| {
        if !current.is_empty() {
            let mut full = stack.last().cloned().unwrap_or_default();
            full.append(current);
            let leaf = alias.or_else(|| full.last().cloned());
            out.push((full, leaf));
        }
    };
    while i < tokens.len() {
        let t = &tokens[i];
        if t.is(";") {
            flush(&mut current, &stack, &mut out, None);
            return (out, i + 1);
        } else if t.is("{") {
            let mut prefix = stack.last().cloned().unwrap_or_default();
            prefix.append(&mut current);
            stack.push(prefix);
        } else if t.is("}") {
            flush(&mut current, &stack, &mut out, None);
            stack.pop();
        } else if t.is(",") {
            flush(&mut current, &stack, &mut out, None);
        } else if t.is("as") {
            let alias = tokens.get(i + 1).and_then(Token::ident).map(str::to_owned);
            flush(&mut current, &stack, &mut out, alias);
            i += 1;
        } else if t.is("*") {
            current.push("*".into());
        } else if let Some(word) = t.ident() {
            current.push(word.to_owned());
        }
        i += 1;
    }
    (out, i)
}

/// Every path of one file that may name a module of its crate.
fn named_paths(source: &str, file_module: &[String]) -> Vec<Named> {
    let tokens = tokens(source);
    let mut named = Vec::new();
    // The open braces: `Some(Some(name))` an inline module, `Some(None)` a test module whose
    // contents are skipped, `None` any other brace.
    let mut braces: Vec<Option<Option<String>>> = Vec::new();
    let mut pending_mod: Option<Option<String>> = None;
    let mut cfg_test_at: Option<usize> = None;
    let mut i = 0;
    while i < tokens.len() {
        let skipping = braces.iter().any(|b| matches!(b, Some(None)));
        let t = &tokens[i];
        let scope = || {
            let mut scope = file_module.to_vec();
            scope.extend(braces.iter().filter_map(|b| b.clone().flatten()));
            scope
        };
        if t.is("#")
            && tokens.get(i + 1).is_some_and(|t| t.is("["))
            && tokens.get(i + 2).is_some_and(|t| t.is("cfg"))
            && tokens.get(i + 3).is_some_and(|t| t.is("("))
            && tokens.get(i + 4).is_some_and(|t| t.is("test"))
            && tokens.get(i + 5).is_some_and(|t| t.is(")"))
        {
            cfg_test_at = Some(i + 7);
            i += 7;
            continue;
        }
        if t.is("mod")
            && let Some(name) = tokens.get(i + 1).and_then(Token::ident)
            && tokens.get(i + 2).is_some_and(|t| t.is("{"))
        {
            // Attributes and visibility between `#[cfg(test)]` and `mod` keep it a test module.
            let is_test = cfg_test_at.is_some_and(|at| {
                !tokens[at.min(i)..i]
                    .iter()
                    .any(|t| t.is(";") || t.is("{") || t.is("}"))
            });
            pending_mod = Some((!is_test).then(|| name.to_owned()));
            i += 2;
            continue;
        }
        if t.is("{") {
            braces.push(pending_mod.take());
            i += 1;
            continue;
        }
        if t.is("}") {
            braces.pop();
            i += 1;
            continue;
        }
        if t.is(";") {
            pending_mod = None;
        }
        if skipping {
            i += 1;
            continue;
        }
        if t.is("use") {
            let public = i > 0
                && (tokens[i - 1].is("pub")
                    || (tokens[i - 1].is(")")
                        && tokens[..i].iter().rev().take(5).any(|t| t.is("pub"))));
            let line = t.line;
            let (trees, next) = use_tree(&tokens, i + 1);
            for (segments, leaf) in trees {
                named.push(Named {
                    scope: scope(),
                    segments,
                    line,
                    reexport: if public { leaf } else { None },
                });
            }
            i = next;
            continue;
        }
        // An inline path: `crate::…`, `super::…`, `self::…` or `name::…`.
        let starts_path = t.ident().is_some()
            && tokens.get(i + 1).is_some_and(|t| t.is("::"))
            && !(i > 0 && tokens[i - 1].is("::"));
        if starts_path {
            let mut segments = Vec::new();
            let mut j = i;
            while let Some(word) = tokens.get(j).and_then(Token::ident) {
                segments.push(word.to_owned());
                if tokens.get(j + 1).is_some_and(|t| t.is("::")) {
                    j += 2;
                } else {
                    break;
                }
            }
            named.push(Named {
                scope: scope(),
                segments,
                line: t.line,
                reexport: None,
            });
            i = j + 1;
            continue;
        }
        i += 1;
    }
    named
}

/// The module path (segments after `crate`) of a file relative to `src/`.
fn module_of(relative: &str) -> Vec<String> {
    let without = relative.trim_end_matches(".rs");
    let mut parts: Vec<String> = without.split('/').map(str::to_owned).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The import graph of the crate at `crate_dir` (its `src/`, binaries under `src/bin` aside).
pub(crate) fn graph(crate_dir: &Path) -> std::io::Result<Graph> {
    let src = crate_dir.join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    // module path → file, and each file's named paths.
    let mut modules: BTreeMap<Vec<String>, String> = BTreeMap::new();
    let mut sources: Vec<(String, Vec<String>, String)> = Vec::new();
    for path in paths {
        let relative = path
            .strip_prefix(&src)
            .unwrap_or(&path)
            .to_string_lossy()
            .replace('\\', "/");
        if relative.starts_with("bin/") {
            continue;
        }
        let module = module_of(&relative);
        modules.insert(module.clone(), relative.clone());
        sources.push((relative, module, std::fs::read_to_string(&path)?));
    }
    let named: Vec<(String, Vec<Named>)> = sources
        .iter()
        .map(|(file, module, text)| (file.clone(), named_paths(text, module)))
        .collect();
    // Absolute module paths of each `pub use`, by (module, exported name).
    let mut reexports: BTreeMap<(Vec<String>, String), Vec<String>> = BTreeMap::new();
    for (_, paths) in &named {
        for path in paths {
            if let Some(name) = &path.reexport
                && name != "*"
                && let Some(absolute) = absolute(&path.scope, &path.segments, &modules)
            {
                reexports.insert((path.scope.clone(), name.clone()), absolute);
            }
        }
    }
    let mut graph = Graph {
        files: modules.values().cloned().collect(),
        ..Graph::default()
    };
    for (file, paths) in &named {
        for path in paths {
            if path.reexport.is_some() {
                continue;
            }
            let Some(absolute) = absolute(&path.scope, &path.segments, &modules) else {
                continue;
            };
            let Some(target) = defining_file(&absolute, &modules, &reexports) else {
                continue;
            };
            if &target != file {
                graph
                    .arrows
                    .entry((file.clone(), target))
                    .or_insert_with(|| Arrow {
                        line: path.line,
                        text: path.segments.join("::"),
                    });
            }
        }
    }
    Ok(graph)
}

/// The absolute path (segments after `crate`) a path written in module `scope` names, when it
/// starts in this crate: `crate`, `$crate`, `super`, `self`, or a child module of `scope`.
fn absolute(
    scope: &[String],
    segments: &[String],
    modules: &BTreeMap<Vec<String>, String>,
) -> Option<Vec<String>> {
    let first = segments.first()?;
    let mut base: Vec<String>;
    let mut rest = &segments[1..];
    match first.as_str() {
        "crate" => base = Vec::new(),
        "self" => base = scope.to_vec(),
        "super" => {
            base = scope.to_vec();
            base.pop();
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => {
            let mut child = scope.to_vec();
            child.push(first.clone());
            if !modules.contains_key(&child) {
                return None;
            }
            base = child;
        }
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The file that defines what an absolute path names: the longest module prefix, with a
/// `pub use` there followed to where it points (a few hops at most).
fn defining_file(
    absolute: &[String],
    modules: &BTreeMap<Vec<String>, String>,
    reexports: &BTreeMap<(Vec<String>, String), Vec<String>>,
) -> Option<String> {
    let mut path = absolute.to_vec();
    for _ in 0..8 {
        let split = (0..=path.len())
            .rev()
            .find(|n| modules.contains_key(&path[..*n]))?;
        let module = path[..split].to_vec();
        let Some(item) = path.get(split).filter(|s| *s != "*") else {
            return modules.get(&module).cloned();
        };
        match reexports.get(&(module.clone(), item.clone())) {
            Some(target) if target.as_slice() != path.as_slice() => {
                let mut next = target.clone();
                next.extend(path[split + 1..].iter().cloned());
                path = next;
            }
            _ => return modules.get(&module).cloned(),
        }
    }
    None
}

/// The strongly connected components of more than one file, each sorted, in a stable order.
pub(crate) fn circles(graph: &Graph) -> Vec<Vec<String>> {
    let index: BTreeMap<&String, usize> = graph.files.iter().zip(0..).collect();
    let names: Vec<&String> = graph.files.iter().collect();
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); names.len()];
    for (from, to) in graph.arrows.keys() {
        if let (Some(&a), Some(&b)) = (index.get(from), index.get(to)) {
            next[a].push(b);
        }
    }
    // Tarjan's algorithm, iterative.
    let n = names.len();
    let (mut order, mut low) = (vec![usize::MAX; n], vec![0; n]);
    let (mut on_stack, mut stack) = (vec![false; n], Vec::new());
    let mut counter = 0;
    let mut found = Vec::new();
    for root in 0..n {
        if order[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut edge)) = work.last_mut() {
            if *edge == 0 && order[v] == usize::MAX {
                order[v] = counter;
                low[v] = counter;
                counter += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = next[v].get(*edge) {
                *edge += 1;
                if order[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(order[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == order[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(names[w].clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    found.push(component);
                }
            }
        }
    }
    found.sort();
    found
}

/// A circle printed with the arrows inside it (`from → to  (line: path)`).
pub(crate) fn describe(graph: &Graph, circle: &[String]) -> String {
    let members: BTreeSet<&String> = circle.iter().collect();
    let mut text = format!("{} files: {}\n", circle.len(), circle.join(", "));
    for ((from, to), arrow) in &graph.arrows {
        if members.contains(from) && members.contains(to) {
            text.push_str(&format!(
                "    {from} → {to}  ({from}:{}: {})\n",
                arrow.line, arrow.text
            ));
        }
    }
    text
}

/// The findings of the check against [`ALLOWED_CIRCLES`]: empty when the circles are exactly
/// the listed ones.
pub(crate) fn check(root: &Path) -> std::io::Result<(String, Vec<String>)> {
    let mut report = String::new();
    let mut problems = Vec::new();
    for krate in ANALYZED {
        let graph = graph(&root.join(krate))?;
        let found = circles(&graph);
        report.push_str(&format!(
            "{krate}: {} files, {} arrows, {} circle(s)\n",
            graph.files.len(),
            graph.arrows.len(),
            found.len()
        ));
        let allowed: Vec<Vec<String>> = ALLOWED_CIRCLES
            .iter()
            .filter(|(c, _)| c == krate)
            .map(|(_, files)| files.iter().map(|f| (*f).to_owned()).collect())
            .collect();
        for circle in &found {
            report.push_str(&format!("  circle of {}", describe(&graph, circle)));
            if allowed.contains(circle) {
                continue;
            }
            let overlapping: Vec<&Vec<String>> = allowed
                .iter()
                .filter(|listed| circle.iter().any(|f| listed.contains(f)))
                .collect();
            let within = overlapping
                .iter()
                .find(|listed| circle.iter().all(|f| listed.contains(f)));
            problems.push(match (within, overlapping.first()) {
                (Some(listed), _) => format!(
                    "{krate}: a listed circle of {} files shrank to {} files: replace its entry in xtask/src/imports.rs ALLOWED_CIRCLES by {circle:?}",
                    listed.len(),
                    circle.len()
                ),
                (None, Some(listed)) => format!(
                    "{krate}: a circle grew from {} to {} files (files new to it: {:?}); break the new arrows instead of listing them:\n{}",
                    listed.len(),
                    circle.len(),
                    circle.iter().filter(|f| !listed.contains(f)).collect::<Vec<_>>(),
                    describe(&graph, circle)
                ),
                (None, None) => format!(
                    "{krate}: a new import circle; break it instead of listing it:\n{}",
                    describe(&graph, circle)
                ),
            });
        }
        for listed in &allowed {
            let overlaps = found.iter().any(|c| c.iter().any(|f| listed.contains(f)));
            if !overlaps {
                problems.push(format!(
                    "{krate}: the listed circle {listed:?} is gone: remove its entry from xtask/src/imports.rs ALLOWED_CIRCLES"
                ));
            }
        }
    }
    Ok((report, problems))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn crate_with(files: &[(&str, &str)]) -> tempfile_free::Dir {
        let dir = tempfile_free::Dir::new();
        for (path, text) in files {
            let full = dir.0.join("src").join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, text).unwrap();
        }
        dir
    }

    /// A scratch directory removed on drop (xtask has no tempfile dependency).
    mod tempfile_free {
        pub(super) struct Dir(pub(super) std::path::PathBuf);
        impl Dir {
            pub(super) fn new() -> Self {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let path = std::env::temp_dir().join(format!(
                    "xtask-imports-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&path).unwrap();
                Dir(path)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn arrows(graph: &Graph) -> Vec<String> {
        graph
            .arrows
            .keys()
            .map(|(a, b)| format!("{a} -> {b}"))
            .collect()
    }

    #[test]
    fn uses_inline_paths_and_reexports_become_arrows_to_the_defining_file() {
        let dir = crate_with(&[
            ("lib.rs", "mod a; mod b; mod c; pub use c::Thing;\n"),
            (
                "a.rs",
                "use crate::{b::{self, Other}, Thing};\nfn f() { crate::b::g(); }\n",
            ),
            ("b.rs", "pub struct Other; pub fn g() {}\n"),
            (
                "c.rs",
                "pub struct Thing;\n// use crate::a::X;\nconst S: &str = \"crate::a::x\";\n",
            ),
        ]);
        let graph = graph(&dir.0).unwrap();
        assert_eq!(arrows(&graph), ["a.rs -> b.rs", "a.rs -> c.rs"]);
        assert!(circles(&graph).is_empty());
    }

    #[test]
    fn super_self_and_child_paths_resolve_and_test_modules_are_left_out() {
        let dir = crate_with(&[
            ("lib.rs", "pub mod t;\npub struct Root;\n"),
            ("t/mod.rs", "mod x;\nuse x::Helper;\npub trait Tool {}\n"),
            (
                "t/x.rs",
                "use super::Tool;\npub struct Helper;\n#[cfg(test)]\nmod tests { use crate::Root; use super::super::Tool; }\nmod inner { use super::Helper; }\n",
            ),
        ]);
        let graph = graph(&dir.0).unwrap();
        assert_eq!(arrows(&graph), ["t/mod.rs -> t/x.rs", "t/x.rs -> t/mod.rs"]);
        assert_eq!(
            circles(&graph),
            vec![vec!["t/mod.rs".to_owned(), "t/x.rs".to_owned()]]
        );
    }

    #[test]
    fn a_circle_of_three_is_one_component_and_a_chain_is_none() {
        let dir = crate_with(&[
            ("lib.rs", "mod a; mod b; mod c; mod d;\n"),
            ("a.rs", "use crate::b::B; pub struct A;\n"),
            ("b.rs", "use crate::c::C; pub struct B;\n"),
            ("c.rs", "pub struct C; fn f() -> crate::a::A { todo() }\n"),
            ("d.rs", "use crate::a::A;\n"),
        ]);
        let graph = graph(&dir.0).unwrap();
        let found = circles(&graph);
        assert_eq!(found, vec![vec!["a.rs", "b.rs", "c.rs"]]);
        let shown = describe(&graph, &found[0]);
        assert!(
            shown.contains("c.rs → a.rs  (c.rs:1: crate::a::A)"),
            "{shown}"
        );
    }

    /// The circles of adf-server and adf-runtime are exactly the listed ones: none new, none
    /// grown, and a listed one that shrank or went must leave the list.
    #[test]
    fn import_circles_only_shrink() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let (report, problems) = check(&root).unwrap();
        println!("{report}");
        assert!(
            problems.is_empty(),
            "{}\n\nThe circles today (cargo xtask imports):\n{report}",
            problems.join("\n")
        );
    }
}
