//! The runner: one loop that owns `&mut AdfFile` for the length of a top-level run and services
//! every host request of every execution in flight (the top-level one and its nested
//! `sys_lambda`/`sys_code` executions) on the task that owns the file.
//!
//! The sandbox calls [`ChannelHost`], which only forwards `(request, oneshot reply)` over an
//! unbounded channel. [`Runner::run`] `select!`s between the top-level execution, that channel
//! and the futures it started (nested executions, `model_invoke` requests, detached tool calls
//! such as `sys_fetch`, native `fetch`). Handling a request is synchronous against the file
//! (each call one transaction); anything slow becomes a future in `pending`, so the executions'
//! time limits and timers keep running. A detached call's log rows are written when its future
//! completes, back on this task. Native `fetch` (only installed with `code_execution.network`)
//! runs the `sys_fetch` engine with the same §5.6 policy ([`crate::fetch::native`]).
//!
//! While nothing is left to service but futures that do not need the file, a runner given a
//! [`super::FileQueue`] (the daemon's) runs the agent's queued store jobs with the file
//! (waiting.rs), so a lambda awaiting a slow server or model does not stop its agent.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use adf_sandbox::{Entry, Execution, Host, HostError, LogEntry, Request};
use adf_store::{AdfFile, FileInfo};
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::env::{
    CallRecord, CodeEnv, CodeRun, Frame, InjectMode, Injection, LambdaRef, MAX_LAMBDA_DEPTH,
    RunOptions, log_lines, options_timeout, requires_authorized_caller, sandbox_error,
};
use super::methods::{self, MethodCx, MethodReply, ModelAnswer};
use crate::identity::OpenIdentity;
use crate::tools::access::{self, Access};
use crate::tools::{
    Approver, CallOutcome, DeferredCall, DeferredDriver, Detached, DetachedOutcome, ErrorCode,
    HostedFuture, ToolCaller, ToolError, ToolRegistry,
};

enum HostMsg {
    Call {
        frame: Arc<Frame>,
        method: String,
        args: Value,
        reply: oneshot::Sender<Result<Value, HostError>>,
    },
    Load {
        frame: Arc<Frame>,
        path: String,
        reply: oneshot::Sender<Option<String>>,
    },
    /// A bare import's package, or a file of one (`id` set).
    Package {
        from: Option<String>,
        name: String,
        id: Option<String>,
        reply: oneshot::Sender<Option<String>>,
    },
    /// Native `fetch` (`code_execution.network`): the `sys_fetch` engine and egress policy.
    Fetch {
        request: Value,
        reply: oneshot::Sender<Result<Value, HostError>>,
    },
}

/// The sandbox's view of the runtime: forwards everything to the runner.
struct ChannelHost {
    frame: Arc<Frame>,
    tx: mpsc::UnboundedSender<HostMsg>,
}

fn stopped() -> HostError {
    HostError::new("INTERNAL_ERROR", "the code runner stopped before answering")
}

impl Host for ChannelHost {
    fn call(&self, method: &str, args: Value) -> BoxFuture<'static, Result<Value, HostError>> {
        let (reply, answer) = oneshot::channel();
        let sent = self.tx.send(HostMsg::Call {
            frame: self.frame.clone(),
            method: method.to_owned(),
            args,
            reply,
        });
        Box::pin(async move {
            if sent.is_err() {
                return Err(stopped());
            }
            answer.await.unwrap_or_else(|_| Err(stopped()))
        })
    }

    fn load_module(&self, path: &str) -> BoxFuture<'static, Option<String>> {
        let (reply, answer) = oneshot::channel();
        let sent = self.tx.send(HostMsg::Load {
            frame: self.frame.clone(),
            path: path.to_owned(),
            reply,
        });
        Box::pin(async move {
            if sent.is_err() {
                return None;
            }
            answer.await.ok().flatten()
        })
    }

    fn resolve_package(
        &self,
        from: Option<&str>,
        name: &str,
    ) -> BoxFuture<'static, Option<String>> {
        self.ask_package(from.map(str::to_owned), name.to_owned(), None)
    }

    fn package_file(&self, id: &str, path: &str) -> BoxFuture<'static, Option<String>> {
        self.ask_package(None, path.to_owned(), Some(id.to_owned()))
    }

    fn fetch(&self, request: Value) -> BoxFuture<'static, Result<Value, HostError>> {
        let (reply, answer) = oneshot::channel();
        let sent = self.tx.send(HostMsg::Fetch { request, reply });
        Box::pin(async move {
            if sent.is_err() {
                return Err(stopped());
            }
            answer.await.unwrap_or_else(|_| Err(stopped()))
        })
    }
}

