//! `compute.packages.pip` (§5.12): the agent's pip packages, installed into a virtualenv in
//! its workspace (`/workspace/{agentId}/.venv`, first on the sandbox's `PATH`) before the
//! first command that needs them, and again whenever the list changes. pip runs inside the
//! sandbox, so a package's build scripts run with the sandbox's limits and no network: it
//! installs from the directory of wheels and sdists the runtime setting `compute.pipFindLinks`
//! names (mounted read-only), never from an index. An index URL (`compute.pipIndexUrl`) is
//! refused as not supported yet, since the sandbox has no network to reach it through the
//! egress policy.

use std::path::Path;
use std::time::Duration;

use crate::error::ComputeError;
use crate::run::{self, Limits, Sandbox};
use crate::target::Targets;

/// Where the wheel directory appears in the sandbox.
const WHEELS_IN_SANDBOX: &str = "/adf-pip-wheels";
/// The file in the virtualenv that records what was installed.
const MARKER: &str = ".venv/.adf-pip.json";
/// The wall time of one install.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);

/// Installs the agent's pip packages into the sandbox's virtualenv unless they are there.
pub(crate) async fn ensure(targets: &Targets<'_>, sandbox: &Sandbox) -> Result<(), ComputeError> {
    let packages = targets.pip_packages();
    if packages.is_empty() {
        return Ok(());
    }
    for package in &packages {
        let safe = !package.starts_with('-')
            && package
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-=<>!~,[]".contains(c));
        if !safe {
            return Err(ComputeError::BadPath {
                path: package.clone(),
                why:
                    "not a pip requirement this runtime installs (name and version specifier only)"
                        .into(),
            });
        }
    }
    let Some(wheels) = targets.pip_find_links() else {
        let why = if targets.pip_index_url().is_some() {
            "installing from an index (compute.pipIndexUrl): the sandbox has no network"
        } else {
            "compute.packages.pip without the runtime setting compute.pipFindLinks (a directory of wheels and sdists)"
        };
        return Err(ComputeError::NotSupported(why.into()));
    };
    let workspace = host_workdir(targets, sandbox)?;
    let marker = workspace.join(MARKER);
    let wanted = serde_json::to_string(&packages).unwrap_or_default();
    if std::fs::read_to_string(&marker).is_ok_and(|have| have == wanted) {
        return Ok(());
    }
    let mut with_wheels = sandbox.clone();
    with_wheels
        .read_only
        .push((wheels, WHEELS_IN_SANDBOX.to_owned()));
    let command = format!(
        "python3 -m venv .venv && .venv/bin/pip install --quiet --no-index --disable-pip-version-check --no-input --find-links {WHEELS_IN_SANDBOX} {}",
        // Quoted: a specifier's `<` and `>` are not redirections (the set above has no `'`).
        packages
            .iter()
            .map(|p| format!("'{p}'"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let limits = Limits {
        timeout: INSTALL_TIMEOUT,
        ..Limits::default()
    };
    let line = with_wheels.command_line(&command, &limits)?;
    let output = run::run(&line, None, &limits).await?;
    if output.exit_code != 0 {
        let tail: String = output
            .stderr
            .chars()
            .rev()
            .take(2000)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        return Err(ComputeError::Io(format!(
            "pip could not install compute.packages.pip (exit {}): {tail}",
            output.exit_code
        )));
    }
    std::fs::write(&marker, wanted)
        .map_err(|e| ComputeError::Io(format!("cannot record the pip install: {e}")))?;
    Ok(())
}

/// The host directory behind the sandbox's working directory.
fn host_workdir(
    targets: &Targets<'_>,
    sandbox: &Sandbox,
) -> Result<std::path::PathBuf, ComputeError> {
    let id = targets.agent_id()?;
    Ok(if sandbox.mount_at == "/workspace" {
        sandbox.host_dir.join(id)
    } else {
        Path::new(&sandbox.host_dir).to_path_buf()
    })
}
