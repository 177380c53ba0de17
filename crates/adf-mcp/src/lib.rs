//! `adf-mcp`: Model Context Protocol servers for ADF agents (spec §5.4, §5.11, §15), on the
//! official Rust SDK `rmcp`.
//!
//! Principal types:
//! - [`McpSource`]: the `adf_runtime::tools::ToolSource` the binary attaches to its
//!   `ToolRegistry`; it answers every declared `mcp_<server>_<tool>` with an [`McpTool`], so
//!   calls go through the one tool pipeline (access, approvals, audit, one log row).
//! - [`Supervisor`]: the servers this process runs, one per (agent file, server): started on
//!   the first call, stopped when idle or when the agent stops, restarted after a crash or a
//!   timeout; stdio children get a cleared environment and a scratch directory next to the
//!   file; Streamable HTTP goes through `adf-egress`.
//! - [`ServerSpec`]: the typed view of one `mcp.servers[]` entry.
//! - [`declare`]: discovery → declarations (`mcp_tool_hash`, `mcp_tool_status`), reviews.
//! - [`tools`]: the agent's management tools `mcp_install`, `mcp_restart`, `mcp_uninstall`.
//! - [`install`]: the package cache under the runtime home (npm prefix, PyPI virtualenv per
//!   package) and the server declarations `mcp_install`/`adf mcp add` write.

pub mod connect;
pub mod declare;
pub mod install;
pub mod manage;
pub mod result;
pub mod source;
pub mod spec;
pub mod supervisor;
pub mod tools;

pub use declare::{DiscoveredTool, DiscoveryReport};
pub use source::{McpSource, McpTool};
pub use spec::ServerSpec;
pub use supervisor::{ServerStatus, Supervisor};

/// What can go wrong with an MCP server.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The server declaration is unusable.
    #[error("{0}")]
    Config(String),
    /// No such server or tool.
    #[error("{0}")]
    NotFound(String),
    /// The server could not be started or connected to.
    #[error("{0}")]
    Start(String),
    /// The egress policy refused the server's URL.
    #[error("{0}")]
    Refused(String),
    /// A call or listing failed.
    #[error("{0}")]
    Call(String),
    /// The server did not answer in time.
    #[error("{0}")]
    Timeout(String),
    /// Installing a package failed.
    #[error("{0}")]
    Install(String),
    /// Reading or writing the agent file failed.
    #[error(transparent)]
    Store(#[from] adf_store::StoreError),
}
