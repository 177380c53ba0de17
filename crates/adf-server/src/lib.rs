//! `adf-server`: the daemon. Many agents in one process, behind the reference daemon's HTTP
//! API (same paths, bodies and status codes) and its umbilical event stream.
//!
//! Principal pieces:
//! - [`Daemon`] (daemon.rs): the public handle, a thin composition of the agent registry
//!   (`registry`: loaded agents by canonical path, each an actor owned by its `StoreHandle`;
//!   lookup by id/handle/name; the steps of load and unload) and the subsystems, which share
//!   a `hub::Hub` (registry, event bus with per-agent `seq` persisted in meta
//!   `runtime_umbilical_next_seq`, tools, timer wakes, shutdown) and never name `Daemon`.
//! - [`events`]: the bounded ring of SSE frames with cursors, `since` replay and the `seq`
//!   allocator.
//! - `api`: the axum router and handlers (agents, config, files, meta, timers, inbox, outbox,
//!   tasks, logs, state, settings, `/events`).
//! - [`frontdoor`]: the middleware in front of every route (Host, browser origin, token,
//!   JSON content type) and the in-flight budget for unauthenticated bodies; [`token`]: the
//!   per-installation token in `$ADF_HOME/daemon-token`.
//! - [`openapi`]: the document served at `/openapi.json`, listing what this daemon implements.
//! - [`serve`]: binding, the front door's settings ([`serve::FrontDoor`]), graceful shutdown.
//! - [`client`]: an API client for the `adf` client commands and tests.
//! - [`memory`]: resident-memory measurement for the idle-agent bench.
//!
//! - [`dispatch`]: trigger dispatch (targets, gating, filters, timing windows) through a
//!   bounded queue per agent to system lambdas and agent turns.
//! - [`scheduler`]: the due-time timer scheduler (one task for all agents) and the delivery
//!   of fires to system lambdas and agent turns.
//! - `lambdas`: the system-scope lambda host (deliveries, timer fires and taps run there).
//! - `turns`: the turn host; chat, trigger deliveries, timer fires and autostart loops all
//!   start their turns there, and it runs and aborts them.
//! - [`review`]: the review gate (what an agent file can do, the owner's accepted digest in
//!   the home's settings) and the autostart scan of tracked directories.
//! - [`taps`]: umbilical taps (§5.24) and `emit_event`'s `custom.*` events on the bus.
//! - [`mesh`]: agent-to-agent delivery between hosted agents and what the public mesh routes
//!   (`inbox`, `card`, `health`, handled in `api/mesh_routes.rs`) accept; arrivals raise
//!   `on_inbox` through the trigger sweep.
//! - `model`: the one decision of a turn's model (`TurnModel`), shared by chat's 503 check and
//!   the turn it starts.
//! - [`live`]: each agent's live feed of its turns (streaming text, tool calls) for the
//!   Studio, whose page `adf-studio` serves at `/` (`api/studio.rs` has its own routes).
//! - [`hil`]: the owner's side of daemon turns: approvals and `ask` answers a running turn
//!   waits for (answered over HTTP without the agent's worker), abort, suspend answers.
//!
//! `POST /agents/{id}/chat` starts an owner turn (202, or 503 when no model is reachable) and
//! `POST /agents/{id}/trigger` dispatches an event (202); turns run through the executor's
//! `LoopPool`, so `loop_send` wakes and autostart loops are served.

mod adapters;
pub mod api;
mod budget;
pub mod client;
pub mod connections;
mod custom_events;
pub mod daemon;
pub mod dispatch;
pub mod error;
pub mod events;
pub mod frontdoor;
pub mod hil;
mod hub;
mod lambdas;
pub mod lan;
mod lan_peers;
pub mod live;
pub mod memory;
pub mod mesh;
mod model;
mod network;
pub mod openapi;
mod registry;
pub mod review;
pub mod scheduler;
pub mod serve;
mod serving;
pub mod sessions;
pub mod settings;
mod shell_runs;
mod support;
pub mod taps;
pub mod token;
mod turns;
mod watch;

pub use daemon::{Agent, Daemon, Loaded};
pub use error::{ApiError, ServerError};
pub use serve::{FrontDoor, RunningServer};
