//! The Discord adapter: not supported yet — building it fails with an error that says so.

use std::sync::Arc;

use crate::Adapter;
use crate::error::AdapterError;
use crate::platform::Building;

/// The adapter type.
pub const KIND: &str = "discord";

/// Builds the Discord adapter for one agent.
pub(crate) async fn build(building: &Building<'_>) -> Result<Arc<dyn Adapter>, AdapterError> {
    Err(building.not_supported())
}
