//! Module paths: the agent's files form a flat namespace of relative paths (`lib/report.ts`).
//! Specifiers resolve relative to the importer; nothing ever touches the host filesystem.
//!
//! Module sources are fetched asynchronously from the [`Host`](crate::Host) *before* any
//! JavaScript runs (see `Sandbox::preload`) and prepared (types stripped). QuickJS then asks
//! synchronously while linking: the resolver maps `(importer, specifier)` to a name, using the
//! resolutions recorded during preloading (so `./util` → `lib/util.ts` after probing), and the
//! loader declares the prepared JavaScript of that name, or fails when static analysis never
//! saw it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rquickjs::loader::{ImportAttributes, Loader, Resolver};
use rquickjs::{Ctx, Error, Module, module::Declared};

/// Resolutions recorded while preloading, shared with the runtime-wide resolver.
pub(crate) type ResolutionMap = Arc<Mutex<HashMap<(String, String), String>>>;

/// The directory part of a module path (`lib/a.ts` → `lib`, `a.ts` → ``).
fn dirname(path: &str) -> &str {
    path.rfind('/').map_or("", |i| &path[..i])
}

/// Join and normalise a specifier against an importer. Absolute specifiers (`/lib/x.ts`) are
/// relative to the agent's root; bare specifiers (`fs`, `lodash`) are not paths (packages.rs).
pub(crate) fn join(importer: &str, specifier: &str) -> Result<String, String> {
    let base = if let Some(abs) = specifier.strip_prefix('/') {
        return normalize(abs);
    } else if specifier.starts_with("./") || specifier.starts_with("../") {
        dirname(importer)
    } else {
        // Bare specifiers are packages, resolved while preloading (sandbox.rs); one that
        // reaches here was not found then.
        return Err(format!(
            "module '{specifier}' is not available: it is not installed for this agent as an \
             npm package (npm_install it) and the sandbox has no Node built-in modules; import \
             the agent's own files with a relative path such as './util.ts'"
        ));
    };
    normalize(&format!("{base}/{specifier}"))
}

/// Normalise `a/./b/../c` → `a/c`; refuse paths that climb above the root.
pub(crate) fn normalize(path: &str) -> Result<String, String> {
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(format!("module path '{path}' leaves the agent's files"));
                }
            }
            s => parts.push(s),
        }
    }
    if parts.is_empty() {
        return Err(format!("'{path}' is not a module path"));
    }
    Ok(parts.join("/"))
}

/// Candidate file paths for a joined specifier, in probing order. An explicit extension is
/// tried first; `.js` also tries `.ts` (the TypeScript convention); no extension tries the
/// usual ones and `index` files.
pub(crate) fn candidates(joined: &str) -> Vec<String> {
    let last = joined.rsplit('/').next().unwrap_or(joined);
    let mut out = vec![joined.to_string()];
    if let Some(stem) = joined.strip_suffix(".js") {
        out.push(format!("{stem}.ts"));
    } else if let Some(stem) = joined.strip_suffix(".mjs") {
        out.push(format!("{stem}.mts"));
    } else if !last.contains('.') {
        out.clear();
        for ext in [".ts", ".js", ".mts", ".mjs"] {
            out.push(format!("{joined}{ext}"));
        }
        for ext in ["index.ts", "index.js"] {
            out.push(format!("{joined}/{ext}"));
        }
    }
    out
}

/// The runtime-wide resolver: recorded resolution first, plain path arithmetic otherwise.
pub(crate) struct AgentResolver {
    pub(crate) map: ResolutionMap,
}

impl Resolver for AgentResolver {
    fn resolve<'js>(
        &mut self,
        _ctx: &Ctx<'js>,
        base: &str,
        name: &str,
        _attributes: Option<ImportAttributes<'js>>,
    ) -> rquickjs::Result<String> {
        if let Ok(map) = self.map.lock()
            && let Some(found) = map.get(&(base.to_string(), name.to_string()))
        {
            return Ok(found.clone());
        }
        join(base, name).map_err(|message| Error::new_resolving_message(base, name, message))
    }
}

/// Prepared JavaScript by module name, filled by preloading.
pub(crate) type SourceFn = Box<dyn Fn(&str) -> Option<String> + Send>;

/// The loader serves modules that preloading prepared (QuickJS asks while linking, and
/// handles cycles itself); anything else is an error.
pub(crate) struct PreparedLoader {
    pub(crate) sources: SourceFn,
}

impl Loader for PreparedLoader {
    fn load<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        name: &str,
        _attributes: Option<ImportAttributes<'js>>,
    ) -> rquickjs::Result<Module<'js, Declared>> {
        match (self.sources)(name) {
            Some(js) => Module::declare(ctx.clone(), name, js),
            None => Err(Error::new_loading_message(
                name,
                "module not found among the agent's files (dynamic imports must use a string \
                 literal so the sandbox can load them before the code runs)",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn joins_relative_to_importer() {
        assert_eq!(join("lib/report.ts", "./util.ts").unwrap(), "lib/util.ts");
        assert_eq!(
            join("lib/report.ts", "../shared/x.js").unwrap(),
            "shared/x.js"
        );
        assert_eq!(join("lib/a.ts", "/b.ts").unwrap(), "b.ts");
        assert!(join("a.ts", "../../etc/passwd").is_err());
        assert!(join("a.ts", "fs").is_err());
    }

    #[test]
    fn probes_extensions() {
        assert_eq!(candidates("lib/u.js"), vec!["lib/u.js", "lib/u.ts"]);
        assert_eq!(candidates("lib/u")[0], "lib/u.ts");
    }
}