impl ChannelHost {
    fn ask_package(
        &self,
        from: Option<String>,
        name: String,
        id: Option<String>,
    ) -> BoxFuture<'static, Option<String>> {
        let (reply, answer) = oneshot::channel();
        let sent = self.tx.send(HostMsg::Package {
            from,
            name,
            id,
            reply,
        });
        Box::pin(async move {
            if sent.is_err() {
                return None;
            }
            answer.await.ok().flatten()
        })
    }
}

/// How a call is answered.
pub(crate) enum Reply {
    /// Now.
    Value(Value),
    /// Now, then run this `_async` task (status `running`) before the next request.
    ValueThenTask(Value, String),
    /// When this model request (`model_invoke`) resolves; recorded as a [`CallRecord`], its
    /// retries as `provider_error` rows.
    Model(BoxFuture<'static, ModelAnswer>),
    /// When this detached tool call (named) resolves (`sys_fetch`); its log rows are written
    /// then.
    Detached(String, Detached),
    /// When this nested execution ends.
    Nested {
        request: Request,
        frame: Arc<Frame>,
        /// `sys_code` answers `{result, logs}`; a lambda answers its value.
        inline: bool,
    },
    /// A hosted tool's call (`adf_shell`): run on this task, which holds the file, before
    /// the next request is serviced.
    Hosted(DeferredCall),
}

enum Completion {
    /// A detached call or native fetch ended: write its log rows, then answer.
    Detached {
        reply: oneshot::Sender<Result<Value, HostError>>,
        outcome: DetachedOutcome,
        /// The tool, for its [`CallRecord`]; `None` for native `fetch`.
        tool: Option<String>,
    },
    Nested {
        reply: oneshot::Sender<Result<Value, HostError>>,
        source: String,
        inline: bool,
        started: std::time::Instant,
        execution: Execution,
    },
    /// A `model_invoke` request ended.
    Model {
        reply: oneshot::Sender<Result<Value, HostError>>,
        answer: ModelAnswer,
    },
    /// An `_async` code tool's execution ended: record its outcome on the task.
    CodeTask {
        task_id: String,
        source: String,
        inline: bool,
        started: std::time::Instant,
        execution: Execution,
    },
    /// An `_async` detached call's task ended: write its log rows and record the outcome.
    Task {
        task_id: String,
        outcome: DetachedOutcome,
    },
}

/// The loop of one top-level run.
pub(crate) struct Runner<'a> {
    pub(crate) file: &'a mut AdfFile,
    pub(crate) env: &'a CodeEnv,
    pub(crate) approver: &'a (dyn Approver + Sync),
    pub(crate) options: &'a RunOptions,
    tx: mpsc::UnboundedSender<HostMsg>,
    rx: mpsc::UnboundedReceiver<HostMsg>,
    pending: FuturesUnordered<BoxFuture<'static, Completion>>,
    /// Console output of nested executions, prefixed with their source.
    nested_logs: Vec<LogEntry>,
    pub(crate) injections: Vec<Injection>,
    /// Tool and model calls, for the daemon's trigger sources.
    calls: Vec<CallRecord>,
    /// The file's identity, opened on the first identity method (`None` inside: could not).
    pub(crate) identity: Option<Option<OpenIdentity>>,
    /// The run is inside a route's transaction (`run_lambda_closing`): it commits before the
    /// first wait off the file, so no write lock is held across one.
    pub(crate) holding_transaction: bool,
    /// Rung when other work of the agent waits for the file this run holds (waiting.rs).
    waiting: Option<super::waiting::Listening>,
}

