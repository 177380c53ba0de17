//! Opening an `.adf` file for a command run as its owner: the one place the CLI opens files
//! directly, shared by every command module.

use std::path::Path;

use adf_store::AdfFile;
use anyhow::Result;

/// Opens a file for reading and writing, saying on stderr when it was migrated.
pub(crate) fn open(path: &Path) -> Result<AdfFile> {
    let file = AdfFile::open(path)?;
    say_if_migrated(path, &file);
    Ok(file)
}

fn say_if_migrated(path: &Path, file: &AdfFile) {
    let report = file.open_report();
    if let (Some(first), Some(last)) = (report.migrated_steps.first(), report.migrated_steps.last())
    {
        eprintln!(
            "migrated {} from schema {} to {last} (steps {first}..={last})",
            path.display(),
            report.schema_found
        );
    }
}

/// Opens a file for a command that only reads it: a read-only file (or one in a read-only
/// directory) is read as it is, leaving no `-wal`/`-shm` behind.
pub(crate) fn open_read(path: &Path) -> Result<AdfFile> {
    let file = AdfFile::open_for_reading(path)?;
    say_if_migrated(path, &file);
    Ok(file)
}

/// Tells the owner, on stderr, which configured sections this runtime will not run (`adf chat`,
/// `adf run`, `adf code`): accepting them silently would look like they took effect.
pub(crate) fn warn_not_run(file: &AdfFile) {
    if let Ok(config) = file.config_shared()
        && let Some(line) = adf_store::unsupported::warning_line(&config)
    {
        eprintln!("warning: {line}");
    }
}
