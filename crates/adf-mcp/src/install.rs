//! The package cache and the server declarations `mcp_install` / `adf mcp add` write.
//!
//! Packages live outside the agent file, under the runtime home (§15): npm packages each in
//! their own prefix (`<home>/mcp/npm/<package>`, run with `node`), PyPI packages each in their
//! own virtualenv (`<home>/mcp/pypi/<package>`). The file records only the `source`
//! (`npm:<package>` / `pypi:<package>`), so it stays portable: another runtime installs the
//! same package into its own cache.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::McpError;
use crate::spec::valid_server_name;

/// The kind of server `mcp_install` attaches (TOL-36).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Kind {
    /// An npm package (the default), run with `node`.
    #[default]
    Npm,
    /// A PyPI package, run from its own virtualenv.
    Pypi,
    /// A command already on this machine.
    Custom,
    /// A Streamable HTTP server.
    Http,
}

impl Kind {
    /// Parses `npm` | `pypi` | `custom` | `http`.
    pub fn parse(kind: &str) -> Result<Kind, McpError> {
        match kind {
            "npm" => Ok(Kind::Npm),
            "pypi" => Ok(Kind::Pypi),
            "custom" => Ok(Kind::Custom),
            "http" => Ok(Kind::Http),
            other => Err(McpError::Config(format!(
                "type '{other}' is not an MCP server type (npm, pypi, custom or http)"
            ))),
        }
    }
}

/// What the owner (or `mcp_install`) asks to attach.
#[derive(Debug, Clone, Default)]
pub struct InstallRequest {
    /// `type`.
    pub kind: Kind,
    /// The package (npm, pypi) or command (custom).
    pub package: Option<String>,
    /// The endpoint (http).
    pub url: Option<String>,
    /// The server name; derived from the package when absent (custom requires it).
    pub name: Option<String>,
    /// Extra arguments.
    pub args: Vec<String>,
    /// `host: true`: `run_location: host` (needs `compute.host_access`, TOL-38).
    pub host: bool,
    /// Credential variable names the server reads (stored as `env_schema`, required).
    pub env_keys: Vec<String>,
    /// Static HTTP headers (no secrets: TOL-37).
    pub headers: BTreeMap<String, String>,
    /// `header_env`: header name → credential variable.
    pub header_env: Vec<(String, String)>,
    /// `bearer_token_env_var`.
    pub bearer_token_env_var: Option<String>,
}

/// Header names that carry secrets: only `header_env` / `bearer_token_env_var` may set them.
fn secret_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower == "authorization"
        || lower == "cookie"
        || lower == "proxy-authorization"
        || ["token", "secret", "key", "password", "auth"]
            .iter()
            .any(|word| lower.contains(word))
}

/// The server name derived from a package: its last path segment without a version and
/// without the usual `mcp-server-` / `server-` / `-mcp` decorations.
pub fn derive_name(package: &str) -> String {
    let base = package.rsplit('/').next().unwrap_or(package);
    let base = base
        .split(['@', '=', '<', '>', '~', '[', ' '])
        .next()
        .unwrap_or(base);
    let mut name = base;
    for prefix in ["mcp-server-", "server-", "mcp_server_"] {
        if let Some(rest) = name.strip_prefix(prefix) {
            name = rest;
        }
    }
    for suffix in ["-mcp-server", "-mcp", "_mcp"] {
        if let Some(rest) = name.strip_suffix(suffix) {
            name = rest;
        }
    }
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    if cleaned.is_empty() {
        "server".to_owned()
    } else {
        cleaned
    }
}

