//! The built-in tools, one module per family. Each module exposes `tools()`.

use std::sync::Arc;

use super::Tool;

/// Every built-in tool this runtime implements.
pub fn all() -> Vec<Arc<dyn Tool>> {
    Vec::new()
}
