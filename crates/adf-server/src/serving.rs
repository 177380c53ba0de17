//! The daemon's side of agent serving (`adf-net`): which agents exist ([`DaemonAgents`]),
//! how a public body is read (under the front door's [`BodyBudget`]), which paths go to
//! serving at all ([`is_served`]: under `/agents/{handle}/`, neither a control route of the
//! OpenAPI table nor a mesh route); the listener that serves them is `serve.rs`'s
//! (`serving_router`), above the daemon.
//!
//! Agent content has an origin of its own: the daemon serves it on a second port (the
//! control port + 1 by default, `adf daemon --serve-port`), never on the control port where
//! the Studio and the control API live, so a page an agent serves is never same-origin with
//! them. On the control port a served path answers 307 to the same path on the serving port
//! ([`elsewhere`]); the mesh endpoints (`inbox`, `card`, `health`) stay on the control port,
//! where other runtimes dial them. The serving listener checks the `Host` as the front door
//! does (DNS rebinding) and answers nothing but served paths.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use axum::body::Body;
use axum::http::{HeaderMap, Method};
use futures::future::BoxFuture;

use adf_net::{
    AgentDirectory, BodyHold, BodyReader, BodyRefused, ServedAgent, Serving, SignedBytes,
};
use adf_runtime::identity::LocalKeys;
use adf_runtime::messaging::{self, Origin};
use serde_json::{Value, json};

use crate::budget::BodyBudget;
use crate::hub::Hub;
use crate::mesh::on_port;

/// The hub's agents, as serving sees them (weakly: the hub owns serving).
#[derive(Debug)]
pub(crate) struct DaemonAgents {
    hub: Weak<Hub>,
    /// Per agent, the sweep for rows route lambdas wrote (see [`Sweeps`]).
    sweeps: Mutex<HashMap<String, Arc<Sweeps>>>,
}

/// One agent's sweeps after route lambdas. A sweep is a job on the agent's worker that reads
/// every row written since the last one, so lambdas that ran while one was in flight need
/// one more sweep, not one each, and back-to-back sweeps are paced [`SWEEP_PACE`] apart:
/// under load a sweep per request kept the worker (and the file) busy for requests that need
/// neither. A row a lambda wrote raises its triggers at most one pace late.
const SWEEP_PACE: std::time::Duration = std::time::Duration::from_millis(25);

#[derive(Debug, Default)]
struct Sweeps {
    running: AtomicBool,
    again: AtomicBool,
}

impl AgentDirectory for DaemonAgents {
    fn find(&self, key: &str) -> Option<ServedAgent> {
        let agent = self.hub.upgrade()?.agent(key).ok()?;
        Some(ServedAgent {
            id: agent.id.clone(),
            path: agent.path.clone(),
        })
    }

    fn lambda_ran(&self, served: &ServedAgent, through: Option<adf_net::RowsThrough>) {
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        let Ok(agent) = hub.agent(&served.id) else {
            return;
        };
        // Nothing of the agent reacts to new rows: no job on its worker, only the marks move
        // past the run's rows (so a trigger added later does not receive them).
        if let Some(through) = through
            && crate::dispatch::pass_unobserved_rows(&agent, through)
        {
            return;
        }
        let sweeps = Arc::clone(
            self.sweeps
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(served.id.clone())
                .or_default(),
        );
        sweeps.again.store(true, Ordering::Release);
        if sweeps.running.swap(true, Ordering::AcqRel) {
            return;
        }
        // Rows the lambda wrote through its guest connection raise their triggers.
        tokio::spawn(async move {
            loop {
                while sweeps.again.swap(false, Ordering::AcqRel) {
                    crate::watch::notice_new_rows(&hub, &agent).await;
                    if sweeps.again.load(Ordering::Acquire) {
                        tokio::time::sleep(SWEEP_PACE).await;
                    }
                }
                sweeps.running.store(false, Ordering::Release);
                // A lambda that ran between the last check and the store above found the
                // sweep still running: take the turn back for it.
                if !sweeps.again.load(Ordering::Acquire)
                    || sweeps.running.swap(true, Ordering::AcqRel)
                {
                    return;
                }
            }
        });
    }

    fn deliver(
        &self,
        served: &ServedAgent,
        wire: Vec<u8>,
        peer: Option<std::net::IpAddr>,
    ) -> BoxFuture<'static, Result<Value, (u16, String)>> {
        let hub = self.hub.upgrade();
        let id = served.id.clone();
        Box::pin(async move {
            let hub = hub.ok_or((503, "the daemon is shutting down".to_owned()))?;
            let agent = hub
                .agent(&id)
                .map_err(|_| (404, format!("agent '{id}' is not loaded")))?;
            let origin = peer.map_or(Origin::Loopback, Origin::of_peer);
            // The same ingress as `POST …/inbox` (MSG-50).
            match hub.mesh().accept(&agent, wire, origin, "ws").await {
                Ok(accepted) => Ok(json!({
                    "accepted": true,
                    "id": accepted.inbox_id,
                    "message_id": accepted.message_id,
                    "duplicate": accepted.duplicate,
                })),
                Err(refusal) => Err((refusal.status, refusal.reason)),
            }
        })
    }

    fn sign_as_agent(
        &self,
        served: &ServedAgent,
        bytes: SignedBytes,
    ) -> BoxFuture<'static, Option<(String, String)>> {
        let home = self.hub.upgrade().map(|hub| hub.home().clone());
        let path = served.path.clone();
        Box::pin(async move {
            let home = home?;
            tokio::task::spawn_blocking(move || {
                let mut file = adf_store::AdfFile::open_guest(&path).ok()?;
                let did = messaging::agent_did(&file).ok()??;
                let keys = LocalKeys::existing(&home).ok();
                let key = messaging::agent_key(&mut file, keys.as_ref()).ok()?;
                let signature = adf_crypto::sign(&key, &bytes(&did));
                Some((did, signature))
            })
            .await
            .ok()
            .flatten()
        })
    }
}

