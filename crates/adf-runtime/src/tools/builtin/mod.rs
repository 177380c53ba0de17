//! The built-in tools, one module per family. Each module exposes `tools()`.

use std::sync::Arc;

use super::Tool;

pub mod code;
pub mod config;
pub mod create_adf;
pub mod db;
pub mod fetch;
pub mod files;
pub mod loops;
pub mod mesh;
pub mod messages;
pub mod meta;
pub mod state;
pub mod timers;
pub mod turn;

/// Every built-in tool this runtime implements.
pub fn all() -> Vec<Arc<dyn Tool>> {
    let families = [
        files::tools(),
        code::tools(),
        fetch::tools(),
        meta::tools(),
        state::tools(),
        db::tools(),
        config::tools(),
        create_adf::tools(),
        timers::tools(),
        messages::tools(),
        mesh::tools(),
        turn::tools(),
        loops::tools(),
    ];
    families.into_iter().flatten().collect()
}
