//! Rule 2 of §5.6 for model requests: a provider URL comes from the agent's config
//! (`model.provider` as an `http(s)://` URL, `providers[].baseUrl`), so before each request
//! the destination is checked against `adf-egress`'s registry of runtime control APIs on this
//! machine (this process's, every daemon's of any home or user in the machine-wide record,
//! and the daemons' recorded in the runtime home). Only that rule
//! applies: loopback and private model servers (Ollama on 127.0.0.1:11434) stay reachable.

use std::path::{Path, PathBuf};

use adf_egress::{Destination, SystemLookup, Url};

use super::error::ProviderError;

/// Where daemons on this machine record their control APIs, by the runtime home's rule
/// (`$ADF_HOME`, else `$HOME/.adf`, as adf-runtime's `RuntimeHome::from_env`), read through
/// `env`.
pub(crate) fn daemon_record_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let home = env("ADF_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            env("HOME")
                .filter(|dir| !dir.is_empty())
                .map(|dir| PathBuf::from(dir).join(".adf"))
        })?;
    Some(home.join(adf_egress::control::RECORD_FILE))
}

/// Refuses a request to `url` when it may reach a runtime control API on this machine
/// (except a daemon's public mesh routes). A URL that does not parse or a host that does not
/// resolve is left to the request itself to report.
pub(crate) async fn refuse_control_api(
    provider: &str,
    url: &str,
    record: Option<&Path>,
) -> Result<(), ProviderError> {
    let control_apis = record
        .map(adf_egress::control::recorded)
        .unwrap_or_default();
    // Without any control API known (this process's, the machine-wide record's, the home's)
    // there is nothing to refuse, and no lookup to pay for.
    if adf_egress::control::known(&control_apis).is_empty() {
        return Ok(());
    }
    let Ok(parsed) = Url::parse(url) else {
        return Ok(());
    };
    if adf_egress::is_public_mesh_route("POST", &parsed) {
        return Ok(());
    }
    // A host that does not resolve is the request's own error to report.
    let Ok(Destination { port, ips, .. }) = adf_egress::destination(&parsed, &SystemLookup).await
    else {
        return Ok(());
    };
    let policy = adf_egress::Policy {
        control_apis,
        ..adf_egress::Policy::default()
    };
    match ips.into_iter().find(|ip| policy.is_control_api(*ip, port)) {
        Some(ip) => Err(ProviderError::Config {
            provider: provider.to_owned(),
            message: format!(
                "{url} reaches {ip}:{port}, the control API of a runtime on this machine, which model requests never reach (§5.6 rule 2); point model.provider or the provider's baseUrl at the model server"
            ),
        }),
        None => Ok(()),
    }
}
