//! `adf conform mesh`: judging a mesh peer (card, signed and encrypted ALF delivery, tampered
//! messages refused). Not in this version of the kit: [`check_mesh`] says so.

use crate::{ConformError, Report};

/// Judges the mesh endpoint at `url` as a peer agent would. Not supported yet.
pub fn check_mesh(_url: &str) -> Result<Report, ConformError> {
    Err(ConformError::NotSupported(
        "`adf conform mesh` (card verification, signed/encrypted ALF delivery, tamper refusal)",
    ))
}
