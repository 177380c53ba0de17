//! `adf-runtime`: an agent in motion.
//!
//! Principal pieces so far:
//! - [`bench`](mod@bench): the turn-overhead bench behind `adf bench turns`, with a provider answering like
//!   the reference's mock.
//! - [`code`]: agent code against its file: `sys_code`, `sys_lambda` and the lambdas of
//!   triggers, timers, routes and middleware, with the `adf` proxy's semantics and §8.6
//!   authorization, serviced on the task that owns the file.
//! - [`executor`]: the turn loop of each loop (§6, §13.1): prompt snapshots and context rows,
//!   streaming requests, tool calls with approvals, `say`/`ask`, turn endings, checkpoints and
//!   crash recovery, compaction, and the in-process loop pool for inner loops.
//! - [`fetch`]: the HTTP engine of `sys_fetch` and the sandbox's native `fetch`, with the
//!   §5.6 egress rules checked on every resolved address and redirect hop.
//! - [`home`]: the runtime's home directory (`$ADF_HOME`, default `~/.adf`) with the owner and
//!   runtime identities, kept outside every agent file.
//! - [`identity`]: provisioning, unlocking, sealing and claiming agent identities on top of
//!   `adf-crypto` and `adf-store`.
//! - [`middleware`]: the §12.3 middleware chains at the inbox, outbox and fetch points.
//! - [`prompt`]: system prompt assembly and templating, and the per-turn dynamic instructions.
//! - [`triggers`]: trigger targets, filters, timing windows, state gating and timer firing.
//! - [`tools`]: the tool registry and the access model (enabled / visible / restricted /
//!   locked, authorized code, approvals).
//!
//! Model requests go through the `adf-providers` crate (`Provider`, `Resolver`), which knows
//! nothing of agent files: the executor hands it the config and the unsealed key.

pub mod bench;
pub mod code;
pub mod executor;
pub mod fetch;
pub mod home;
pub mod identity;
pub mod messaging;
pub mod middleware;
pub mod prompt;
mod provider_log;
pub mod schedule;
pub mod tools;
pub mod triggers;