impl<'a> Runner<'a> {
    pub(crate) fn new(
        file: &'a mut AdfFile,
        env: &'a CodeEnv,
        approver: &'a (dyn Approver + Sync),
        options: &'a RunOptions,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Runner {
            file,
            env,
            approver,
            options,
            tx,
            rx,
            pending: FuturesUnordered::new(),
            nested_logs: Vec::new(),
            injections: Vec::new(),
            calls: Vec::new(),
            identity: None,
            holding_transaction: false,
            waiting: env.file_queue().map(super::FileQueue::listen),
        }
    }

    /// Completes when a job of the agent waits for the file and this run waits too: at once
    /// while a call of the run is in flight off the file (a model request, a fetch, a nested
    /// execution), otherwise once the run has gone quiet (a sleep, an await of its own;
    /// `Listening::queued`). A run that never waits is never interleaved. Never completes
    /// without a queue.
    fn queued_work(&self) -> impl std::future::Future<Output = ()> + use<> {
        let queued = self
            .waiting
            .as_ref()
            .map(|w| w.queued(!self.pending.is_empty()));
        async move {
            match queued {
                Some(queued) => queued.await,
                None => std::future::pending().await,
            }
        }
    }

    /// Serves the agent's queued jobs with this run's file: reached only when no execution
    /// has a call or a completion to service, so between two calls (waiting.rs).
    fn serve_queued(&mut self) {
        if let Some(waiting) = &self.waiting {
            waiting.serve(self.file);
        }
    }

    /// Before a wait off the file (a detached tool, a model request, native `fetch`, a hosted
    /// shell command): commits the route's transaction. A detached tool may write through a
    /// connection of its own (`ws_connect` saving its entry) and must not meet this run's
    /// write lock; and no other writer of the agent waits on a network round trip.
    fn release_transaction(&mut self) {
        if std::mem::take(&mut self.holding_transaction) && self.file.in_transaction() {
            super::env::commit_run_transaction(self.file);
            // Jobs queued while the transaction was open were left for now.
            if let Some(waiting) = &self.waiting {
                waiting.bell.notify_one();
            }
        }
    }

    /// Runs `request` as `frame` to the end, servicing its host requests.
    pub(crate) async fn run(mut self, request: Request, frame: Arc<Frame>) -> CodeRun {
        let host = Arc::new(ChannelHost {
            frame,
            tx: self.tx.clone(),
        });
        let sandbox = self.env.sandbox.clone();
        let root = async move { sandbox.execute(request, host).await };
        tokio::pin!(root);
        let execution = loop {
            let queued = self.queued_work();
            tokio::select! {
                biased;
                execution = &mut root => break execution,
                Some(done) = self.pending.next(), if !self.pending.is_empty() => self.complete(done),
                Some(msg) = self.rx.recv() => self.handle(msg).await,
                () = queued => self.serve_queued(),
            }
        };
        // Background tasks the code started (`_async`) finish before the run reports, so
        // their rows are final; anything else still pending has lost its caller.
        while !self.pending.is_empty() {
            let queued = self.queued_work();
            tokio::select! {
                biased;
                Some(done) = self.pending.next() => self.complete(done),
                Some(msg) = self.rx.recv() => self.handle(msg).await,
                () = queued => self.serve_queued(),
            }
        }
        let mut logs = execution.logs;
        logs.append(&mut self.nested_logs);
        CodeRun {
            result: execution.result.map_err(|e| sandbox_error(&e)),
            logs,
            logs_truncated: execution.logs_truncated,
            injections: std::mem::take(&mut self.injections),
            calls: std::mem::take(&mut self.calls),
        }
    }

    async fn handle(&mut self, msg: HostMsg) {
        match msg {
            HostMsg::Load { frame, path, reply } => {
                let _ = reply.send(self.load(&frame, &path));
            }
            HostMsg::Package {
                from,
                name,
                id,
                reply,
            } => {
                let _ = reply.send(self.package(from.as_deref(), &name, id.as_deref()));
            }
            HostMsg::Fetch { request, reply } => match self.code_config() {
                // The sandbox installs `fetch` only with the network on; checked again here
                // against the config as it is now.
                Ok(config) if super::env::network(&config) => {
                    self.release_transaction();
                    let future = crate::fetch::native(&config, &request, Default::default());
                    self.pending.push(Box::pin(async move {
                        Completion::Detached {
                            reply,
                            outcome: future.await,
                            tool: None,
                        }
                    }));
                }
                Ok(_) => {
                    let _ = reply.send(Err(HostError::new(
                        "NETWORK_DISABLED",
                        "native network access is disabled (code_execution.network); use adf.sys_fetch",
                    )));
                }
                Err(error) => {
                    let _ = reply.send(Err(host_error(error)));
                }
            },
            HostMsg::Call {
                frame,
                method,
                args,
                reply,
            } => {
                // Code the call starts on this thread (a middleware chain) serves the run's
                // queue while it waits, as the run does.
                let _serving = super::waiting::ServingScope::enter(
                    self.waiting.as_ref().map(super::waiting::Listening::queue),
                );
                self.answer(frame, &method, args, reply).await;
            }
        }
    }

    /// Carries out one `adf.<method>(args)` call and answers it, now or when it completes.
    async fn answer(
        &mut self,
        frame: Arc<Frame>,
        method: &str,
        args: Value,
        reply: oneshot::Sender<Result<Value, HostError>>,
    ) {
        match self.call(&frame, method, args) {
            Ok(Reply::Value(value)) => {
                let _ = reply.send(Ok(value));
            }
            Ok(Reply::ValueThenTask(value, task_id)) => {
                let _ = reply.send(Ok(value));
                // The task's outcome is on its row; the code polls it with db_query.
                self.start_task(&frame, task_id);
            }
            Ok(Reply::Model(future)) => {
                self.release_transaction();
                self.pending.push(Box::pin(async move {
                    Completion::Model {
                        reply,
                        answer: future.await,
                    }
                }));
            }
            Ok(Reply::Detached(tool, future)) => {
                self.release_transaction();
                self.pending.push(Box::pin(async move {
                    Completion::Detached {
                        reply,
                        outcome: future.await,
                        tool: Some(tool),
                    }
                }));
            }
            Ok(Reply::Hosted(call)) => {
                self.release_transaction();
                let result = self.hosted(&frame, &call).await;
                self.calls.push(CallRecord::Tool {
                    tool: call.tool.clone(),
                    status: call_status(&result),
                });
                let _ = reply.send(result.map_err(host_error));
            }
            Ok(Reply::Nested {
                request,
                frame,
                inline,
            }) => {
                let source = frame.source.clone();
                if !inline {
                    super::env::log_execute(self.file, "sys_lambda", &source, frame.authorized());
                }
                let started = std::time::Instant::now();
                let host = Arc::new(ChannelHost {
                    frame,
                    tx: self.tx.clone(),
                });
                let sandbox = self.env.sandbox.clone();
                self.pending.push(Box::pin(async move {
                    let execution = sandbox.execute(request, host).await;
                    Completion::Nested {
                        reply,
                        source,
                        inline,
                        started,
                        execution,
                    }
                }));
            }
            Err(error) => {
                let _ = reply.send(Err(host_error(error)));
            }
        }
    }

    /// Runs an `_async` call's task: a synchronous tool now; a detached one (`sys_fetch`) or
    /// a code tool (a nested execution, under the same §8.6 rules as a direct call) beside the
    /// execution, recorded on the task when it ends.
    fn start_task(&mut self, frame: &Arc<Frame>, task_id: String) {
        let registry = self.env.registry.clone();
        match registry.start_task(self.file, &task_id, &frame.caller()) {
            Ok(crate::tools::TaskRun::Done(_)) | Err(_) => {}
            Ok(crate::tools::TaskRun::Detached(future)) => {
                self.release_transaction();
                self.pending.push(Box::pin(async move {
                    Completion::Task {
                        task_id,
                        outcome: future.await,
                    }
                }));
            }
            Ok(crate::tools::TaskRun::Code(call)) => {
                match self.call(frame, &call.tool, call.args.clone()) {
                    Ok(Reply::Nested {
                        request,
                        frame,
                        inline,
                    }) => {
                        let source = frame.source.clone();
                        if !inline {
                            super::env::log_execute(
                                self.file,
                                "sys_lambda",
                                &source,
                                frame.authorized(),
                            );
                        }
                        let started = std::time::Instant::now();
                        let host = Arc::new(ChannelHost {
                            frame,
                            tx: self.tx.clone(),
                        });
                        let sandbox = self.env.sandbox.clone();
                        self.pending.push(Box::pin(async move {
                            Completion::CodeTask {
                                task_id,
                                source,
                                inline,
                                started,
                                execution: sandbox.execute(request, host).await,
                            }
                        }));
                    }
                    Ok(_) => {
                        let result = Err(ToolError::new(
                            ErrorCode::InternalError,
                            format!("{} did not start a code execution", call.tool),
                        ));
                        let _ = registry.finish_task(self.file, &task_id, &result);
                    }
                    Err(error) => {
                        let _ = registry.finish_task(self.file, &task_id, &Err(error));
                    }
                }
            }
        }
    }

    /// The inner loop this run belongs to (`None` for main): code callers carry no loop, so
    /// the rows their detached calls leave take the run's (§6.4).
    fn in_loop(&self) -> Option<&'a str> {
        let options: &'a RunOptions = self.options;
        let (InjectMode::Immediate { loop_name } | InjectMode::Collect { loop_name }) =
            &options.inject;
        (loop_name != "main").then_some(loop_name.as_str())
    }

    fn complete(&mut self, done: Completion) {
        let in_loop = self.in_loop();
        let done = match done {
            Completion::Detached {
                reply,
                outcome,
                tool,
            } => {
                outcome.record(self.file, in_loop);
                if let Some(tool) = tool {
                    self.calls.push(CallRecord::Tool {
                        tool,
                        status: call_status(&outcome.result),
                    });
                }
                let _ = reply.send(outcome.result.map_err(host_error));
                return;
            }
            Completion::Model { reply, answer } => {
                if let Err(error) =
                    crate::provider_log::log_retries(self.file, in_loop, &answer.retries)
                {
                    // Like any log row that cannot be written: the call's outcome stands.
                    tracing::warn!(%error, "cannot log model_invoke's retries");
                }
                self.calls.push(answer.record);
                let _ = reply.send(answer.result.map_err(host_error));
                return;
            }
            Completion::CodeTask {
                task_id,
                source,
                inline,
                started,
                execution,
            } => {
                let result = match execution.result {
                    Ok(value) if inline => {
                        Ok(json!({ "result": value, "logs": log_lines(&execution.logs) }))
                    }
                    Ok(value) => Ok(value),
                    Err(e) => Err(sandbox_error(&e)),
                };
                if !inline {
                    super::env::log_result(
                        self.file,
                        "sys_lambda",
                        &source,
                        &result,
                        started.elapsed(),
                    );
                }
                let _ = self.env.registry.finish_task(self.file, &task_id, &result);
                return;
            }
            Completion::Task { task_id, outcome } => {
                outcome.record(self.file, in_loop);
                let _ = self
                    .env
                    .registry
                    .finish_task(self.file, &task_id, &outcome.result);
                return;
            }
            other => other,
        };
        let Completion::Nested {
            reply,
            source,
            inline,
            started,
            execution,
        } = done
        else {
            return;
        };
        if !inline {
            let result = execution
                .result
                .as_ref()
                .map(|_| Value::Null)
                .map_err(sandbox_error);
            super::env::log_result(self.file, "sys_lambda", &source, &result, started.elapsed());
        }
        let answer = match execution.result {
            Ok(value) if inline => {
                Ok(json!({ "result": value, "logs": log_lines(&execution.logs) }))
            }
            Ok(value) => Ok(value),
            // The lambda's own code (a rethrown adf.* error, or one it set) travels as is.
            Err(e) => Err(HostError::new(e.proxy_code(), e.to_string())),
        };
        self.nested_logs
            .extend(execution.logs.into_iter().map(|l| LogEntry {
                level: l.level,
                message: format!("[{source}] {}", l.message),
            }));
        let _ = reply.send(answer);
    }

    /// The config as this run's code sees it: the agent's, or with the inner-loop profile
    /// applied ([`super::env::CodeProfile`]). Read on every call, so a config change reaches the
    /// next call of a running execution (STL-31).
    fn code_config(&self) -> Result<Arc<Value>, ToolError> {
        let config = self.file.config_shared()?;
        Ok(match self.options.profile {
            super::env::CodeProfile::Agent => config,
            super::env::CodeProfile::InnerLoop => Arc::new(super::env::inner_loop_view(&config)),
        })
    }

    /// A package id (`id: None`) or a package file's text, from the attached package modules
    /// and the run's `code_execution.packages`. Package files do not demote an authorized
    /// run: they are not the agent's files, and the store keeps them as their registry's
    /// integrity hash says.
    fn package(&self, from: Option<&str>, name: &str, id: Option<&str>) -> Option<String> {
        let modules = self.env.registry.packages()?;
        let config = self.code_config().ok()?;
        let packages = config
            .pointer("/code_execution/packages")
            .cloned()
            .unwrap_or(Value::Array(Vec::new()));
        match id {
            None => modules.resolve(&packages, from, name),
            Some(id) => modules.read(&packages, id, name),
        }
    }

    /// A module source for the sandbox; an unauthorized file demotes the execution.
    fn load(&mut self, frame: &Frame, path: &str) -> Option<String> {
        let entry = self.file.file_read(path).ok()??;
        if !entry.info.authorized {
            frame.authorized.store(false, Ordering::SeqCst);
        }
        String::from_utf8(entry.content).ok()
    }

    /// One `adf.<method>(args)` call.
    fn call(&mut self, frame: &Arc<Frame>, method: &str, args: Value) -> Result<Reply, ToolError> {
        match method {
            "loop_compact" | "loop_clear" => Err(ToolError::new(
                ErrorCode::ExcludedTool,
                format!(
                    "{method} only works as a direct tool call of the model: the runtime finishes it after the model's turn ({}), so from code it would fail quietly",
                    if method == "loop_compact" {
                        "the summarize/clear/re-seed pass lives in the executor"
                    } else {
                        "the live session would keep sending the deleted turns"
                    }
                ),
            )),
            // `_async` makes it a task like any tool call (the pipeline queues it; the task
            // then runs the nested execution); otherwise the caller awaits it directly.
            "sys_lambda" if args.get("_async") == Some(&Value::Bool(true)) => {
                self.tool(frame, method, args)
            }
            "sys_lambda" => self.nested_lambda(frame, args),
            m if methods::is_code_method(m) => {
                let caller = frame.caller();
                let config = self.code_config()?;
                match access::method_access(&caller, &config, m) {
                    Access::Refused(code, message) => Err(ToolError::new(code, message)),
                    // Code callers never get NeedsApproval; treat it as a refusal if it appears.
                    Access::NeedsApproval => Err(ToolError::new(
                        ErrorCode::RequiresAuthorizedCode,
                        format!("'{m}' may only be called by authorized code"),
                    )),
                    Access::Allowed => {
                        let mut cx = MethodCx {
                            file: &mut *self.file,
                            env: self.env,
                            options: self.options,
                            injections: &mut self.injections,
                            identity: &mut self.identity,
                        };
                        methods::call(&mut cx, frame, m, args, &config).map(|reply| match reply {
                            MethodReply::Value(value) => Reply::Value(value),
                            MethodReply::Model(answer) => Reply::Model(answer),
                        })
                    }
                }
            }
            _ => {
                let reply = self.tool(frame, method, args);
                // Detached calls are recorded when they end; unknown names are not tool calls.
                let settled = match &reply {
                    Ok(Reply::Detached(..) | Reply::Hosted(..)) => None,
                    Ok(_) => Some(Ok(())),
                    Err(error)
                        if self.code_config().is_ok_and(|config| {
                            self.env.registry.resolve(&config, method).is_some()
                        }) =>
                    {
                        Some(Err(error.clone()))
                    }
                    Err(_) => None,
                };
                if let Some(result) = settled {
                    self.calls.push(CallRecord::Tool {
                        tool: method.to_owned(),
                        status: call_status(&result),
                    });
                }
                reply
            }
        }
    }

    /// A tool through the registry's pipeline, as this frame's caller.
    fn tool(&mut self, frame: &Arc<Frame>, name: &str, args: Value) -> Result<Reply, ToolError> {
        let caller = frame.caller();
        let args = from_code(name, args);
        let outcome = self
            .env
            .registry
            .call(self.file, &caller, name, args, self.approver)?;
        match outcome {
            CallOutcome::Done(value) => Ok(Reply::Value(for_code(name, value))),
            CallOutcome::Queued { task_id, status } => {
                let value = json!({ "task_id": task_id, "status": status, "tool": name });
                if status == "running" {
                    Ok(Reply::ValueThenTask(value, task_id))
                } else {
                    Ok(Reply::Value(value))
                }
            }
            CallOutcome::Deferred(call) if call.tool == "sys_code" => {
                let config = self.code_config()?;
                let code = call.args.get("code").and_then(Value::as_str).unwrap_or("");
                let typescript = matches!(
                    call.args.get("language").and_then(Value::as_str),
                    Some("ts" | "typescript")
                );
                let timeout = call
                    .args
                    .get("timeout")
                    .and_then(Value::as_f64)
                    .filter(|t| *t >= 1.0)
                    .map(|t| std::time::Duration::from_millis(t as u64));
                // Inline code is unauthorized whoever runs it (§8.6).
                let frame = Frame::new(false, "sys_code".into(), frame.stack.clone());
                let request = Request::new(Entry::Inline {
                    code: code.to_owned(),
                    typescript,
                })
                .timeout(options_timeout(&config, timeout))
                .network(super::env::network(&config))
                .cancel(self.env.cancel_signal());
                Ok(Reply::Nested {
                    request,
                    frame,
                    inline: true,
                })
            }
            // Code callers never hold an approval task, so there is nothing to record after.
            CallOutcome::Deferred(call) => {
                let config = self.file.config_shared()?;
                match self.env.registry.detach(&call, &config, &caller) {
                    Some(future) => Ok(Reply::Detached(call.tool.clone(), future)),
                    None => Ok(Reply::Hosted(call)),
                }
            }
        }
    }

    /// A hosted tool's call from code (`adf.adf_shell(...)`), as this frame's caller, with a
    /// driver that carries out its detached inner calls (`curl`). Code inside it (`node`,
    /// `./x.ts`) is refused: code → shell → code would nest without bound, and the code can
    /// call `adf.sys_code` / `adf.sys_lambda` itself.
    async fn hosted(
        &mut self,
        frame: &Arc<Frame>,
        call: &DeferredCall,
    ) -> Result<Value, ToolError> {
        let caller = frame.caller();
        let registry = self.env.registry.clone();
        let mut driver = DetachedOnly {
            registry: &registry,
            waiting: self.waiting.as_ref(),
        };
        match registry
            .run_hosted(self.file, &caller, call, self.approver, &mut driver)
            .await
        {
            Some(result) => result.map(|value| for_code(&call.tool, value)),
            None => Err(ToolError::new(
                ErrorCode::InternalError,
                format!("'{}' cannot run from code", call.tool),
            )),
        }
    }

    /// `adf.sys_lambda({source, args})`: the §8.6 rules between a running frame and its
    /// target, gated by `code_execution.sys_lambda` (declared as a tool or not).
    fn nested_lambda(&mut self, frame: &Arc<Frame>, args: Value) -> Result<Reply, ToolError> {
        let caller = frame.caller();
        let config = self.code_config()?;
        if let Access::Refused(code, message) =
            access::method_access(&caller, &config, "sys_lambda")
        {
            return Err(ToolError::new(code, message));
        }
        let source = args.get("source").and_then(Value::as_str).ok_or_else(|| {
            ToolError::invalid("sys_lambda needs 'source': \"path/file.ts:functionName\"")
        })?;
        let input = match args.get("args") {
            None | Some(Value::Null) => json!({}),
            Some(v @ Value::Object(_)) => v.clone(),
            Some(_) => return Err(ToolError::invalid("sys_lambda 'args' must be an object")),
        };
        let target = LambdaRef::parse(source)?;
        let key = target.source();
        if frame.stack.contains(&key) {
            let chain: Vec<&str> = frame
                .stack
                .iter()
                .map(String::as_str)
                .chain(std::iter::once(key.as_str()))
                .collect();
            return Err(ToolError::new(
                ErrorCode::CircularCall,
                format!("circular lambda call: {}", chain.join(" → ")),
            ));
        }
        if frame.stack.len() >= MAX_LAMBDA_DEPTH {
            return Err(ToolError::new(
                ErrorCode::CircularCall,
                format!("lambda calls nest deeper than {MAX_LAMBDA_DEPTH}"),
            ));
        }
        let info = lambda_file(self.file, &target.path)?.ok_or_else(|| {
            ToolError::not_found(format!("no file {} in this agent", target.path))
        })?;
        if info.authorized && !frame.authorized() {
            return Err(requires_authorized_caller(&target.path));
        }
        let mut stack = frame.stack.clone();
        stack.push(key.clone());
        // Authorized callers propagate authorization by the target file's flag.
        let nested = Frame::new(info.authorized, key, stack);
        let request = Request::new(Entry::Lambda {
            path: target.path,
            function: target.function,
        })
        .args(input)
        .timeout(options_timeout(&config, None))
        .network(super::env::network(&config))
        .cancel(self.env.cancel_signal());
        Ok(Reply::Nested {
            request,
            frame: nested,
            inline: false,
        })
    }
}

