//! Test host: virtual files, recorded calls, scripted answers.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use adf_sandbox::{Entry, Host, HostError, Request, Sandbox, SandboxConfig, bytes_value};
use futures::future::BoxFuture;
use serde_json::{Value, json};

/// Records every call; answers by method name.
#[derive(Default)]
pub struct TestHost {
    pub files: Mutex<HashMap<String, String>>,
    pub calls: Mutex<Vec<(String, Value)>>,
    pub loads: Mutex<Vec<String>>,
    /// For `sys_lambda`: the sandbox to run nested lambdas in.
    pub sandbox: OnceLock<Sandbox>,
}

impl TestHost {
    pub fn new(files: &[(&str, &str)]) -> Arc<TestHost> {
        let h = TestHost::default();
        for (p, s) in files {
            h.files.lock().unwrap().insert(p.to_string(), s.to_string());
        }
        Arc::new(h)
    }

    pub fn put(&self, path: &str, source: &str) {
        self.files
            .lock()
            .unwrap()
            .insert(path.to_string(), source.to_string());
    }

    pub fn calls(&self) -> Vec<(String, Value)> {
        self.calls.lock().unwrap().clone()
    }
}

impl Host for TestHost {
    fn call(&self, method: &str, args: Value) -> BoxFuture<'static, Result<Value, HostError>> {
        self.calls
            .lock()
            .unwrap()
            .push((method.to_string(), args.clone()));
        let method = method.to_string();
        let sandbox = self.sandbox.get().cloned();
        let files: Vec<(String, String)> = self
            .files
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Box::pin(async move {
            match method.as_str() {
                "echo" => Ok(args),
                "add" => Ok(json!(
                    args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)
                )),
                "text" => Ok(args["text"].clone()),
                "raw" => Ok(adf_sandbox::raw_text(
                    args["text"].as_str().unwrap_or_default().to_owned(),
                )),
                "fail" => Err(HostError::new(
                    args["code"].as_str().unwrap_or("TOOL_ERROR"),
                    args["message"].as_str().unwrap_or("failed"),
                )),
                "bytes" => Ok(json!({ "body": bytes_value(&[0, 1, 2, 255]), "status": 200 })),
                "never" => futures::future::pending().await,
                "sys_lambda" => {
                    let sandbox =
                        sandbox.ok_or_else(|| HostError::new("INTERNAL_ERROR", "no sandbox"))?;
                    let host = TestHost::new(&[]);
                    for (k, v) in files {
                        host.put(&k, &v);
                    }
                    let source = args["source"].as_str().unwrap_or_default().to_string();
                    let req = Request::new(Entry::lambda(&source)).args(args["args"].clone());
                    sandbox
                        .run(req, host)
                        .await
                        .map(|o| o.value)
                        .map_err(|e| HostError::new(e.proxy_code(), e.to_string()))
                }
                _ => Err(HostError::new(
                    "NOT_FOUND",
                    format!("unknown tool: {method}"),
                )),
            }
        })
    }

    fn load_module(&self, path: &str) -> BoxFuture<'static, Option<String>> {
        self.loads.lock().unwrap().push(path.to_string());
        let found = self.files.lock().unwrap().get(path).cloned();
        Box::pin(async move { found })
    }

    fn fetch(&self, request: Value) -> BoxFuture<'static, Result<Value, HostError>> {
        self.calls
            .lock()
            .unwrap()
            .push(("<fetch>".to_string(), request.clone()));
        Box::pin(async move {
            Ok(json!({
                "status": 200,
                "headers": { "Content-Type": "application/json" },
                "body": format!("{{\"url\":{}}}", request["url"]),
            }))
        })
    }
}

pub async fn sandbox() -> Sandbox {
    Sandbox::new(SandboxConfig::default()).await.unwrap()
}

pub fn inline(code: &str) -> Request {
    Request::new(Entry::inline(code)).timeout(Duration::from_secs(5))
}

pub fn lambda(source: &str, args: Value) -> Request {
    Request::new(Entry::lambda(source))
        .args(args)
        .timeout(Duration::from_secs(5))
}
