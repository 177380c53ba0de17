//! adf-mcp against real MCP servers: a stdlib Python server that misbehaves on purpose, a
//! Streamable HTTP server (rmcp) on 127.0.0.1, and real packages from npm and PyPI
//! installed through `Manager::add` (the path of `adf mcp add` and `mcp_install`).

#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test crate: its shared modules are private to it, and docs are for library users.
#![allow(unreachable_pub, missing_docs)]

mod cancel;
mod common;
mod declarations;
mod gaps;
mod http;
mod packages;
mod stdio;
