//! The OpenAPI document this daemon serves at `/openapi.json`: the operations it implements,
//! in the reference's paths, with the status codes it really answers (the front door's 401,
//! 403, 415 and 421 included). The operations of capabilities this runtime does not have yet
//! (`api::unsupported::OPERATIONS`) are listed with their one answer, 501 `NOT_SUPPORTED`.

use serde_json::{Map, Value, json};

struct Op {
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    tag: &'static str,
    /// Success status first, then the error statuses.
    statuses: &'static [u16],
    query: &'static [&'static str],
}

const fn op(
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    tag: &'static str,
    statuses: &'static [u16],
    query: &'static [&'static str],
) -> Op {
    Op {
        method,
        path,
        summary,
        tag,
        statuses,
        query,
    }
}

const OPS: &[Op] = &[
    op(
        "get",
        "/openapi.json",
        "Return this OpenAPI document",
        "Spec",
        &[200],
        &[],
    ),
    op(
        "get",
        "/health",
        "Daemon liveness check (public)",
        "Health",
        &[200],
        &[],
    ),
    op(
        "get",
        "/login",
        "Spend a one-time login code (the link `adf daemon` prints or POST /auth/login-codes makes; 5 minutes, single use) for the adf_session cookie of a 12-hour session (HttpOnly, SameSite=Strict, Max-Age) and redirect to / (public)",
        "Auth",
        &[303, 401],
        &["code"],
    ),
    op(
        "post",
        "/auth/login-codes",
        "Make a one-time login code and its /login path (bearer token only; 403 TOKEN_REQUIRED for a browser session)",
        "Auth",
        &[201, 403],
        &[],
    ),
    op(
        "get",
        "/auth/sessions",
        "List the live browser sessions (id, createdAt, expiresAt, lastSeenAt, current)",
        "Auth",
        &[200],
        &[],
    ),
    op(
        "delete",
        "/auth/sessions",
        "End every browser session and spend every unused login code",
        "Auth",
        &[200],
        &[],
    ),
    op(
        "delete",
        "/auth/sessions/{id}",
        "End one browser session (404 SESSION_NOT_FOUND)",
        "Auth",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/events",
        "Stream daemon events with Server-Sent Events (cursor, since replay, heartbeat)",
        "Events",
        &[200, 400],
        &["agentId", "since"],
    ),
    op(
        "get",
        "/settings",
        "Read daemon settings ($ADF_HOME/settings.json)",
        "Settings",
        &[200, 500],
        &[],
    ),
    op(
        "patch",
        "/settings",
        "Merge settings values",
        "Settings",
        &[200, 400, 500],
        &[],
    ),
    op(
        "get",
        "/settings/{key}",
        "Read one daemon setting",
        "Settings",
        &[200, 500],
        &[],
    ),
    op(
        "put",
        "/settings/{key}",
        "Set one daemon setting",
        "Settings",
        &[200, 400, 500],
        &[],
    ),
    op(
        "get",
        "/agents",
        "List loaded agents",
        "Agents",
        &[200],
        &[],
    ),
    op(
        "post",
        "/agents/load",
        "Load an agent by .adf file path (a missing path is a 404 and creates nothing; requireReview: 403 AGENT_REVIEW_REQUIRED unless the owner accepted the file's current review digest)",
        "Agents",
        &[200, 400, 403, 404, 409, 422, 500],
        &[],
    ),
    op(
        "post",
        "/agents/autostart",
        "Scan tracked directories (maxDepth levels) and load the reviewed agents with autostart: true",
        "Agents",
        &[200, 400, 500],
        &[],
    ),
    op(
        "get",
        "/agents/review",
        "Read review information for an .adf file (read-only: the file is never changed)",
        "Review",
        &[200, 400, 404, 422, 500],
        &["filePath"],
    ),
    op(
        "post",
        "/agents/review/accept",
        "Mark an .adf file's agent as reviewed (its current digest, kept in $ADF_HOME/settings.json)",
        "Review",
        &[200, 400, 404, 422, 500],
        &[],
    ),
    op(
        "get",
        "/agents/{id}",
        "Get a loaded agent reference",
        "Agents",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/runtime/mcp",
        "Every MCP server process slot of this daemon (agent, server, running)",
        "Runtime",
        &[200],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/runtime/mcp",
        "One agent's MCP servers and tool declarations, each with whether its process runs",
        "Runtime",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/mcp",
        "Alias for /agents/{id}/runtime/mcp",
        "Runtime",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/status",
        "Get agent status",
        "Agents",
        &[200, 404],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/start",
        "Start a loaded agent, or load again one stopped in this process, or load it from the first file in the tracked directories that declares it (id, handle or name)",
        "Agents",
        &[200, 404, 500],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/stop",
        "Stop and unload an agent (file closed cleanly)",
        "Agents",
        &[200, 404, 500],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/unload",
        "Alias for stop",
        "Agents",
        &[200, 404, 500],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/state",
        "Move the agent's live display state (not persisted)",
        "Control",
        &[200, 400, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/config",
        "Read agent config",
        "Resources",
        &[200, 404],
        &[],
    ),
    op(
        "put",
        "/agents/{id}/config",
        "Replace agent config as the owner",
        "Resources",
        &[200, 400, 404, 500],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/files",
        "List agent files",
        "Resources",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/files/content",
        "Read one agent file (utf-8 or base64)",
        "Resources",
        &[200, 400, 404],
        &["path"],
    ),
    op(
        "put",
        "/agents/{id}/files/content",
        "Write one agent file as the owner",
        "Resources",
        &[200, 400, 404, 500],
        &["path"],
    ),
    op(
        "delete",
        "/agents/{id}/files/content",
        "Delete one agent file as the owner; a read_only or no_delete file only with force=true (409 FILE_PROTECTED otherwise)",
        "Resources",
        &[200, 400, 404, 409, 500],
        &["path", "force"],
    ),
    op(
        "patch",
        "/agents/{id}/files/protection",
        "Set file protection",
        "Resources",
        &[200, 400, 404, 500],
        &[],
    ),
    op(
        "patch",
        "/agents/{id}/files/authorized",
        "Set file authorization (trust as code)",
        "Resources",
        &[200, 400, 404, 500],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/meta",
        "List metadata entries",
        "Resources",
        &[200, 404],
        &[],
    ),
    op(
        "put",
        "/agents/{id}/meta/{key}",
        "Set metadata value",
        "Resources",
        &[200, 400, 404, 500],
        &[],
    ),
    op(
        "delete",
        "/agents/{id}/meta/{key}",
        "Delete metadata value",
        "Resources",
        &[200, 404, 500],
        &[],
    ),
    op(
        "patch",
        "/agents/{id}/meta/{key}/protection",
        "Set metadata protection",
        "Resources",
        &[200, 400, 404, 500],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/timers",
        "List timers",
        "Resources",
        &[200, 404],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/timers",
        "Add timer (mode once_at|once_delay|interval|cron)",
        "Resources",
        &[200, 400, 404, 500],
        &[],
    ),
    op(
        "delete",
        "/agents/{id}/timers/{timerId}",
        "Delete timer",
        "Resources",
        &[200, 400, 404, 500],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/inbox",
        "List inbox messages",
        "Resources",
        &[200, 400, 404],
        &["status"],
    ),
    op(
        "post",
        "/agents/{id}/inbox",
        "Deliver an ALF message to the agent with this handle (public: no token; the agent's visibility, allow/block lists and signature rules decide). 503 with Retry-After when the daemon-wide budget for unauthenticated bodies in flight is spent; 408 for a body that takes more than 30 s; 503 MESH_DISABLED while the owner has the mesh disabled (POST /network/mesh/disable)",
        "Mesh",
        &[202, 400, 403, 404, 408, 413, 503],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/adapters/{adapterType}/webhook",
        "A platform's webhook verification for a channel adapter that is pushed to (WhatsApp: hub.challenge echoed for the right hub.verify_token; public: no token)",
        "Mesh",
        &[200, 403, 404, 503],
        &["hub.mode", "hub.verify_token", "hub.challenge"],
    ),
    op(
        "post",
        "/agents/{id}/adapters/{adapterType}/webhook",
        "A platform's push to a channel adapter (WhatsApp Cloud API notifications; public: no token, the adapter checks X-Hub-Signature-256 before storing anything: 401 otherwise). 503 while the adapter is not running (the platform retries)",
        "Mesh",
        &[200, 400, 401, 404, 408, 413, 503],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/card",
        "The agent's signed card, for requesters its visibility admits (public)",
        "Mesh",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/health",
        "{ok, handle, did} for requesters the agent's visibility admits (public)",
        "Mesh",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/outbox",
        "List outbox messages",
        "Resources",
        &[200, 400, 404],
        &["status"],
    ),
    op(
        "get",
        "/agents/{id}/tasks",
        "List agent tasks and approvals",
        "Human In The Loop",
        &[200, 400, 404],
        &["status", "limit"],
    ),
    op(
        "get",
        "/agents/{id}/tasks/{taskId}",
        "Read one task",
        "Human In The Loop",
        &[200, 404],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/tasks/{taskId}/resolve",
        "Approve or deny a pending task as the owner (a running turn waiting on it continues at once)",
        "Human In The Loop",
        &[200, 400, 404, 409, 500],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/asks",
        "List the ask requests running turns wait on",
        "Human In The Loop",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/logs",
        "Read recent agent logs",
        "Resources",
        &[200, 400, 404],
        &["limit", "origin", "event"],
    ),
    op(
        "get",
        "/agents/{id}/logs/after",
        "Read agent logs after an id",
        "Resources",
        &[200, 400, 404],
        &["afterId"],
    ),
    op(
        "get",
        "/agents/{id}/umbilical/events",
        "Read the agent's umbilical replay log (umbilical.log; in memory, after a seq)",
        "Events",
        &[200, 400, 404],
        &["since", "limit"],
    ),
    op(
        "get",
        "/agents/{id}/chat",
        "Read display chat history of a loop (newest `limit` rows, default 50, 1-500; `loop` defaults to main)",
        "Chat",
        &[200, 400, 404],
        &["limit", "loop"],
    ),
    op(
        "get",
        "/agents/{id}/loop",
        "Read a page of a loop's transcript (limit default 50, clamped 1-500; offset defaults to the last page; loop defaults to main)",
        "Resources",
        &[200, 400, 404],
        &["limit", "offset", "loop"],
    ),
    op(
        "post",
        "/agents/{id}/chat",
        "Start an owner chat turn (503 when no model is reachable)",
        "Chat",
        &[202, 400, 404, 503],
        &[],
    ),
    op(
        "delete",
        "/agents/{id}/chat",
        "Clear a loop's persisted transcript as the owner (audit snapshot when context.audit.loop; 409 while a turn runs)",
        "Chat",
        &[200, 404, 409, 500],
        &["loop"],
    ),
    op(
        "post",
        "/agents/{id}/trigger",
        "Dispatch an event to the agent's trigger targets",
        "Chat",
        &[202, 400, 404],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/abort",
        "Abort the turns in flight (pending approvals denied, asks unanswered); the agent stays usable",
        "Control",
        &[200, 404],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/asks/{requestId}/respond",
        "Answer an ask a running turn waits on",
        "Human In The Loop",
        &[200, 400, 404],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/suspend/respond",
        "Resume a suspended agent (resume: true → active) or stop it (false → off)",
        "Human In The Loop",
        &[200, 400, 404, 500],
        &[],
    ),
];

/// (method, path, capability, what): every operation `api::unsupported` answers with 501
/// `NOT_SUPPORTED` (the package installs of adapters and sandbox share their path with a
/// listing, so `api/admin.rs` routes those).
pub const UNSUPPORTED_OPERATIONS: &[(&str, &str, &str, &str)] = &[
    (
        "get",
        "/compute/containers",
        "compute",
        "compute environments",
    ),
    ("post", "/compute/start", "compute", "compute environments"),
    ("post", "/compute/stop", "compute", "compute environments"),
    (
        "post",
        "/compute/destroy",
        "compute",
        "compute environments",
    ),
    ("post", "/compute/setup", "compute", "compute environments"),
    (
        "get",
        "/compute/exec-log",
        "compute",
        "compute environments",
    ),
    (
        "get",
        "/compute/containers/{name}",
        "compute",
        "compute environments",
    ),
    (
        "post",
        "/compute/containers/{name}/start",
        "compute",
        "compute environments",
    ),
    (
        "post",
        "/compute/containers/{name}/stop",
        "compute",
        "compute environments",
    ),
    (
        "post",
        "/compute/containers/{name}/destroy",
        "compute",
        "compute environments",
    ),
    (
        "get",
        "/auth/chatgpt/status",
        "subscription-auth",
        "ChatGPT subscription login",
    ),
    (
        "post",
        "/auth/chatgpt/start",
        "subscription-auth",
        "ChatGPT subscription login",
    ),
    (
        "post",
        "/auth/chatgpt/complete",
        "subscription-auth",
        "ChatGPT subscription login",
    ),
    (
        "post",
        "/auth/chatgpt/logout",
        "subscription-auth",
        "ChatGPT subscription login",
    ),
    (
        "get",
        "/auth/grok/status",
        "subscription-auth",
        "Grok subscription login",
    ),
    (
        "post",
        "/auth/grok/start",
        "subscription-auth",
        "Grok subscription login",
    ),
    (
        "post",
        "/auth/grok/logout",
        "subscription-auth",
        "Grok subscription login",
    ),
    (
        "post",
        "/admin/mcp/packages/npm",
        "package-install",
        "installing MCP packages from the daemon",
    ),
    (
        "delete",
        "/admin/mcp/packages/npm",
        "package-install",
        "installing MCP packages from the daemon",
    ),
    (
        "post",
        "/admin/mcp/packages/python",
        "package-install",
        "installing MCP packages from the daemon",
    ),
    (
        "delete",
        "/admin/mcp/packages/python",
        "package-install",
        "installing MCP packages from the daemon",
    ),
    (
        "post",
        "/admin/sandbox/packages/check",
        "package-install",
        "checking sandbox packages",
    ),
    (
        "post",
        "/network/server/start",
        "mesh-server",
        "a mesh server apart from the daemon's listener",
    ),
    (
        "post",
        "/network/server/stop",
        "mesh-server",
        "a mesh server apart from the daemon's listener",
    ),
    (
        "post",
        "/network/server/restart",
        "mesh-server",
        "a mesh server apart from the daemon's listener",
    ),
];

/// Whether `path` is one of the daemon's own operations (any method): its segments match an
/// operation's path, a `{name}` segment matching any one segment. The front door sends every
/// other `/agents/{handle}/…` path to agent serving (`crate::serving`).
pub fn is_control_path(path: &str) -> bool {
    // No trailing-slash folding: `/agents/{handle}/` is the agent's public index.
    let given: Vec<&str> = path.split('/').collect();
    control_patterns().iter().any(|pattern| {
        pattern.len() == given.len()
            && pattern.iter().zip(&given).all(|(want, got)| {
                (want.starts_with('{') && want.ends_with('}') && !got.is_empty()) || want == got
            })
    })
}

/// Every documented operation's path, split into segments once: the front door asks
/// [`is_control_path`] on every request under `/agents/`, served agent routes included.
fn control_patterns() -> &'static [Vec<&'static str>] {
    static PATTERNS: std::sync::OnceLock<Vec<Vec<&'static str>>> = std::sync::OnceLock::new();
    PATTERNS.get_or_init(|| {
        let unsupported = UNSUPPORTED_OPERATIONS.iter().map(|&(_, path, _, _)| path);
        OPS.iter()
            .chain(MORE_OPS)
            .map(|op| op.path)
            .chain(unsupported)
            .map(|path| path.split('/').collect())
            .collect()
    })
}

