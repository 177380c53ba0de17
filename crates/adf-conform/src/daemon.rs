//! `adf conform daemon`: the daemon API against a live daemon. Not in this increment.

use crate::{ConformError, Report};

/// Judges the daemon at `url`.
pub fn check_daemon(_url: &str, _token: Option<&str>) -> Result<Report, ConformError> {
    Err(ConformError::NotSupported("`adf conform daemon`"))
}
