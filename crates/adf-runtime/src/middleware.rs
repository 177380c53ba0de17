//! Middleware (§12.3): owner-configured lambdas that see, change or refuse what passes a
//! pipeline point — inbound messages before storage, outbound messages before signing, and
//! `sys_fetch` requests before the engine.
//!
//! Principal items: [`Point`], [`run_chain`] (the one call each point makes),
//! [`MiddlewareOutcome`] and [`Rejection`].
//!
//! Semantics (§12.3, missing-tables §9 and §12.3):
//! - The chain is the point's array (`security.middleware.inbox`, `security.middleware.outbox`,
//!   `security.fetch_middleware`), run in order. Each lambda gets `MiddlewareInput {point,
//!   data, meta}`; an output's `data` and `meta` replace the input's for the next lambda and,
//!   after the last, for the point; `reject: {code, reason}` stops the chain.
//! - With `security.require_middleware_authorization` true (the default) a reference to an
//!   unauthorized file is skipped and the skip logged (`origin: middleware`, event
//!   `middleware_skipped`); with it false the lambda runs, unauthorized. Authorized files run
//!   with their flag (§8.6: a middleware lambda runs as its source file; an unauthorized import
//!   demotes it).
//! - Fail closed: this is a security filter, so a reference that is malformed or names no file,
//!   a lambda that throws or times out, an output that is not `{data?, meta?, reject?}`, and a
//!   nested chain (middleware code calling a tool that runs middleware again) are rejections
//!   with a reason (code 500), logged as `middleware_failed`. Returning nothing passes the
//!   input through unchanged.
//!
//! How it runs. The points sit in synchronous code that holds the file
//! (`DetachedTool::prepare_outside` / `prepare`, the guest connection of ingress and routes),
//! so a chain runs to completion before it returns: on a scoped thread of its own with a
//! current-thread tokio runtime, against the caller's `&mut AdfFile`, in a fresh sandbox
//! (missing-tables §9: middleware is "fresh per call") with the built-in tools and no approver
//! (a restricted call is denied: no one waits on a filter). The caller's thread waits; it is
//! never the agent's store worker for ingress, which runs on the guest connection (the
//! delivery invariant holds). When the caller holds the agent's shared file for a serving run
//! (a system lambda's or a turn's code calling `sys_fetch`: `code::FileQueue`) and no
//! transaction is open, the chain's lambdas serve the agent's queued jobs while they wait,
//! as the run does; a chain inside a transaction (outbox) holds the file until it ends. A
//! chain with no references costs nothing.
//!
//! Where the rows go. At the inbox and fetch points the chain runs before the call's
//! transaction, so its log rows stay even when the message or request is refused. At the
//! outbox point it runs inside `msg_send`'s transaction: a rejection fails the call and rolls
//! back its rows, the rejection's log row included. The refusal is the call's error (what the
//! model or code sees, in the transcript) and a `tracing` warning.

use std::cell::Cell;

use adf_store::{AdfFile, NewLog};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::code::{self, Authorization, CodeEnv, InjectMode, LambdaRef, RunOptions};
use crate::tools::approval::DenyAll;

/// The `adf_logs` origin of middleware rows.
pub const LOG_ORIGIN: &str = "middleware";
/// The code of a rejection that is the runtime's, not a lambda's (fail closed).
pub const FAILURE_CODE: u16 = 500;

/// A pipeline point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Point {
    /// An HTTP request to a `serving.api` route, before its lambda (`HttpRequest`). The chain
    /// is the route's own `middleware` array, run with [`run_route_chain`].
    Route,
    /// ALF message after verification and decryption, before storage.
    Inbox,
    /// Egress context before signing.
    Outbox,
    /// `sys_fetch` parameters before the request.
    Fetch,
}

