//! The npm registry's documented HTTP API: the packument (`GET /{name}`) and the tarball its
//! version's `dist.tarball` names.
//!
//! The client is adf-egress's `service_client`, not `agent_client`: the registry is a
//! destination the owner configured (the runtime setting `npmRegistry`, like a model
//! provider's URL), the agent supplies only a package name that becomes a path segment of it,
//! and a tarball is fetched only from the registry's own origin. The install is the runtime
//! acting for the agent on the owner's registry, not agent egress to a URL of its choosing.

use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;
use sha2::{Digest, Sha512};

use crate::install::Refusal;

/// Largest packument read (some popular packages' run to tens of MB).
const MAX_PACKUMENT_BYTES: usize = 64 * 1024 * 1024;

pub(crate) struct Registry {
    base: reqwest::Url,
    client: reqwest::Client,
}

fn registry_error(message: impl Into<String>) -> Refusal {
    Refusal::new("registry", message)
}

impl Registry {
    pub(crate) fn new(base: &str) -> Result<Self, Refusal> {
        let base = reqwest::Url::parse(&format!("{}/", base.trim_end_matches('/')))
            .map_err(|e| registry_error(format!("the registry URL '{base}' is not a URL: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(registry_error("the registry URL must be http or https"));
        }
        let client = adf_egress::service_client(adf_egress::ClientOptions {
            timeout: Some(Duration::from_secs(120)),
            connect_timeout: Some(Duration::from_secs(15)),
            read_timeout: Some(Duration::from_secs(30)),
        })
        .map_err(|e| registry_error(e.to_string()))?;
        Ok(Registry { base, client })
    }

    /// The packument of `name` (scoped names keep their `@`, their `/` is `%2f`).
    pub(crate) async fn packument(&self, name: &str) -> Result<Value, Refusal> {
        let url = self
            .base
            .join(&name.replace('/', "%2f"))
            .map_err(|e| registry_error(e.to_string()))?;
        let response = self
            .client
            .get(url.clone())
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| registry_error(format!("{url}: {e}")))?;
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return Err(Refusal::new(
                "not_found",
                format!("package '{name}' is not in the registry"),
            ));
        }
        if !response.status().is_success() {
            return Err(registry_error(format!(
                "{url} answered {}",
                response.status()
            )));
        }
        let body = read_capped(response, MAX_PACKUMENT_BYTES as u64, "packument").await?;
        serde_json::from_slice(&body)
            .map_err(|e| registry_error(format!("the packument of '{name}' is not JSON: {e}")))
    }

    /// The tarball at `url`, checked against `integrity` (`sha512-…`) and at most `cap`
    /// bytes; its SHA-512 in hex with the bytes.
    pub(crate) async fn tarball(
        &self,
        url: &str,
        integrity: &str,
        cap: u64,
    ) -> Result<(String, Vec<u8>), Refusal> {
        let url = reqwest::Url::parse(url)
            .map_err(|e| registry_error(format!("dist.tarball '{url}' is not a URL: {e}")))?;
        if url.origin() != self.base.origin() {
            return Err(registry_error(format!(
                "dist.tarball {url} is not on the registry's origin ({})",
                self.base.origin().ascii_serialization()
            )));
        }
        let expected = integrity
            .split_whitespace()
            .find_map(|part| part.strip_prefix("sha512-"))
            .ok_or_else(|| {
                Refusal::new(
                    "integrity",
                    "the registry gives no sha512 dist.integrity for this version",
                )
            })?;
        let response = self
            .client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| registry_error(format!("{url}: {e}")))?;
        if !response.status().is_success() {
            return Err(registry_error(format!(
                "{url} answered {}",
                response.status()
            )));
        }
        let body = read_capped(response, cap, "tarball").await?;
        let digest = Sha512::digest(&body);
        let actual = base64::engine::general_purpose::STANDARD.encode(digest);
        if actual != expected {
            return Err(Refusal::new(
                "integrity",
                format!("the tarball from {url} does not match its dist.integrity (sha512)"),
            ));
        }
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        Ok((hex, body))
    }
}

async fn read_capped(
    mut response: reqwest::Response,
    cap: u64,
    what: &str,
) -> Result<Vec<u8>, Refusal> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| registry_error(format!("reading the {what}: {e}")))?
    {
        if (body.len() + chunk.len()) as u64 > cap {
            return Err(Refusal::new(
                "size_limit",
                format!("the {what} is larger than {} MB", cap / (1024 * 1024)),
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
