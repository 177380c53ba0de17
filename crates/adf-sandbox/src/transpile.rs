//! Source preparation: TypeScript stripping (oxc), import scanning, and the rewrite that lets
//! inline `sys_code` use `import` inside its async wrapper.
//!
//! Everything here is pure (source text in, JavaScript out). oxc's parser and visitors are
//! recursive with no depth guard, so hostile input (`!!!!…x`, `((((…`, a 100k-term `a+a+…`)
//! could overflow the stack of a tokio worker; [`prepare_on_big_stack`] therefore runs them on
//! a short-lived thread with a large stack, and the caller bounds the source size.

use std::path::Path;

use oxc::allocator::Allocator;
use oxc::ast::ast::{ImportDeclarationSpecifier, ModuleExportName, Statement};
use oxc::codegen::Codegen;
use oxc::diagnostics::OxcDiagnostic;
use oxc::parser::{ParseOptions, Parser};
use oxc::semantic::SemanticBuilder;
use oxc::span::SourceType;
use oxc::transformer::{TransformOptions, Transformer};

/// Stack for the transpiler thread. Memory is committed lazily, so the reservation is cheap;
/// measured depth per MiB is noted in the crate docs.
const TRANSPILER_STACK: usize = 256 << 20;

/// What a module or inline snippet becomes once prepared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Prepared {
    /// Plain JavaScript (types stripped; for inline code, static imports rewritten).
    pub js: String,
    /// Module specifiers this code may import: static ones and `import("literal")`.
    pub imports: Vec<Import>,
}

/// One module specifier found in the code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Import {
    /// As written (`./util.ts`).
    pub specifier: String,
    /// `import("…")`: a failure to find it is the code's business (the promise rejects),
    /// not an error before the run.
    pub dynamic: bool,
}

/// How the source is going to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An ES module file (`lib/report.ts`).
    Module,
    /// Inline code that becomes the body of an async function (`return` allowed).
    Inline,
}

/// Whether a path names a TypeScript file.
pub(crate) fn is_typescript(path: &str) -> bool {
    [".ts", ".mts", ".cts", ".tsx"]
        .iter()
        .any(|ext| path.ends_with(ext))
}

/// A readable error message with `name:line:col` for the first few diagnostics.
fn render(name: &str, source: &str, diagnostics: &[OxcDiagnostic]) -> String {
    let mut out = Vec::new();
    for d in diagnostics.iter().take(5) {
        let at = d
            .labels
            .first()
            .map(|l| {
                let (line, col) = line_col(source, l.offset() as usize);
                format!("{name}:{line}:{col}")
            })
            .unwrap_or_else(|| name.to_string());
        let mut msg = format!("{at}: {}", d.message);
        if let Some(help) = &d.help {
            msg.push_str(&format!(" (help: {help})"));
        }
        out.push(msg);
    }
    if diagnostics.len() > 5 {
        out.push(format!("… and {} more", diagnostics.len() - 5));
    }
    out.join("\n")
}

/// 1-based line and column (in characters) of a byte offset.
pub(crate) fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(source.len());
    let before = source.get(..offset).unwrap_or(source);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// Strip TypeScript (when `typescript`) and scan imports. Runs on the caller's stack: use
/// [`prepare_on_big_stack`] for untrusted input.
pub(crate) fn prepare(
    name: &str,
    source: &str,
    typescript: bool,
    kind: Kind,
) -> Result<Prepared, String> {
    let js = if typescript {
        strip_types(name, source, kind)?
    } else {
        source.to_string()
    };
    scan(name, &js, kind)
}

/// [`prepare`] on a dedicated thread with a large stack, awaited without blocking the caller's
/// executor thread.
pub(crate) async fn prepare_on_big_stack(
    name: String,
    source: String,
    typescript: bool,
    kind: Kind,
) -> Result<Prepared, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("adf-sandbox-transpile".into())
        .stack_size(TRANSPILER_STACK)
        .spawn(move || {
            let _ = tx.send(prepare(&name, &source, typescript, kind));
        })
        .map_err(|e| format!("cannot start the transpiler thread: {e}"))?;
    rx.await
        .map_err(|_| "the transpiler thread ended without a result".to_string())?
}

fn parse_options(kind: Kind) -> ParseOptions {
    ParseOptions {
        allow_return_outside_function: kind == Kind::Inline,
        ..ParseOptions::default()
    }
}

fn strip_types(name: &str, source: &str, kind: Kind) -> Result<String, String> {
    let alloc = Allocator::default();
    let source_type = SourceType::ts().with_module(true);
    let ret = Parser::new(&alloc, source, source_type)
        .with_options(parse_options(kind))
        .parse();
    if ret.panicked || ret.diagnostics.has_errors() {
        let errors: Vec<OxcDiagnostic> = ret.diagnostics.errors().cloned().collect();
        return Err(render(name, source, &errors));
    }
    let mut program = ret.program;
    // enum_eval is required: without it the transformer panics on `enum` (CRATES.md pitfall 12).
    let scoping = SemanticBuilder::new()
        .with_excess_capacity(2.0)
        .with_enum_eval(true)
        .build(&program)
        .semantic
        .into_scoping();
    let options = TransformOptions::default();
    let tr = Transformer::new(&alloc, Path::new(name), &options)
        .build_with_scoping(scoping, &mut program);
    if tr.diagnostics.has_errors() {
        let errors: Vec<OxcDiagnostic> = tr.diagnostics.errors().cloned().collect();
        return Err(render(name, source, &errors));
    }
    Ok(Codegen::new().build(&program).code)
}