/// The file a lambda path names, probing the extensions the sandbox probes for the entry.
pub(crate) fn lambda_file(file: &AdfFile, path: &str) -> Result<Option<FileInfo>, ToolError> {
    let path = path.trim_start_matches("./");
    let last = path.rsplit('/').next().unwrap_or(path);
    let mut candidates = vec![path.to_owned()];
    if let Some(stem) = path.strip_suffix(".js") {
        candidates.push(format!("{stem}.ts"));
    } else if let Some(stem) = path.strip_suffix(".mjs") {
        candidates.push(format!("{stem}.mts"));
    } else if !last.contains('.') {
        candidates.clear();
        for ext in [".ts", ".js", ".mts", ".mjs", "/index.ts", "/index.js"] {
            candidates.push(format!("{path}{ext}"));
        }
    }
    for candidate in candidates {
        if let Some(entry) = file.file_read(&candidate)? {
            return Ok(Some(entry.info));
        }
    }
    Ok(None)
}

/// Arguments as the tool takes them: a `Uint8Array` given as `fs_write` content (a `Buffer`
/// in the guide) is written as binary, without the caller naming an encoding.
fn from_code(name: &str, mut args: Value) -> Value {
    if name == "fs_write"
        && let Some(object) = args.as_object_mut()
        && let Some(content) = object.get("content")
        && let Some(encoded) = content
            .as_object()
            .filter(|o| o.len() == 1)
            .and_then(|o| o.get(adf_sandbox::BYTES_KEY))
            .and_then(Value::as_str)
            .map(str::to_owned)
    {
        object.insert("content".into(), Value::String(encoded));
        object.insert("encoding".into(), Value::String("base64".into()));
    }
    args
}

