//! npm packages as modules: bare specifiers (`lodash`, `@scope/pkg/sub`) resolve through the
//! [`Host`](crate::Host) to an installed package id (`name@version`), and the package's own
//! `package.json` decides the file (`exports` with `import`/`require`/`default` conditions,
//! else `main`, else `index.js`) and its format (`.mjs`/`.cjs`/`.json`, else the nearest
//! `package.json` `type`). A package file's module name is `npm:{id}/{path}`, which no agent
//! file path can spell (agent code cannot import it directly: only a package's own CommonJS
//! wrapper names files that way).
//!
//! CommonJS runs inside an ES module wrapper: its `require("…")` calls with a string literal
//! are resolved before the run and imported by the wrapper, and the original source runs on
//! first use through `Function` (sloppy mode, as Node runs it) with `module`, `exports`,
//! `require`, `__filename` and `__dirname`. The wrapper exports `module.exports` as `default`
//! and the names the source assigns as `exports.NAME = …` as named exports.

use serde_json::Value as Json;

/// The prefix of a package file's module name.
pub(crate) const PREFIX: &str = "npm:";

/// How a located module runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// An ES module (agent files always; `.mjs`; `.js` under `"type": "module"`).
    Esm,
    /// CommonJS (`.cjs`; `.js` otherwise).
    Cjs,
    /// `.json`: the parsed value as `default`.
    Json,
}

/// Which `exports` condition an import asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Condition {
    /// `import` / `import()`.
    Import,
    /// `require()`.
    Require,
}

impl Condition {
    fn names(self) -> [&'static str; 2] {
        match self {
            Condition::Import => ["import", "default"],
            Condition::Require => ["require", "default"],
        }
    }
}

/// `npm:@s/n@1.0.0/lib/x.js` → (`@s/n@1.0.0`, `lib/x.js`).
pub(crate) fn split_name(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(PREFIX)?;
    let skip = if rest.starts_with('@') { 2 } else { 1 };
    let mut cut = 0;
    for _ in 0..skip {
        cut += rest[cut..].find('/')? + 1;
    }
    Some((&rest[..cut - 1], &rest[cut..]))
}

/// The module name of `path` inside package `id`.
pub(crate) fn module_name(id: &str, path: &str) -> String {
    format!("{PREFIX}{id}/{path}")
}

/// A bare specifier split into the package name and the subpath (`""` for the package
/// itself): `@s/n/a/b` → (`@s/n`, `a/b`). `None` when it names no package (`node:fs`, empty).
pub(crate) fn split_bare(specifier: &str) -> Option<(&str, &str)> {
    if specifier.is_empty() || specifier.contains(':') || specifier.contains('\\') {
        return None;
    }
    let parts = if specifier.starts_with('@') { 2 } else { 1 };
    let mut cut = 0;
    for i in 0..parts {
        match specifier[cut..].find('/') {
            Some(at) if i + 1 < parts || cut + at < specifier.len() => {
                if i + 1 == parts {
                    let name = &specifier[..cut + at];
                    return Some((name, &specifier[cut + at + 1..]));
                }
                cut += at + 1;
            }
            _ if i + 1 == parts => return Some((specifier, "")),
            _ => return None,
        }
    }
    Some((specifier, ""))
}

/// The normalised path of `specifier` relative to `importer_path`, both inside one package;
/// an error when it leaves the package.
pub(crate) fn join_in_package(importer_path: &str, specifier: &str) -> Result<String, String> {
    let dir = importer_path.rfind('/').map_or("", |i| &importer_path[..i]);
    crate::modules::normalize(&format!("{dir}/{specifier}"))
        .map_err(|_| format!("'{specifier}' leaves its package"))
}

/// File candidates for a path inside a package, in Node's probing order.
pub(crate) fn candidates(path: &str) -> Vec<String> {
    let mut out = vec![path.to_string()];
    for ext in [".js", ".json", ".cjs", ".mjs"] {
        out.push(format!("{path}{ext}"));
    }
    for index in ["index.js", "index.json", "index.cjs", "index.mjs"] {
        out.push(format!("{path}/{index}"));
    }
    out
}