/// Validates `request` against the agent's `config` (TOL-36..38) and returns the server
/// declaration to store. Nothing is installed here.
pub fn declaration(request: &InstallRequest, config: &Value) -> Result<Value, McpError> {
    let package = request.package.as_deref().filter(|p| !p.trim().is_empty());
    match request.kind {
        Kind::Custom if request.name.is_none() => {
            return Err(McpError::Config(
                "type custom requires an explicit name".into(),
            ));
        }
        Kind::Http if request.url.as_deref().is_none_or(str::is_empty) => {
            return Err(McpError::Config("type http requires a url".into()));
        }
        Kind::Npm | Kind::Pypi | Kind::Custom if package.is_none() => {
            return Err(McpError::Config(
                "a package (npm, pypi) or command (custom) is required".into(),
            ));
        }
        _ => {}
    }
    if let Some(header) = request.headers.keys().find(|h| secret_header(h)) {
        return Err(McpError::Config(format!(
            "header '{header}' carries a secret: pass it with header_env (or bearer_token_env_var) so its value lives in adf_identity, not in the config"
        )));
    }
    if request.host
        && config
            .pointer("/compute/host_access")
            .and_then(Value::as_bool)
            != Some(true)
    {
        return Err(McpError::Config(
            "host: true runs the server on the host and needs compute.host_access: true".into(),
        ));
    }
    let name = match (&request.name, package, &request.url) {
        (Some(name), _, _) => name.clone(),
        (None, Some(package), _) => derive_name(package),
        (None, None, Some(url)) => reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(derive_name))
            .unwrap_or_else(|| "http".to_owned()),
        (None, None, None) => "server".to_owned(),
    };
    if !valid_server_name(&name) {
        return Err(McpError::Config(format!(
            "'{name}' is not a server name (letters, digits, '-' or '_', at most 64)"
        )));
    }
    let env_schema: Vec<Value> = request
        .env_keys
        .iter()
        .map(|key| json!({ "key": key, "scope": "agent", "required": true }))
        .collect();
    let mut server = match request.kind {
        Kind::Npm => json!({
            "name": name,
            "transport": "stdio",
            "command": "node",
            "args": request.args,
            "npm_package": package,
            "source": format!("npm:{}", package.unwrap_or_default()),
        }),
        Kind::Pypi => json!({
            "name": name,
            "transport": "stdio",
            "command": pypi_entry(package.unwrap_or_default()),
            "args": request.args,
            "pypi_package": package,
            "source": format!("pypi:{}", package.unwrap_or_default()),
        }),
        Kind::Custom => json!({
            "name": name,
            "transport": "stdio",
            "command": package,
            "args": request.args,
            "source": "custom",
        }),
        Kind::Http => {
            let mut server = json!({
                "name": name,
                "transport": "http",
                "url": request.url,
                "headers": request.headers,
                "header_env": request.header_env.iter().map(|(h, e)| json!({"header": h, "env": e})).collect::<Vec<_>>(),
            });
            if let Some(env) = &request.bearer_token_env_var {
                server["bearer_token_env_var"] = json!(env);
            }
            server
        }
    };
    server["env"] = json!({});
    server["env_schema"] = json!(env_schema);
    if request.host {
        server["run_location"] = json!("host");
    }
    Ok(server)
}

/// The console script a PyPI package installs under its own name (`mcp-server-time==1.0`
/// → `mcp-server-time`).
pub fn pypi_entry(package: &str) -> String {
    package
        .split(['=', '<', '>', '~', '[', ' ', '!'])
        .next()
        .unwrap_or(package)
        .to_owned()
}

/// The runtime's package cache: `<home>/mcp`.
#[derive(Debug, Clone)]
pub struct PackageCache {
    root: PathBuf,
}