fn description(status: u16) -> &'static str {
    match status {
        200 => "Success",
        201 => "Created",
        202 => "Accepted",
        303 => "Logged in: the adf_session cookie is set; redirect to /",
        400 => "Bad request (a path that is not an .adf file included)",
        401 => "Missing or invalid token (Authorization: Bearer, or the adf_session cookie)",
        403 => {
            "Review required (AGENT_REVIEW_REQUIRED), a protected write, or a cross-origin browser request"
        }
        404 => "Unknown agent, file, task or timer",
        409 => {
            "Conflict (task not pending, agent id already loaded, a turn is running, or a protected file deleted without force)"
        }
        408 => "The request body did not arrive in time",
        413 => "Body too large",
        415 => "A request body must be application/json",
        421 => "The Host header does not name this daemon",
        422 => {
            "The file's stored data does not parse, e.g. its config JSON (AGENT_FILE_MALFORMED); nothing was changed"
        }
        500 => "Runtime error",
        501 => "Not supported yet",
        503 => "Unavailable (see the operation's summary); retry later",
        _ => "Response",
    }
}

/// The operations added with the Studio issue (api `contents`, `runtime`, `network`,
/// `identity`, `attach`, `admin`).
const MORE_OPS: &[Op] = &[
    op(
        "get",
        "/agents/{id}/document",
        "Read the primary document (README.md)",
        "Resources",
        &[200, 404],
        &[],
    ),
    op(
        "put",
        "/agents/{id}/document",
        "Write the primary document {content}",
        "Resources",
        &[200, 400, 403, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/mind",
        "Read mind.md",
        "Resources",
        &[200, 404],
        &[],
    ),
    op(
        "put",
        "/agents/{id}/mind",
        "Write mind.md {content}",
        "Resources",
        &[200, 400, 403, 404],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/files/rename",
        "Rename a file {oldPath, newPath} (a protected file keeps its name: 403; a taken name: 400)",
        "Resources",
        &[200, 400, 403, 404],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/files/rename-folder",
        "Move every file under {oldPrefix} to {newPrefix}: {agentId, success, count}",
        "Resources",
        &[200, 400, 403, 404],
        &[],
    ),
    op(
        "delete",
        "/agents/{id}/inbox",
        "Delete every inbox message: {agentId, success, deleted}",
        "Resources",
        &[200, 404],
        &[],
    ),
    op(
        "put",
        "/agents/{id}/timers/{timerId}",
        "Rewrite a timer (the POST /timers body); it keeps its id and run count",
        "Resources",
        &[200, 400, 404],
        &[],
    ),
    op(
        "delete",
        "/agents/{id}/logs",
        "Delete every persisted log row: {agentId, success, deleted}",
        "Resources",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/tables",
        "List the agent's local_* tables with row counts",
        "Resources",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/tables/{table}",
        "A page of a local_* table {columns, rows} (another table: 400)",
        "Resources",
        &[200, 400, 404],
        &["limit", "offset"],
    ),
    op(
        "delete",
        "/agents/{id}/tables/{table}",
        "Drop a local_* table",
        "Resources",
        &[200, 400, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/usage",
        "Token usage persisted on the agent's loop rows, by model",
        "Resources",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/runtime",
        "Per-agent runtime diagnostics: status, adapters, MCP servers and WebSocket connections as configured, triggers",
        "Runtime",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/triggers",
        "Configured triggers and the display state",
        "Runtime",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/runtime/triggers",
        "Configured triggers and the display state",
        "Runtime",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/adapters",
        "Channel adapters configured in the file {configured} and their live states {states}",
        "Runtime",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/runtime/adapters",
        "Channel adapters configured in the file {configured} and their live states {states}",
        "Runtime",
        &[200, 404],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/runtime/adapters",
        "Attach or update a channel adapter {adapterType, config}: sets adapters.<type> (checked); the adapters restart",
        "Credentials",
        &[200, 400, 403, 404],
        &[],
    ),
    op(
        "delete",
        "/agents/{id}/adapters/{adapterType}",
        "Detach a channel adapter: removes adapters.<type> and its adapter:<type>: credentials",
        "Credentials",
        &[200, 400, 403, 404],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/adapters/{adapterType}/test",
        "Check an adapter's credential against its platform without starting it: {ok, …} or {ok: false, problem, error} (this daemon's own, for adf adapters test)",
        "Runtime",
        &[200, 400, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/identities",
        "Identity purposes and how they are stored (never a value)",
        "Resources",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/identity",
        "Identity purpose names",
        "Identity",
        &[200, 404],
        &["prefix"],
    ),
    op(
        "get",
        "/agents/{id}/identity/entries",
        "Identity purposes and how they are stored (never a value)",
        "Identity",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/identity/did",
        "The agent's DID (null when reset)",
        "Identity",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/identity/password",
        "Whether the credentials envelope has a password slot and is unlocked here",
        "Identity",
        &[200, 404],
        &[],
    ),
    op(
        "put",
        "/agents/{id}/identity/password",
        "Add or replace the credentials envelope's password slot {password}",
        "Identity",
        &[200, 400, 404, 409],
        &[],
    ),
    op(
        "delete",
        "/agents/{id}/identity/password",
        "Remove the credentials envelope's password slot (refused when it is the only slot); {agentId, success, removed}",
        "Identity",
        &[200, 400, 404, 409],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/identity/password/unlock",
        "Open the credentials envelope with its password {password} and add this installation's slot (wrong password: 400 WRONG_PASSWORD)",
        "Identity",
        &[200, 400, 404, 409],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/identity/password/change",
        "Replace the password slot {newPassword}",
        "Identity",
        &[200, 400, 404, 409],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/identity/generate-keys",
        "Re-key the agent (old DID to history): {agentId, success, did}",
        "Identity",
        &[200, 404, 409],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/identity/wipe",
        "Reset the identity (DID to history, key rows and identity envelope removed)",
        "Identity",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/identity/{purpose}",
        "Refused: 403 SECRET_NOT_EXPORTED (values never leave the daemon)",
        "Identity",
        &[403, 404],
        &[],
    ),
    op(
        "put",
        "/agents/{id}/identity/{purpose}",
        "Seal a credential {value, code_access?} (locked envelope: 409 IDENTITY_LOCKED)",
        "Identity",
        &[200, 400, 404, 409],
        &[],
    ),
    op(
        "delete",
        "/agents/{id}/identity/{purpose}",
        "Delete a credential (crypto:* rows: 400)",
        "Identity",
        &[200, 400, 404],
        &[],
    ),
    op(
        "patch",
        "/agents/{id}/identity/{purpose}/code-access",
        "Let agent code read a credential or not {code_access}",
        "Identity",
        &[200, 400, 404],
        &[],
    ),
    op(
        "delete",
        "/agents/{id}/identity-prefix",
        "Delete every credential under a prefix: {agentId, prefix, deleted}",
        "Identity",
        &[200, 400, 404],
        &["prefix"],
    ),
    op(
        "post",
        "/agents/{id}/providers",
        "Attach (or merge) a provider entry {id, type, ...} to the config (no apiKey: seal it with PUT .../credential)",
        "Credentials",
        &[200, 400, 403, 404],
        &[],
    ),
    op(
        "delete",
        "/agents/{id}/providers/{providerId}",
        "Detach a provider and delete its credentials",
        "Credentials",
        &[200, 400, 403, 404],
        &[],
    ),
    op(
        "put",
        "/agents/{id}/providers/{providerId}/credential",
        "Seal the agent's key for a provider {value}",
        "Credentials",
        &[200, 400, 404, 409],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/providers/{providerId}/credentials",
        "Which credentials of a provider are set (never values)",
        "Credentials",
        &[200, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/mcp/credentials",
        "Which credentials of an MCP package are set (never values)",
        "Credentials",
        &[200, 400, 404],
        &["npmPackage"],
    ),
    op(
        "put",
        "/agents/{id}/mcp/credentials",
        "Seal an MCP server credential {npmPackage, envKey, value}",
        "Credentials",
        &[200, 400, 404, 409],
        &[],
    ),
    op(
        "post",
        "/agents/{id}/mcp/servers",
        "Attach an MCP server {name, ...} to the config",
        "Credentials",
        &[200, 400, 403, 404],
        &[],
    ),
    op(
        "delete",
        "/agents/{id}/mcp/servers/{serverName}",
        "Detach an MCP server and delete its credentials",
        "Credentials",
        &[200, 400, 403, 404],
        &[],
    ),
    op(
        "get",
        "/agents/{id}/adapters/credentials",
        "Which credentials of an adapter are set (never values)",
        "Credentials",
        &[200, 400, 404],
        &["adapterType"],
    ),
    op(
        "put",
        "/agents/{id}/adapters/credentials",
        "Seal an adapter credential {adapterType, envKey, value}",
        "Credentials",
        &[200, 400, 404, 409],
        &[],
    ),
    op(
        "get",
        "/runtime",
        "Runtime diagnostics: daemon, settings, providers, auth, MCP, adapters, network, compute, agents",
        "Runtime",
        &[200, 500],
        &[],
    ),
    op(
        "get",
        "/compute/status",
        "Compute: which isolation tool is installed (bubblewrap, Podman), the sandbox's network and limits",
        "Runtime",
        &[200],
        &[],
    ),
    op(
        "get",
        "/runtime/settings",
        "A summary of the settings file (no prompt or key values)",
        "Runtime",
        &[200, 500],
        &[],
    ),
    op(
        "get",
        "/runtime/providers",
        "Runtime providers (keys as hasApiKey) and the provider of each loaded agent",
        "Runtime",
        &[200, 500],
        &[],
    ),
    op(
        "post",
        "/runtime/providers/{providerId}/test",
        "Test a runtime provider with one tiny model request: {ok, reply, latencyMs} or {ok: false, error} (this daemon's own, for the Studio)",
        "Runtime",
        &[200, 400, 404, 500],
        &[],
    ),
    op(
        "get",
        "/runtime/auth",
        "Provider keys present or not; subscription logins supported: false",
        "Runtime",
        &[200, 500],
        &[],
    ),
    op(
        "get",
        "/runtime/adapters",
        "The built-in channel adapters {adapters: [{id, type, package, storage, env}]} and each loaded agent's adapter states",
        "Runtime",
        &[200, 500],
        &[],
    ),
    op(
        "get",
        "/runtime/usage",
        "Token usage of the loaded agents' loop rows by provider, model and day",
        "Runtime",
        &[200, 500],
        &[],
    ),
    op(
        "get",
        "/runtime/network",
        "Host, mesh status and each agent's messaging and serving configuration",
        "Runtime",
        &[200, 500],
        &[],
    ),
    op(
        "get",
        "/runtime/models",
        "A provider's model ids, fetched from the vendor {provider, models, error?}",
        "Runtime",
        &[200, 400, 404],
        &["provider", "agentId"],
    ),
    op(
        "post",
        "/runtime/token-count",
        "Estimate the tokens of {text} (bytes / 4, the runtime's context-budget estimate; estimated: true)",
        "Runtime",
        &[200, 400, 404],
        &[],
    ),
    op(
        "post",
        "/runtime/token-count/batch",
        "Estimate the tokens of each of {texts} (bytes / 4; estimated: true)",
        "Runtime",
        &[200, 400, 404],
        &[],
    ),
    op(
        "get",
        "/diagnostics",
        "The daemon and each agent's status and configured adapters and MCP servers",
        "Runtime",
        &[200, 500],
        &[],
    ),
    op(
        "get",
        "/network",
        "Host, mesh status and each agent's messaging and serving configuration",
        "Network",
        &[200, 500],
        &[],
    ),
    op(
        "get",
        "/network/mesh",
        "Mesh status: meshEnabled, the listener, the hosted agents",
        "Network",
        &[200, 500],
        &[],
    ),
    op(
        "post",
        "/network/mesh/enable",
        "Set meshEnabled: the mesh's inbound door opens",
        "Network",
        &[200, 500],
        &[],
    ),
    op(
        "post",
        "/network/mesh/disable",
        "Clear meshEnabled: inbound mesh deliveries answer 503 MESH_DISABLED",
        "Network",
        &[200, 500],
        &[],
    ),
    op(
        "get",
        "/network/mesh/recent-tools",
        "The latest tool calls of each hosted agent, keyed by file path",
        "Network",
        &[200, 400],
        &["limit"],
    ),
    op(
        "get",
        "/network/mesh/discovered-runtimes",
        "LAN peers discovered over mDNS (`adf daemon --lan`; none without it)",
        "Network",
        &[200, 500],
        &[],
    ),
    op(
        "get",
        "/network/mesh/lan-addresses",
        "This daemon's LAN addresses and the LAN peers it discovered (`adf daemon --lan`; empty without it)",
        "Network",
        &[200],
        &[],
    ),
    op(
        "get",
        "/network/server",
        "The mesh listener (the daemon's own)",
        "Network",
        &[200],
        &[],
    ),
    op(
        "get",
        "/admin/mcp/packages",
        "MCP packages registered in the settings (installsSupported: false)",
        "Admin",
        &[200, 500],
        &[],
    ),
    op(
        "get",
        "/admin/adapters/packages",
        "Adapter packages registered in the settings (installsSupported: false)",
        "Admin",
        &[200, 500],
        &[],
    ),
    op(
        "post",
        "/admin/adapters/packages",
        "Install an adapter package: 501 NOT_SUPPORTED (capability package-install)",
        "Admin",
        &[501],
        &[],
    ),
    op(
        "delete",
        "/admin/adapters/packages",
        "Uninstall an adapter package: 501 NOT_SUPPORTED (capability package-install)",
        "Admin",
        &[501],
        &[],
    ),
    op(
        "get",
        "/admin/sandbox/packages",
        "Sandbox packages registered in the settings (installsSupported: false)",
        "Admin",
        &[200, 500],
        &[],
    ),
    op(
        "post",
        "/admin/sandbox/packages",
        "Install a sandbox package: 501 NOT_SUPPORTED (capability package-install)",
        "Admin",
        &[501],
        &[],
    ),
    op(
        "delete",
        "/admin/sandbox/packages",
        "Uninstall a sandbox package: 501 NOT_SUPPORTED (capability package-install)",
        "Admin",
        &[501],
        &[],
    ),
];

/// The operations of `api::unsupported`, each with its one answer.
fn unsupported_ops() -> Vec<Op> {
    UNSUPPORTED_OPERATIONS
        .iter()
        .map(|&(method, path, _, what)| Op {
            method,
            path,
            summary: what,
            tag: "Not supported yet",
            statuses: &[501],
            query: &[],
        })
        .collect()
}

/// Operations served without the token.
fn is_public(op: &Op) -> bool {
    op.tag == "Mesh" || matches!(op.path, "/health" | "/login")
}

/// The statuses the front door adds to an operation's own: 421 and 403 (Host and origin) on
/// every operation, 401 on control operations, 415 on mutating control operations.
fn statuses(op: &Op) -> Vec<u16> {
    let mut statuses = op.statuses.to_vec();
    statuses.extend([403, 421]);
    if !is_public(op) {
        statuses.push(401);
        if matches!(op.method, "post" | "put" | "patch" | "delete") {
            statuses.push(415);
        }
    }
    let success = statuses.first().copied();
    statuses[1..].sort_unstable();
    statuses.dedup();
    debug_assert_eq!(statuses.first().copied(), success);
    statuses
}

/// The document.
pub fn document() -> Value {
    let mut paths = Map::new();
    let later = unsupported_ops();
    for op in OPS.iter().chain(MORE_OPS).chain(later.iter()) {
        let mut responses = Map::new();
        for status in &statuses(op) {
            let schema = if matches!(*status, 200 | 202) {
                json!({ "type": "object", "additionalProperties": true })
            } else {
                json!({ "$ref": "#/components/schemas/ErrorResponse" })
            };
            let content_type = if op.path == "/events" && *status == 200 {
                "text/event-stream"
            } else {
                "application/json"
            };
            responses.insert(
                status.to_string(),
                json!({
                    "description": description(*status),
                    "content": { content_type: { "schema": schema } },
                }),
            );
        }
        let mut parameters: Vec<Value> = op
            .path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| json!({ "name": name, "in": "path", "required": true, "schema": { "type": "string" } }))
            .collect();
        parameters.extend(op.query.iter().map(|name| {
            json!({ "name": name, "in": "query", "required": matches!(*name, "path" | "afterId" | "filePath"), "schema": { "type": "string" } })
        }));
        let entry = paths
            .entry(op.path)
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(methods) = entry {
            let mut operation = json!({
                "summary": op.summary,
                "tags": [op.tag],
                "parameters": parameters,
                "responses": responses,
            });
            if is_public(op) {
                operation["security"] = json!([]);
            }
            methods.insert(op.method.to_owned(), operation);
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "ADF Daemon API (adf-rs)",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The operations this daemon implements, at the reference daemon's paths with its shapes and status codes. Control operations need the daemon's token (`$ADF_HOME/daemon-token`, or `ADF_DAEMON_TOKEN`) as `Authorization: Bearer <token>` or the adf_session cookie of a live session (GET /login?code= opens one), on every bind (unless the daemon runs with --insecure-loopback); /health, /login and the Mesh operations are public. Every request must name the daemon in its Host header (421 otherwise), and browser requests from another origin are refused (403). Request bodies of control operations must be application/json (415). `{id}` accepts the agent's config id, handle or name.",
        },
        "servers": [{ "url": "http://127.0.0.1:7385" }],
        "paths": paths,
        "components": {
            "schemas": {
                "ErrorResponse": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "error": { "type": "string" },
                        "code": {
                            "type": "string",
                            "description": "Stable code of some errors: NOT_SUPPORTED (501, with capability: a later capability of the runtime), AGENT_REVIEW_REQUIRED, FILE_PROTECTED, SECRET_NOT_EXPORTED, IDENTITY_LOCKED, WRONG_PASSWORD, NO_LOCAL_KEYS, MESH_DISABLED",
                        },
                        "capability": { "type": "string" },
                    },
                    "additionalProperties": true,
                },
            },
            "securitySchemes": {
                "bearer": { "type": "http", "scheme": "bearer" },
                "session": { "type": "apiKey", "in": "cookie", "name": crate::sessions::SESSION_COOKIE },
            },
        },
        "security": [{ "bearer": [] }, { "session": [] }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The front door hands every `/agents/{handle}/…` path that is not a control path to the
    /// agent's own routes, so a documented operation missing from `is_control_path` would be
    /// shadowed by agent serving.
    #[test]
    fn every_documented_operation_is_a_control_path() {
        let document = document();
        let paths = document["paths"]
            .as_object()
            .map(|p| p.keys().cloned().collect::<Vec<_>>());
        let paths = paths.unwrap_or_default();
        assert!(paths.len() > 100, "{} operations", paths.len());
        for path in paths {
            let concrete: String = path
                .split('/')
                .map(|segment| {
                    if segment.starts_with('{') {
                        "x"
                    } else {
                        segment
                    }
                })
                .collect::<Vec<_>>()
                .join("/");
            assert!(is_control_path(&concrete), "{path} is not a control path");
        }
        assert!(!is_control_path("/agents/x/hello"));
    }
}