/// Resolves `subpath` (`"."` or `"./x"`) through an `exports` value; the target relative to
/// the package root without its `./`.
pub(crate) fn exports_target(
    exports: &Json,
    subpath: &str,
    condition: Condition,
) -> Option<String> {
    let is_subpath_map = exports
        .as_object()
        .is_some_and(|map| map.keys().any(|k| k.starts_with('.')));
    let target = if is_subpath_map {
        let map = exports.as_object()?;
        if let Some(exact) = map.get(subpath) {
            pick(exact, condition, None)?
        } else {
            // One `*` per key: the longest matching prefix wins (Node's order).
            let mut best: Option<(&str, &Json, String)> = None;
            for (key, value) in map {
                let Some((before, after)) = key.split_once('*') else {
                    continue;
                };
                if subpath.len() >= before.len() + after.len()
                    && subpath.starts_with(before)
                    && subpath.ends_with(after)
                    && best.as_ref().is_none_or(|(b, _, _)| before.len() > b.len())
                {
                    let star = subpath[before.len()..subpath.len() - after.len()].to_string();
                    best = Some((before, value, star));
                }
            }
            let (_, value, star) = best?;
            pick(value, condition, Some(&star))?
        }
    } else if subpath == "." {
        pick(exports, condition, None)?
    } else {
        return None;
    };
    let target = target.strip_prefix("./")?;
    if target.split('/').any(|s| s == ".." || s == "node_modules") {
        return None;
    }
    Some(target.to_string())
}

/// A target value: a string, an array (first that resolves) or a conditions object (first
/// matching condition in the object's order).
fn pick(value: &Json, condition: Condition, star: Option<&str>) -> Option<String> {
    match value {
        Json::String(s) => Some(match star {
            Some(star) => s.replace('*', star),
            None => s.clone(),
        }),
        Json::Array(items) => items.iter().find_map(|v| pick(v, condition, star)),
        Json::Object(map) => map
            .iter()
            .filter(|(k, _)| condition.names().contains(&k.as_str()))
            .find_map(|(_, v)| pick(v, condition, star)),
        _ => None,
    }
}

/// The string-literal specifiers of `require("…")` calls in CommonJS source, in order and
/// without repeats. A match inside a comment or a string only adds a dependency the wrapper
/// may fail to find, which it then skips (the call throws if it ever runs).
pub(crate) fn requires(source: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let bytes = source.as_bytes();
    let mut from = 0;
    while let Some(at) = source[from..].find("require") {
        let start = from + at;
        from = start + "require".len();
        let before_ok = start == 0 || {
            let b = bytes[start - 1];
            !(b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b == b'.')
        };
        if !before_ok {
            continue;
        }
        let rest = source[from..].trim_start();
        let Some(rest) = rest.strip_prefix('(') else {
            continue;
        };
        let rest = rest.trim_start();
        let Some(quote) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') else {
            continue;
        };
        let body = &rest[1..];
        let Some(end) = body.find(quote) else {
            continue;
        };
        let specifier = &body[..end];
        if !specifier.is_empty()
            && !specifier.contains('\n')
            && body[end + 1..].trim_start().starts_with(')')
            && !out.iter().any(|s| s == specifier)
        {
            out.push(specifier.to_string());
        }
    }
    out
}

/// Names a CommonJS source assigns as `exports.NAME =` / `module.exports.NAME =`, for named
/// imports of it (like Node's static detection, approximate by design).
fn assigned_exports(source: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut from = 0;
    while let Some(at) = source[from..].find("exports.") {
        let start = from + at;
        from = start + "exports.".len();
        if start > 0 {
            let b = source.as_bytes()[start - 1];
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'$' {
                continue;
            }
            if b == b'.' && !source[..start].ends_with("module.") {
                continue;
            }
        }
        let name: String = source[from..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '$')
            .collect();
        let after = source[from + name.len()..].trim_start();
        if name.is_empty()
            || name.starts_with(|c: char| c.is_ascii_digit())
            || !after.starts_with('=')
            || after.starts_with("==")
            || matches!(name.as_str(), "default" | "__esModule")
            || RESERVED.contains(&name.as_str())
            || out.contains(&name)
        {
            continue;
        }
        out.push(name);
    }
    out
}

const RESERVED: [&str; 12] = [
    "await", "break", "case", "class", "const", "delete", "enum", "export", "import", "let", "new",
    "yield",
];