fn dir_name(package: &str) -> String {
    package
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn program_exists(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

async fn run(command: &mut tokio::process::Command, what: &str) -> Result<(), McpError> {
    let output = command
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| McpError::Install(format!("{what}: {e}")))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let tail: String = stderr
        .lines()
        .rev()
        .take(8)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    Err(McpError::Install(format!(
        "{what} failed ({}):\n{tail}",
        output.status
    )))
}

impl PackageCache {
    /// The cache under `home` (the runtime home directory).
    pub fn new(home: &Path) -> Self {
        PackageCache {
            root: home.join("mcp"),
        }
    }

    /// The prefix of npm package `package`.
    pub fn npm_prefix(&self, package: &str) -> PathBuf {
        self.root.join("npm").join(dir_name(package))
    }

    /// The virtualenv of PyPI package `package`.
    pub fn pypi_venv(&self, package: &str) -> PathBuf {
        self.root.join("pypi").join(dir_name(&pypi_entry(package)))
    }

    /// Installs npm `package` into its own prefix (idempotent: an installed package is kept).
    pub async fn install_npm(&self, package: &str) -> Result<(), McpError> {
        if self.npm_bin(package).is_ok() {
            return Ok(());
        }
        if !program_exists("npm") || !program_exists("node") {
            return Err(McpError::Install(
                "node and npm are needed for npm MCP servers and are not on PATH (install Node.js, e.g. scripts/setup.d/30-mcp-tools.sh)".into(),
            ));
        }
        let prefix = self.npm_prefix(package);
        std::fs::create_dir_all(&prefix)
            .map_err(|e| McpError::Install(format!("cannot create {}: {e}", prefix.display())))?;
        run(
            tokio::process::Command::new("npm")
                .arg("install")
                .arg("--prefix")
                .arg(&prefix)
                .args(["--no-audit", "--no-fund", "--omit=dev", "--loglevel=error"])
                .arg(package),
            &format!("npm install {package}"),
        )
        .await?;
        self.npm_bin(package).map(|_| ())
    }

    /// The script npm package `package` declares as its binary.
    pub fn npm_bin(&self, package: &str) -> Result<PathBuf, McpError> {
        let bare = bare_npm_name(package);
        let dir = self.npm_prefix(package).join("node_modules").join(bare);
        let manifest = std::fs::read_to_string(dir.join("package.json")).map_err(|_| {
            McpError::Install(format!(
                "npm package {package} is not installed in this runtime's cache; run `adf mcp add FILE {package}` (or mcp_install)"
            ))
        })?;
        let manifest: Value = serde_json::from_str(&manifest)
            .map_err(|e| McpError::Install(format!("{package}/package.json: {e}")))?;
        let bin = match manifest.get("bin") {
            Some(Value::String(path)) => Some(path.clone()),
            Some(Value::Object(bins)) => bins
                .values()
                .filter_map(Value::as_str)
                .next()
                .map(str::to_owned),
            _ => None,
        }
        .ok_or_else(|| McpError::Install(format!("npm package {package} declares no binary")))?;
        Ok(dir.join(bin))
    }

    /// Installs PyPI `package` into its own virtualenv (idempotent).
    pub async fn install_pypi(&self, package: &str) -> Result<(), McpError> {
        if self.pypi_bin(package).is_ok() {
            return Ok(());
        }
        if !program_exists("python3") {
            return Err(McpError::Install(
                "python3 is needed for PyPI MCP servers and is not on PATH (install python3 and python3-venv, e.g. scripts/setup.d/30-mcp-tools.sh)".into(),
            ));
        }
        let venv = self.pypi_venv(package);
        if let Some(parent) = venv.parent() {
            std::fs::create_dir_all(parent).map_err(|e| {
                McpError::Install(format!("cannot create {}: {e}", parent.display()))
            })?;
        }
        run(
            tokio::process::Command::new("python3")
                .arg("-m")
                .arg("venv")
                .arg(&venv),
            "python3 -m venv (is python3-venv installed?)",
        )
        .await?;
        run(
            tokio::process::Command::new(venv.join("bin").join("pip"))
                .args(["install", "--quiet", "--disable-pip-version-check"])
                .arg(package),
            &format!("pip install {package}"),
        )
        .await?;
        self.pypi_bin(package).map(|_| ())
    }

    /// The console script of PyPI `package` in its virtualenv.
    pub fn pypi_bin(&self, package: &str) -> Result<PathBuf, McpError> {
        let bin = self
            .pypi_venv(package)
            .join("bin")
            .join(pypi_entry(package));
        if bin.is_file() {
            Ok(bin)
        } else {
            Err(McpError::Install(format!(
                "PyPI package {package} is not installed in this runtime's cache; run `adf mcp add FILE --type pypi {package}` (or mcp_install)"
            )))
        }
    }

    /// The program and leading arguments that run a server declared with `source`
    /// (`npm:<pkg>` → `node <bin>`, `pypi:<pkg>` → `<venv>/bin/<entry>`); `None` for other
    /// sources, which run their `command` as declared.
    pub fn resolve(&self, source: &str) -> Option<Result<(String, Vec<String>), McpError>> {
        if let Some(package) = source.strip_prefix("npm:") {
            return Some(
                self.npm_bin(package)
                    .map(|bin| ("node".to_owned(), vec![bin.display().to_string()])),
            );
        }
        if let Some(package) = source.strip_prefix("pypi:") {
            return Some(
                self.pypi_bin(package)
                    .map(|bin| (bin.display().to_string(), Vec::new())),
            );
        }
        None
    }
}

/// `@scope/name@1.2` → `@scope/name`; `name@1.2` → `name`.
fn bare_npm_name(package: &str) -> &str {
    let search_from = usize::from(package.starts_with('@'));
    match package[search_from..].find('@') {
        Some(at) => &package[..search_from + at],
        None => package,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tol_36_custom_needs_a_name_http_needs_a_url_npm_is_the_default() {
        let config = json!({});
        let custom = InstallRequest {
            kind: Kind::Custom,
            package: Some("x".into()),
            ..Default::default()
        };
        assert!(
            declaration(&custom, &config)
                .unwrap_err()
                .to_string()
                .contains("requires an explicit name")
        );
        let http = InstallRequest {
            kind: Kind::Http,
            ..Default::default()
        };
        assert!(
            declaration(&http, &config)
                .unwrap_err()
                .to_string()
                .contains("requires a url")
        );
        let npm = InstallRequest {
            package: Some("@modelcontextprotocol/server-memory".into()),
            ..Default::default()
        };
        let server = declaration(&npm, &config).unwrap();
        assert_eq!(server["name"], json!("memory"));
        assert_eq!(
            server["source"],
            json!("npm:@modelcontextprotocol/server-memory")
        );
    }

    #[test]
    fn tol_37_secret_headers_must_go_through_header_env() {
        let mut request = InstallRequest {
            kind: Kind::Http,
            url: Some("http://127.0.0.1:1/mcp".into()),
            ..Default::default()
        };
        request
            .headers
            .insert("Authorization".into(), "Bearer x".into());
        assert!(
            declaration(&request, &json!({}))
                .unwrap_err()
                .to_string()
                .contains("header_env")
        );
        request.headers.clear();
        request.headers.insert("X-Trace".into(), "1".into());
        request
            .header_env
            .push(("Authorization".into(), "DOCS_TOKEN".into()));
        let server = declaration(&request, &json!({})).unwrap();
        assert_eq!(
            server["header_env"],
            json!([{"header": "Authorization", "env": "DOCS_TOKEN"}])
        );
    }

    #[test]
    fn tol_38_host_needs_compute_host_access() {
        let request = InstallRequest {
            kind: Kind::Custom,
            name: Some("h".into()),
            package: Some("x".into()),
            host: true,
            ..Default::default()
        };
        assert!(
            declaration(&request, &json!({}))
                .unwrap_err()
                .to_string()
                .contains("compute.host_access")
        );
        let ok = declaration(&request, &json!({"compute": {"host_access": true}})).unwrap();
        assert_eq!(ok["run_location"], json!("host"));
    }

    #[test]
    fn names_and_versions() {
        assert_eq!(bare_npm_name("@a/b@1.2"), "@a/b");
        assert_eq!(bare_npm_name("b@1"), "b");
        assert_eq!(pypi_entry("mcp-server-time==1.0"), "mcp-server-time");
        assert_eq!(derive_name("mcp-server-time"), "time");
    }
}