impl Point {
    /// The point's name as the config and the lambda input spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Point::Route => "route",
            Point::Inbox => "inbox",
            Point::Outbox => "outbox",
            Point::Fetch => "fetch",
        }
    }

    /// The config path of this point's array.
    pub fn config_path(self) -> &'static str {
        match self {
            Point::Route => "serving.api[].middleware",
            Point::Inbox => "security.middleware.inbox",
            Point::Outbox => "security.middleware.outbox",
            Point::Fetch => "security.fetch_middleware",
        }
    }

    fn pointer(self) -> Option<&'static str> {
        Some(match self {
            // Each route carries its own chain; there is no agent-wide array.
            Point::Route => return None,
            Point::Inbox => "/security/middleware/inbox",
            Point::Outbox => "/security/middleware/outbox",
            Point::Fetch => "/security/fetch_middleware",
        })
    }

    /// The configured references, as stored (absent or null: none; always none for
    /// [`Point::Route`], whose chains are per route).
    pub fn references(self, config: &Value) -> Vec<Value> {
        let Some(pointer) = self.pointer() else {
            return Vec::new();
        };
        match config.pointer(pointer) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.clone(),
            // Not an array: kept as one reference, which fails closed as malformed.
            Some(other) => vec![other.clone()],
        }
    }
}

/// Whether `config` configures any middleware at `point`.
pub fn configured(config: &Value, point: Point) -> bool {
    !point.references(config).is_empty()
}

/// What a chain let through.
#[derive(Debug, Clone, PartialEq)]
pub struct MiddlewareOutcome {
    /// The payload as the last lambda left it (message, egress context or fetch parameters).
    pub data: Value,
    /// Side information the lambdas passed along the chain, as the last one left it.
    pub meta: Map<String, Value>,
    /// Sources (`path:function`) that ran, in order.
    pub ran: Vec<String>,
    /// Sources skipped as unauthorized.
    pub skipped: Vec<String>,
}

impl MiddlewareOutcome {
    /// The outcome of a chain with nothing to run: the payload and side information as given.
    fn untouched(data: Value, meta: Map<String, Value>) -> Self {
        MiddlewareOutcome {
            data,
            meta,
            ran: Vec::new(),
            skipped: Vec::new(),
        }
    }
}

/// Why a chain stopped: a lambda's `reject`, or a failure of the chain itself (code 500).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{point} middleware {source_ref} rejected ({code}): {reason}")]
pub struct Rejection {
    /// `inbox`, `outbox` or `fetch`.
    pub point: &'static str,
    /// `path:function`, or the reference as configured when it did not parse.
    pub source_ref: String,
    /// The HTTP-style status the rejection carries (500 when the chain failed).
    pub code: u16,
    /// Why, as the lambda or the failure put it.
    pub reason: String,
    /// The chain itself failed (fail closed) rather than a lambda rejecting.
    pub failed: bool,
}

thread_local! {
    /// Set on a chain's own thread while it runs, so middleware code that calls a tool with a
    /// middleware point (its own `sys_fetch`, say) is refused instead of recursing.
    static IN_CHAIN: Cell<bool> = const { Cell::new(false) };
}

/// Runs `point`'s chain of `file`'s config over `data` and `meta` (see the module docs).
/// Returns at once, unchanged, when the point has no middleware.
pub fn run_chain(
    file: &mut AdfFile,
    point: Point,
    data: Value,
    meta: Map<String, Value>,
) -> Result<MiddlewareOutcome, Rejection> {
    let config = match file.config_shared() {
        Ok(config) => config,
        Err(error) => {
            return Err(failure(
                file,
                point,
                point.config_path(),
                format!("cannot read the config: {error}"),
            ));
        }
    };
    let references = point.references(&config);
    run_references(file, point, &config, references, data, meta)
}

/// Runs one route's chain (`serving.api[i].middleware`, given as `references`) over the
/// route's `HttpRequest`, with the same semantics as [`run_chain`] (order, authorization skip,
/// fail closed).
pub fn run_route_chain(
    file: &mut AdfFile,
    references: Vec<Value>,
    data: Value,
    meta: Map<String, Value>,
) -> Result<MiddlewareOutcome, Rejection> {
    if references.is_empty() {
        return Ok(MiddlewareOutcome::untouched(data, meta));
    }
    let config = match file.config_shared() {
        Ok(config) => config,
        Err(error) => {
            return Err(failure(
                file,
                Point::Route,
                Point::Route.config_path(),
                format!("cannot read the config: {error}"),
            ));
        }
    };
    run_references(file, Point::Route, &config, references, data, meta)
}

