//! The host trait: everything the sandboxed code can reach outside itself.

use futures::future::BoxFuture;
use serde_json::Value;

use crate::HostError;

/// The embedder's side of the bridge. The sandbox knows nothing about tools: every
/// `adf.<method>(args)` becomes [`Host::call`], `fetch` (only when the request enables the
/// network) becomes [`Host::fetch`], and module sources come from [`Host::load_module`].
///
/// One `Host` value is passed per execution, so it can carry the caller's identity (lambda
/// file and function, authorized or not). Futures are `'static` because they are spawned on
/// the tokio runtime (a nested `Sandbox::run` from inside a host call must be able to make
/// progress while the outer execution waits): clone what the future needs.
///
/// **Binary data.** A `Uint8Array`/`ArrayBuffer`/typed-array view anywhere in `args` arrives
/// as `{"__bytes_base64": "<standard base64>"}`; a host value of that exact shape (one key)
/// becomes a `Uint8Array` in JavaScript. See [`bytes_value`](crate::bytes_value) and
/// [`value_bytes`](crate::value_bytes).
///
/// **Results.** A [`Value::String`] is parsed as JSON when it is valid JSON and handed over as
/// the raw string otherwise (the guide's rule for tool output text); text that must stay a
/// string whatever it looks like is answered as [`raw_text`](crate::raw_text); any other value
/// is handed over as is.
pub trait Host: Send + Sync {
    /// `adf.<method>(args)`. `args` is the single object argument (`{}` when omitted).
    fn call(&self, method: &str, args: Value) -> BoxFuture<'static, Result<Value, HostError>>;

    /// The source of an agent file (`lib/util.ts`), or `None` when there is no such file.
    /// Called before execution for every module the code imports (probing extensions).
    fn load_module(&self, path: &str) -> BoxFuture<'static, Option<String>>;

    /// The installed package a bare import of `name` resolves to, as its id
    /// (`name@version`): from the agent's own code when `from` is `None`, from inside the
    /// package `from` (its declared dependencies) otherwise. `None` when there is none; the
    /// default has no packages.
    fn resolve_package(
        &self,
        from: Option<&str>,
        name: &str,
    ) -> BoxFuture<'static, Option<String>> {
        let _ = (from, name);
        Box::pin(async { None })
    }

    /// The text of `path` (`lib/index.js`, `package.json`) inside the installed package `id`,
    /// or `None`. Only ids [`Host::resolve_package`] answered are asked for.
    fn package_file(&self, id: &str, path: &str) -> BoxFuture<'static, Option<String>> {
        let _ = (id, path);
        Box::pin(async { None })
    }

    /// Native `fetch` when the request has `network: true`. `request` is
    /// `{url, method, headers: {name: value}, body: null | string | bytes}`; answer
    /// `{status, statusText?, headers?: {name: value}, body: string | bytes, url?}`.
    /// The default refuses, so a host that never enables the network need not implement it.
    fn fetch(&self, request: Value) -> BoxFuture<'static, Result<Value, HostError>> {
        let _ = request;
        Box::pin(async {
            Err(HostError::new(
                "NETWORK_DISABLED",
                "native network access is disabled; use adf.sys_fetch",
            ))
        })
    }
}
