//! The OpenAPI document this daemon serves at `/openapi.json`: the operations it implements,
//! in the reference's paths, with the status codes it really answers (the front door's 401,
//! 403, 415 and 421 included). An operation that is
//! not wired yet would be listed with its 501; none is at the moment.

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
        "Exchange the token (the URL `adf daemon` prints) for the adf_session cookie (HttpOnly, SameSite=Strict) and redirect to / (public)",
        "Auth",
        &[303, 401],
        &["token"],
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
        &[200, 400, 403, 404, 409, 500],
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
        &[200, 400, 404, 500],
        &["filePath"],
    ),
    op(
        "post",
        "/agents/review/accept",
        "Mark an .adf file's agent as reviewed (its current digest, kept in $ADF_HOME/settings.json)",
        "Review",
        &[200, 400, 404, 500],
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
        "Deliver an ALF message to the agent with this handle (public: no token; the agent's visibility, allow/block lists and signature rules decide). 503 with Retry-After when the daemon-wide budget for unauthenticated bodies in flight is spent; 408 for a body that takes more than 30 s",
        "Mesh",
        &[202, 400, 403, 404, 408, 413, 503],
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

fn description(status: u16) -> &'static str {
    match status {
        200 => "Success",
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
        500 => "Runtime error",
        501 => "Not supported yet",
        503 => "Unavailable (see the operation's summary); retry later",
        _ => "Response",
    }
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
    for op in OPS {
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
            "description": "The operations this daemon implements, at the reference daemon's paths with its shapes and status codes. Control operations need the daemon's token (`$ADF_HOME/daemon-token`, or `ADF_DAEMON_TOKEN`) as `Authorization: Bearer <token>` or the adf_session cookie GET /login sets, on every bind (unless the daemon runs with --insecure-loopback); /health, /login and the Mesh operations are public. Every request must name the daemon in its Host header (421 otherwise), and browser requests from another origin are refused (403). Request bodies of control operations must be application/json (415). `{id}` accepts the agent's config id, handle or name.",
        },
        "servers": [{ "url": "http://127.0.0.1:7385" }],
        "paths": paths,
        "components": {
            "schemas": {
                "ErrorResponse": {
                    "type": "object",
                    "required": ["error"],
                    "properties": { "error": { "type": "string" } },
                    "additionalProperties": true,
                },
            },
            "securitySchemes": {
                "bearer": { "type": "http", "scheme": "bearer" },
                "session": { "type": "apiKey", "in": "cookie", "name": crate::frontdoor::SESSION_COOKIE },
            },
        },
        "security": [{ "bearer": [] }, { "session": [] }],
    })
}
