//! Built-in tools: files. Being written (issue 4).

use std::sync::Arc;

use crate::tools::Tool;

/// The tools of this family.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    Vec::new()
}