/// Parse plain JavaScript: syntax check, collect imports and, for inline code, rewrite static
/// `import` declarations into `await import()` so they are legal inside the async wrapper.
fn scan(name: &str, js: &str, kind: Kind) -> Result<Prepared, String> {
    let alloc = Allocator::default();
    let ret = Parser::new(&alloc, js, SourceType::mjs())
        .with_options(parse_options(kind))
        .parse();
    if ret.panicked || ret.diagnostics.has_errors() {
        let errors: Vec<OxcDiagnostic> = ret.diagnostics.errors().cloned().collect();
        return Err(render(name, js, &errors));
    }
    let mut imports: Vec<Import> = Vec::new();
    let mut push = |s: &str, dynamic: bool| {
        if let Some(existing) = imports.iter_mut().find(|i| i.specifier == s) {
            existing.dynamic &= dynamic;
        } else {
            imports.push(Import {
                specifier: s.to_string(),
                dynamic,
            });
        }
    };
    // Static requests (`import`, `export … from`, `export *`), in source order.
    let mut requested: Vec<(u32, &str)> = ret
        .module_record
        .requested_modules
        .iter()
        .map(|(spec, uses)| {
            let at = uses.iter().map(|u| u.span.start).min().unwrap_or(0);
            (at, spec.as_str())
        })
        .collect();
    requested.sort_unstable();
    for (_, spec) in requested {
        push(spec, false);
    }
    for dynamic in &ret.module_record.dynamic_imports {
        let text = dynamic.module_request.source_text(js).trim();
        let quoted = text.len() >= 2
            && ((text.starts_with('"') && text.ends_with('"'))
                || (text.starts_with('\'') && text.ends_with('\''))
                || (text.starts_with('`') && text.ends_with('`') && !text.contains("${")));
        if quoted {
            let inner = &text[1..text.len() - 1];
            if !inner.contains('\\') {
                push(inner, true);
            }
        }
    }
    if kind == Kind::Module {
        return Ok(Prepared {
            js: js.to_string(),
            imports,
        });
    }
    // Inline code: replace each top-level import declaration by an equivalent dynamic import,
    // working on byte spans from the end so earlier offsets stay valid.
    let mut out = js.to_string();
    let mut decls: Vec<(usize, usize, String)> = Vec::new();
    for stmt in &ret.program.body {
        let Statement::ImportDeclaration(d) = stmt else {
            continue;
        };
        let src = serde_json::to_string(d.source.value.as_str()).unwrap_or_default();
        let mut named: Vec<String> = Vec::new();
        let mut namespace: Option<String> = None;
        for spec in d.specifiers.iter().flatten() {
            match spec {
                ImportDeclarationSpecifier::ImportSpecifier(s) => {
                    let imported = match &s.imported {
                        ModuleExportName::StringLiteral(l) => {
                            serde_json::to_string(l.value.as_str()).unwrap_or_default()
                        }
                        other => other.name().to_string(),
                    };
                    named.push(format!("{imported}: {}", s.local.name));
                }
                ImportDeclarationSpecifier::ImportDefaultSpecifier(s) => {
                    named.push(format!("default: {}", s.local.name));
                }
                ImportDeclarationSpecifier::ImportNamespaceSpecifier(s) => {
                    namespace = Some(s.local.name.to_string());
                }
            }
        }
        let replacement = match (namespace, named.is_empty()) {
            (Some(ns), true) => format!("const {ns} = await import({src});"),
            (Some(ns), false) => format!(
                "const {ns} = await import({src}); const {{ {} }} = {ns};",
                named.join(", ")
            ),
            (None, false) => format!("const {{ {} }} = await import({src});", named.join(", ")),
            (None, true) => format!("await import({src});"),
        };
        decls.push((d.span.start as usize, d.span.end as usize, replacement));
    }
    for (start, end, replacement) in decls.into_iter().rev() {
        if start <= end && end <= out.len() {
            out.replace_range(start..end, &replacement);
        }
    }
    Ok(Prepared { js: out, imports })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn strips_enum_interface_satisfies() {
        let src = "interface A { x: number }\nenum Color { Red, Green }\nconst c = { x: 1 } satisfies A;\nexport function main(a: A): number { return Color.Green + c.x; }\n";
        let p = prepare("a.ts", src, true, Kind::Module).unwrap();
        assert!(!p.js.contains("interface"));
        assert!(!p.js.contains("satisfies"));
        assert!(p.js.contains("Color"));
    }

    #[test]
    fn inline_imports_are_rewritten() {
        let src = "import x, { a as b } from './m.js';\nimport * as ns from './n.js';\nreturn b + x + ns.y;";
        let p = prepare("inline", src, false, Kind::Inline).unwrap();
        assert!(p.js.contains("await import(\"./m.js\")"), "{}", p.js);
        assert!(p.js.contains("default: x"));
        let specs: Vec<&str> = p.imports.iter().map(|i| i.specifier.as_str()).collect();
        assert_eq!(specs, vec!["./m.js", "./n.js"]);
        assert!(p.imports.iter().all(|i| !i.dynamic));
    }

    #[test]
    fn errors_have_line_and_column() {
        let err = prepare("lib/x.ts", "const a = 1;\nlet = ;\n", true, Kind::Module).unwrap_err();
        assert!(err.starts_with("lib/x.ts:2:"), "{err}");
    }
}