/// The ES module that runs a CommonJS file. `deps` maps each `require` specifier found to
/// the module name it resolved to.
pub(crate) fn cjs_wrapper(name: &str, source: &str, deps: &[(String, String)]) -> String {
    let quote = |s: &str| Json::String(s.to_string()).to_string();
    let mut out = String::new();
    for (i, (_, resolved)) in deps.iter().enumerate() {
        out.push_str(&format!(
            "import * as __adf_dep{i} from {};\n",
            quote(resolved)
        ));
    }
    let (_, path) = split_name(name).unwrap_or(("", name));
    let dir = path.rfind('/').map_or("", |i| &path[..i]);
    out.push_str("const __adf_deps = {");
    for (i, (specifier, _)) in deps.iter().enumerate() {
        out.push_str(&format!("{}: __adf_dep{i},", quote(specifier)));
    }
    out.push_str("};\n");
    // A function declaration is initialised before any module of a cycle runs, so a
    // dependency that requires this module back gets its (partial) exports, as in Node.
    out.push_str(&format!(
        "export function __adf_cjs_load() {{\n\
         if (__adf_cjs_load.m) return __adf_cjs_load.m.exports;\n\
         const module = {{ exports: {{}} }};\n\
         __adf_cjs_load.m = module;\n\
         const require = (s) => {{\n\
           const d = __adf_deps[s];\n\
           if (d === undefined) {{ const e = new Error(\"Cannot find module '\" + s + \"' (only packages this package depends on, and its own files, can be required)\"); Object.defineProperty(e, 'code', {{ value: 'MODULE_NOT_FOUND' }}); throw e; }}\n\
           return typeof d.__adf_cjs_load === 'function' ? d.__adf_cjs_load() : d;\n\
         }};\n\
         const body = new Function('exports', 'require', 'module', '__filename', '__dirname', {src});\n\
         body.call(module.exports, module.exports, require, module, {file}, {dir});\n\
         return module.exports;\n\
         }}\n\
         const __adf_exports = __adf_cjs_load();\n\
         export default __adf_exports;\n",
        src = quote(source),
        file = quote(&format!("/{path}")),
        dir = quote(&format!("/{dir}")),
    ));
    for export in assigned_exports(source) {
        out.push_str(&format!(
            "const __adf_x_{export} = __adf_exports == null ? undefined : __adf_exports.{export};\n\
             export {{ __adf_x_{export} as {export} }};\n"
        ));
    }
    out
}

/// The ES module of a JSON file; an error when it is not JSON.
pub(crate) fn json_module(source: &str) -> Result<String, String> {
    let value: Json = serde_json::from_str(source).map_err(|e| format!("not JSON: {e}"))?;
    // `require` of it answers the value itself, as in Node (see the CommonJS wrapper).
    Ok(format!(
        "const __adf_json = {value};\nexport default __adf_json;\nexport function __adf_cjs_load() {{ return __adf_json; }}\n"
    ))
}

/// The format of package file `path` given the `type` of its nearest `package.json`.
pub(crate) fn format_of(path: &str, type_module: bool) -> Format {
    if path.ends_with(".json") {
        Format::Json
    } else if path.ends_with(".mjs") {
        Format::Esm
    } else if path.ends_with(".cjs") {
        Format::Cjs
    } else if type_module {
        Format::Esm
    } else {
        Format::Cjs
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn splits_names_and_specifiers() {
        assert_eq!(
            split_name("npm:a@1.0.0/lib/x.js"),
            Some(("a@1.0.0", "lib/x.js"))
        );
        assert_eq!(
            split_name("npm:@s/n@1.0.0/x.js"),
            Some(("@s/n@1.0.0", "x.js"))
        );
        assert_eq!(split_bare("lodash"), Some(("lodash", "")));
        assert_eq!(split_bare("lodash/fp/map"), Some(("lodash", "fp/map")));
        assert_eq!(split_bare("@s/n"), Some(("@s/n", "")));
        assert_eq!(split_bare("@s/n/sub"), Some(("@s/n", "sub")));
        assert_eq!(split_bare("node:fs"), None);
        assert_eq!(split_bare("@s"), None);
    }

    #[test]
    fn resolves_exports_maps() {
        let exports = json!({
            ".": { "import": "./esm/index.js", "require": "./cjs/index.js" },
            "./util/*": { "default": "./lib/util/*.js" },
            "./package.json": "./package.json"
        });
        assert_eq!(
            exports_target(&exports, ".", Condition::Import).as_deref(),
            Some("esm/index.js")
        );
        assert_eq!(
            exports_target(&exports, ".", Condition::Require).as_deref(),
            Some("cjs/index.js")
        );
        assert_eq!(
            exports_target(&exports, "./util/a", Condition::Import).as_deref(),
            Some("lib/util/a.js")
        );
        assert_eq!(
            exports_target(&exports, "./hidden", Condition::Import),
            None
        );
        assert_eq!(
            exports_target(&json!("./main.js"), ".", Condition::Require).as_deref(),
            Some("main.js")
        );
        assert_eq!(
            exports_target(&json!("../x.js"), ".", Condition::Import),
            None
        );
    }

    #[test]
    fn finds_requires_and_exports() {
        let src = "const a = require('a'); const b = require( \"b/c\" ); x.require('no'); \
                   exports.one = 1; module.exports.two = 2; exports.three == 3;";
        assert_eq!(requires(src), vec!["a", "b/c"]);
        assert_eq!(assigned_exports(src), vec!["one", "two"]);
    }
}