fn run_references(
    file: &mut AdfFile,
    point: Point,
    config: &Value,
    references: Vec<Value>,
    data: Value,
    meta: Map<String, Value>,
) -> Result<MiddlewareOutcome, Rejection> {
    if references.is_empty() {
        return Ok(MiddlewareOutcome::untouched(data, meta));
    }
    if IN_CHAIN.get() {
        return Err(failure(
            file,
            point,
            point.config_path(),
            "middleware code cannot call a tool that runs middleware itself".into(),
        ));
    }
    let require_authorization = config
        .pointer("/security/require_middleware_authorization")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    // A chain outside any transaction (`sys_fetch`'s) lends the file to the agent's queued
    // jobs while its lambdas wait, as the run whose call it serves does; inside one (the
    // outbox chain in `msg_send`'s transaction) the jobs would join it, so they wait.
    let queue = if file.in_transaction() {
        None
    } else {
        code::serving_queue()
    };
    let chain = Chain {
        point,
        references,
        require_authorization,
        queue,
    };
    let joined = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                IN_CHAIN.set(true);
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("cannot start the middleware runtime: {e}"))?;
                Ok::<_, String>(runtime.block_on(chain.run(file, data, meta)))
            })
            .join()
    });
    match joined {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(why)) => Err(failure(file, point, point.config_path(), why)),
        Err(_) => Err(failure(
            file,
            point,
            point.config_path(),
            "the middleware thread panicked".into(),
        )),
    }
}

struct Chain {
    point: Point,
    references: Vec<Value>,
    require_authorization: bool,
    /// The agent's jobs the chain's lambdas serve while they wait.
    queue: Option<code::FileQueue>,
}

impl Chain {
    async fn run(
        &self,
        file: &mut AdfFile,
        mut data: Value,
        mut meta: Map<String, Value>,
    ) -> Result<MiddlewareOutcome, Rejection> {
        let point = self.point;
        let env = match CodeEnv::with_builtins().await {
            Ok(env) => match &self.queue {
                Some(queue) => env.serving(queue.clone()),
                None => env,
            },
            Err(error) => {
                return Err(failure(
                    file,
                    point,
                    point.config_path(),
                    format!("cannot create the middleware sandbox: {}", error.message),
                ));
            }
        };
        let options = RunOptions {
            warm: false,
            timeout: None,
            inject: InjectMode::Immediate {
                loop_name: "main".into(),
            },
            profile: code::CodeProfile::Agent,
        };
        let mut ran = Vec::new();
        let mut skipped = Vec::new();
        for reference in &self.references {
            let lambda = match lambda_of(reference) {
                Ok(lambda) => lambda,
                Err(why) => {
                    let shown = reference.to_string();
                    return Err(failure(file, point, &shown, why));
                }
            };
            let source = lambda.source();
            let authorized = match code::lambda_file(file, &lambda.path) {
                Ok(Some(info)) => info.authorized,
                Ok(None) => {
                    return Err(failure(
                        file,
                        point,
                        &source,
                        format!("no file {} in this agent", lambda.path),
                    ));
                }
                Err(error) => return Err(failure(file, point, &source, error.message)),
            };
            if !authorized && self.require_authorization {
                log_skip(file, point, &source);
                skipped.push(source);
                continue;
            }
            let input = json!({ "point": point.as_str(), "data": data, "meta": meta });
            let run = code::run_lambda(
                file,
                &env,
                &lambda,
                input,
                Authorization::SourceFile,
                &DenyAll,
                &options,
            )
            .await;
            let output = match run.result {
                Ok(output) => output,
                Err(error) => {
                    return Err(failure(
                        file,
                        point,
                        &source,
                        format!("the lambda failed ({}): {}", error.code, error.message),
                    ));
                }
            };
            match parse_output(output) {
                Ok(Output::Pass {
                    data: new_data,
                    meta: new_meta,
                }) => {
                    if let Some(new_data) = new_data {
                        data = new_data;
                    }
                    if let Some(new_meta) = new_meta {
                        meta = new_meta;
                    }
                    ran.push(source);
                }
                Ok(Output::Reject { code, reason }) => {
                    let rejection = Rejection {
                        point: point.as_str(),
                        source_ref: source,
                        code,
                        reason,
                        failed: false,
                    };
                    log_rejection(file, &rejection, "middleware_rejected", "info");
                    return Err(rejection);
                }
                Err(why) => return Err(failure(file, point, &source, why)),
            }
        }
        Ok(MiddlewareOutcome {
            data,
            meta,
            ran,
            skipped,
        })
    }
}