/// The directory of the hub behind `hub`.
pub(crate) fn directory(hub: Weak<Hub>) -> Arc<dyn AgentDirectory> {
    Arc::new(DaemonAgents {
        hub,
        sweeps: Mutex::new(HashMap::new()),
    })
}

/// `binding.*` events reach the agent's umbilical through one task, in the order the
/// bindings emitted them (started at the first event, so a hub built outside a runtime
/// works).
struct HubBindingEvents {
    hub: Weak<Hub>,
    queue: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedSender<(String, String, Value)>>>,
}

impl adf_net::streams::BindingEvents for HubBindingEvents {
    fn emit(&self, agent_id: &str, event_type: &str, payload: Value) {
        let mut queue = self
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if queue.is_none() {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            let (sender, mut receiver) =
                tokio::sync::mpsc::unbounded_channel::<(String, String, Value)>();
            let hub = self.hub.clone();
            runtime.spawn(async move {
                while let Some((agent_id, event_type, payload)) = receiver.recv().await {
                    let Some(hub) = hub.upgrade() else {
                        return;
                    };
                    // An unloaded agent's last `binding.terminated` has nobody to reach.
                    if let Ok(agent) = hub.agent(&agent_id) {
                        hub.emit(&agent, &event_type, "system:stream_bind", payload)
                            .await;
                    }
                }
            });
            *queue = Some(sender);
        }
        if let Some(queue) = queue.as_ref() {
            let _closed = queue.send((agent_id.to_owned(), event_type.to_owned(), payload));
        }
    }
}

/// Where the hub behind `hub` takes its bindings' events.
pub(crate) fn binding_events(hub: Weak<Hub>) -> Arc<dyn adf_net::streams::BindingEvents> {
    Arc::new(HubBindingEvents {
        hub,
        queue: std::sync::Mutex::new(None),
    })
}

/// Bodies of public requests count against the front door's budget.
#[derive(Debug)]
struct BudgetReader(BodyBudget);

impl BodyReader for BudgetReader {
    fn read(
        &self,
        headers: &HeaderMap,
        body: Body,
        limit: usize,
    ) -> BoxFuture<'static, Result<(Vec<u8>, BodyHold), BodyRefused>> {
        let budget = self.0.clone();
        let headers = headers.clone();
        Box::pin(async move {
            match budget.read(&headers, body, limit).await {
                Ok((bytes, hold)) => Ok((bytes, Box::new(hold) as BodyHold)),
                Err(refusal) => Err(refusal.response("the request body is too large")),
            }
        })
    }
}

/// Serving for `hub`'s agents, reading bodies under `budget`.
pub(crate) fn serving_for(hub: &Arc<Hub>, budget: BodyBudget) -> Arc<Serving> {
    Serving::new(
        directory(Arc::downgrade(hub)),
        Arc::new(BudgetReader(budget)),
        hub.tools(),
        adf_net::ServingLimits::default(),
    )
}

pub(crate) fn json_error(
    status: axum::http::StatusCode,
    message: &str,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    (status, axum::Json(json!({ "error": message }))).into_response()
}

/// The authority the request was sent to: the HTTP/2 `:authority`, else `Host`.
pub(crate) fn authority_of(request: &axum::extract::Request) -> Option<String> {
    if let Some(authority) = request.uri().authority() {
        return Some(authority.as_str().to_owned());
    }
    request
        .headers()
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// A served path asked on the control port: 307 to the same path and query on the serving
/// port, under the host name the client used (the front door checked it names this daemon).
/// Nothing an agent serves is ever answered on the control port's origin.
pub(crate) fn elsewhere(
    mesh: &crate::mesh::DaemonMesh,
    request: &axum::extract::Request,
) -> axum::response::Response {
    use axum::http::{HeaderValue, StatusCode, header};
    use axum::response::IntoResponse as _;
    let Some(port) = mesh.serve_port() else {
        return json_error(StatusCode::SERVICE_UNAVAILABLE, "the daemon is not serving");
    };
    let target = authority_of(request)
        .and_then(|authority| {
            let path = request
                .uri()
                .path_and_query()
                .map_or("/", axum::http::uri::PathAndQuery::as_str);
            on_port(&format!("http://{authority}{path}"), port)
        })
        .and_then(|url| HeaderValue::from_str(&url).ok().map(|value| (url, value)));
    let Some((url, location)) = target else {
        return json_error(
            StatusCode::BAD_REQUEST,
            "cannot tell where to send this request",
        );
    };
    let mut response = (
        StatusCode::TEMPORARY_REDIRECT,
        axum::Json(json!({
            "error": "agents' routes and files are served on the daemon's serving port, not on the control port",
            "location": url,
        })),
    )
        .into_response();
    response.headers_mut().insert(header::LOCATION, location);
    response
}

/// Whether `method path` goes to serving (see the module docs).
pub(crate) fn is_served(method: &Method, path: &str) -> bool {
    Serving::is_served_path(path)
        && !crate::openapi::is_control_path(path)
        && !crate::mesh::is_mesh_route(method, path)
}