/// A tool result as code sees it: `db_query` gives its row objects (the guide iterates them).
fn for_code(name: &str, value: Value) -> Value {
    match (name, value) {
        ("db_query", Value::Object(mut result)) => match result.remove("rows") {
            Some(rows @ Value::Array(_)) => rows,
            Some(other) => {
                result.insert("rows".into(), other);
                Value::Object(result)
            }
            None => Value::Object(result),
        },
        (_, value) => value,
    }
}

/// `completed`, `denied` (the owner or a policy said no) or `failed`.
fn call_status<T>(result: &Result<T, ToolError>) -> &'static str {
    match result {
        Ok(_) => "completed",
        Err(error) if error.code == ErrorCode::Denied => "denied",
        Err(_) => "failed",
    }
}

pub(crate) fn host_error(error: ToolError) -> HostError {
    HostError::new(error.code.as_str(), error.message)
}

/// The [`DeferredDriver`] of a hosted call made from code: detached tools run as their
/// futures; code tools are refused (see [`Runner::hosted`]). While the hosted body waits (a
/// `sleep`, a `curl` in flight) it serves the agent's queued jobs with the run's file, as the
/// run itself does (waiting.rs).
struct DetachedOnly<'r> {
    registry: &'r ToolRegistry,
    waiting: Option<&'r super::waiting::Listening>,
}

impl DeferredDriver for DetachedOnly<'_> {
    fn drive<'a>(
        &'a mut self,
        file: &'a mut AdfFile,
        caller: &'a ToolCaller,
        call: &'a DeferredCall,
    ) -> HostedFuture<'a> {
        if matches!(call.tool.as_str(), "sys_code" | "sys_lambda") {
            let error = ToolError::new(
                ErrorCode::ToolError,
                format!(
                    "{} cannot run inside adf_shell called from code (code → shell → code does not nest); call adf.{} directly",
                    call.tool, call.tool
                ),
            );
            let recorded = self
                .registry
                .finish_deferred(file, call, &Err(error.clone()));
            return Box::pin(async move {
                recorded?;
                Err(error)
            });
        }
        Box::pin(super::waiting::run_detached_serving(
            self.registry,
            file,
            caller,
            call,
            self.waiting,
        ))
    }

    fn queued(&self) -> BoxFuture<'static, ()> {
        match self.waiting {
            Some(waiting) => Box::pin(waiting.queued(false)),
            None => Box::pin(std::future::pending()),
        }
    }

    fn serve_queued(&mut self, file: &mut AdfFile) {
        if let Some(waiting) = self.waiting {
            waiting.serve(file);
        }
    }
}