/// `{ "lambda": "path:function" }`; a bare `"path:function"` string is read the same way.
fn lambda_of(reference: &Value) -> Result<LambdaRef, String> {
    let text = match reference {
        Value::String(s) => s.as_str(),
        Value::Object(object) => object
            .get("lambda")
            .and_then(Value::as_str)
            .ok_or("a middleware reference is { \"lambda\": \"path/file.ts:functionName\" }")?,
        _ => {
            return Err(
                "a middleware reference is { \"lambda\": \"path/file.ts:functionName\" }".into(),
            );
        }
    };
    LambdaRef::parse(text).map_err(|e| e.message)
}

enum Output {
    Pass {
        data: Option<Value>,
        meta: Option<Map<String, Value>>,
    },
    Reject {
        code: u16,
        reason: String,
    },
}

/// `MiddlewareOutput`: `{data?, meta?, reject?: {code, reason}}`; nothing returned passes.
fn parse_output(output: Value) -> Result<Output, String> {
    let object = match output {
        Value::Null => {
            return Ok(Output::Pass {
                data: None,
                meta: None,
            });
        }
        Value::Object(object) => object,
        other => {
            return Err(format!(
                "the lambda returned {}, not {{data?, meta?, reject?}}",
                kind(&other)
            ));
        }
    };
    if let Some(unknown) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "data" | "meta" | "reject"))
    {
        return Err(format!(
            "the lambda's output has '{unknown}'; a middleware output has only data, meta and reject"
        ));
    }
    match object.get("reject") {
        None | Some(Value::Null) => {}
        Some(Value::Object(reject)) => {
            let code = reject
                .get("code")
                .and_then(Value::as_u64)
                .and_then(|c| u16::try_from(c).ok())
                .filter(|c| (100..=999).contains(c))
                .ok_or("reject.code must be a number between 100 and 999")?;
            let reason = reject
                .get("reason")
                .and_then(Value::as_str)
                .ok_or("reject.reason must be a string")?;
            return Ok(Output::Reject {
                code,
                reason: reason.to_owned(),
            });
        }
        Some(other) => {
            return Err(format!(
                "reject must be {{code, reason}}, not {}",
                kind(other)
            ));
        }
    }
    let meta = match object.get("meta") {
        None | Some(Value::Null) => None,
        Some(Value::Object(meta)) => Some(meta.clone()),
        Some(other) => return Err(format!("meta must be an object, not {}", kind(other))),
    };
    Ok(Output::Pass {
        data: object.get("data").cloned(),
        meta,
    })
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A rejection of the chain itself (code [`FAILURE_CODE`]), logged as `middleware_failed`.
fn failure(file: &mut AdfFile, point: Point, source: &str, reason: String) -> Rejection {
    let rejection = Rejection {
        point: point.as_str(),
        source_ref: source.to_owned(),
        code: FAILURE_CODE,
        reason,
        failed: true,
    };
    log_rejection(file, &rejection, "middleware_failed", "error");
    rejection
}

fn log_rejection(file: &mut AdfFile, rejection: &Rejection, event: &str, level: &str) {
    tracing::warn!(
        point = rejection.point,
        source = %rejection.source_ref,
        code = rejection.code,
        reason = %rejection.reason,
        "{event}"
    );
    let data = json!({ "point": rejection.point, "code": rejection.code });
    write_log(
        file,
        &NewLog {
            level,
            origin: Some(LOG_ORIGIN),
            event: Some(event),
            target: Some(&rejection.source_ref),
            message: &rejection.to_string(),
            data: Some(&data),
            r#loop: None,
        },
    );
}

fn log_skip(file: &mut AdfFile, point: Point, source: &str) {
    tracing::warn!(point = point.as_str(), source, "middleware_skipped");
    let data = json!({ "point": point.as_str(), "reason": "unauthorized" });
    write_log(
        file,
        &NewLog {
            level: "warn",
            origin: Some(LOG_ORIGIN),
            event: Some("middleware_skipped"),
            target: Some(source),
            message: &format!(
                "{} middleware {source} skipped: its file is not authorized and security.require_middleware_authorization is on",
                point.as_str()
            ),
            data: Some(&data),
            r#loop: None,
        },
    );
}

/// A log row the logging config drops, or one that cannot be written, never changes the
/// chain's outcome; the `tracing` line above it stays.
fn write_log(file: &mut AdfFile, row: &NewLog<'_>) {
    if let Err(error) = file.log(row) {
        tracing::warn!(%error, "cannot write a middleware log row");
    }
}
