//! What a binding asks for and what the agent's `stream_bind` gates allow (§5.23): endpoint
//! shapes, options, the gates and the checks between them. Pure: nothing here opens anything.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

/// Why a binding was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// The request is malformed (shape, kind, missing field).
    #[error("{0}")]
    Invalid(String),
    /// A `stream_bind` gate (or the egress policy) refuses the endpoint.
    #[error("{0}")]
    Refused(String),
    /// The endpoint kind or isolation is valid but this runtime does not run it yet.
    #[error("{0}")]
    NotSupported(String),
    /// Opening an endpoint failed (connection refused, spawn failed, …).
    #[error("{0}")]
    Failed(String),
}

/// Where a `process` endpoint runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// A child process on the host (`host_process_bind`).
    Host,
    /// The shared container (`container_shared_bind`).
    ContainerShared,
    /// A per-binding container (`container_isolated_bind`, needs `image`).
    ContainerIsolated,
}

impl Isolation {
    fn name(self) -> &'static str {
        match self {
            Isolation::Host => "host",
            Isolation::ContainerShared => "container_shared",
            Isolation::ContainerIsolated => "container_isolated",
        }
    }
}

/// One end of a binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// An open outbound WebSocket of the agent, by connection id or config id.
    Ws {
        /// `connection_id`.
        connection_id: String,
    },
    /// A raw TCP connection.
    Tcp {
        /// `host` as written.
        host: String,
        /// `port`, 1–65535.
        port: u16,
    },
    /// A spawned process whose stdin/stdout is the stream.
    Process {
        /// `isolation` (default `host`).
        isolation: Isolation,
        /// `command`: the program and its arguments (no shell).
        command: Vec<String>,
        /// `env`: the child's only variables besides `PATH`.
        env: BTreeMap<String, String>,
        /// `cwd`.
        cwd: Option<PathBuf>,
        /// `image` (container isolation).
        image: Option<String>,
    },
    /// The agent's umbilical events as NDJSON, read only.
    Umbilical {
        /// `filter.event_types`: exact names, `prefix.*` or `*` (default every event).
        event_types: Vec<String>,
    },
}

fn text(value: &Value, key: &str) -> Option<String> {
    value
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

impl Endpoint {
    /// Reads one endpoint object; `side` (`a` or `b`) names it in errors.
    pub fn parse(value: &Value, side: &str) -> Result<Self, StreamError> {
        let invalid = |why: String| StreamError::Invalid(format!("endpoint {side}: {why}"));
        if !value.is_object() {
            return Err(invalid("must be an object with a kind".into()));
        }
        match value.get("kind").and_then(Value::as_str) {
            Some("ws") => Ok(Endpoint::Ws {
                connection_id: text(value, "connection_id")
                    .ok_or_else(|| invalid("a ws endpoint needs a connection_id".into()))?,
            }),
            Some("tcp") => {
                let host = text(value, "host")
                    .ok_or_else(|| invalid("a tcp endpoint needs a host".into()))?;
                let port = value
                    .get("port")
                    .and_then(Value::as_u64)
                    .and_then(|p| u16::try_from(p).ok())
                    .filter(|p| *p > 0)
                    .ok_or_else(|| invalid("a tcp endpoint needs a port 1–65535".into()))?;
                Ok(Endpoint::Tcp { host, port })
            }
            Some("process") => {
                let isolation = match value.get("isolation").and_then(Value::as_str) {
                    None | Some("host") => Isolation::Host,
                    Some("container_shared") => Isolation::ContainerShared,
                    Some("container_isolated") => Isolation::ContainerIsolated,
                    Some(other) => {
                        return Err(invalid(format!(
                            "isolation is host, container_shared or container_isolated, not '{other}'"
                        )));
                    }
                };
                let command: Vec<String> = match value.get("command") {
                    Some(Value::Array(items)) => items
                        .iter()
                        .map(|item| item.as_str().map(str::to_owned))
                        .collect::<Option<_>>()
                        .ok_or_else(|| invalid("command must be an array of strings".into()))?,
                    _ => Vec::new(),
                };
                if command.first().is_none_or(String::is_empty) {
                    return Err(invalid(
                        "a process endpoint needs a command: [program, ...args] (no shell)".into(),
                    ));
                }
                let mut env = BTreeMap::new();
                if let Some(map) = value.get("env") {
                    let map = map
                        .as_object()
                        .ok_or_else(|| invalid("env must be an object of strings".into()))?;
                    for (key, item) in map {
                        let item = item
                            .as_str()
                            .ok_or_else(|| invalid(format!("env.{key} must be a string")))?;
                        env.insert(key.clone(), item.to_owned());
                    }
                }
                let image = text(value, "image");
                if isolation == Isolation::ContainerIsolated && image.is_none() {
                    return Err(invalid(
                        "isolation container_isolated requires an image".into(),
                    ));
                }
                Ok(Endpoint::Process {
                    isolation,
                    command,
                    env,
                    cwd: text(value, "cwd").map(PathBuf::from),
                    image,
                })
            }
            Some("umbilical") => {
                let event_types = match value.pointer("/filter/event_types") {
                    None => vec!["*".to_owned()],
                    Some(Value::Array(items)) => items
                        .iter()
                        .map(|item| item.as_str().map(str::to_owned))
                        .collect::<Option<_>>()
                        .ok_or_else(|| {
                            invalid("filter.event_types must be an array of strings".into())
                        })?,
                    Some(_) => {
                        return Err(invalid(
                            "filter.event_types must be an array of strings".into(),
                        ));
                    }
                };
                Ok(Endpoint::Umbilical { event_types })
            }
            Some(other) => Err(invalid(format!(
                "kind is ws, tcp, process or umbilical, not '{other}'"
            ))),
            None => Err(invalid(
                "needs a kind (ws, tcp, process or umbilical)".into(),
            )),
        }
    }

    /// What `stream_bindings` shows: the endpoint without `env` values.
    pub fn summary(&self) -> Value {
        match self {
            Endpoint::Ws { connection_id } => {
                json!({ "kind": "ws", "connection_id": connection_id })
            }
            Endpoint::Tcp { host, port } => json!({ "kind": "tcp", "host": host, "port": port }),
            Endpoint::Process {
                isolation,
                command,
                env,
                image,
                ..
            } => {
                let mut summary = json!({
                    "kind": "process",
                    "isolation": isolation.name(),
                    "command": command,
                    "env_keys": env.keys().collect::<Vec<_>>(),
                });
                if let Some(image) = image {
                    summary["image"] = json!(image);
                }
                summary
            }
            Endpoint::Umbilical { event_types } => {
                json!({ "kind": "umbilical", "filter": { "event_types": event_types } })
            }
        }
    }

    fn writable(&self) -> bool {
        !matches!(self, Endpoint::Umbilical { .. })
    }
}

/// Whether `event_type` matches one of `patterns` (exact, `prefix.*` or `*`).
pub fn matches_event(patterns: &[String], event_type: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => event_type.starts_with(prefix),
        None => p == event_type,
    })
}

/// A binding's limits and close policy (`options`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// `idle_timeout_ms`.
    pub idle_timeout: Option<Duration>,
    /// `max_duration_ms`.
    pub max_duration: Option<Duration>,
    /// `max_bytes`: both directions together.
    pub max_bytes: Option<u64>,
    /// `flow_summary_interval_ms`.
    pub flow_summary_interval: Option<Duration>,
    /// `close_a_on_b_close` (default true).
    pub close_a_on_b_close: bool,
    /// `close_b_on_a_close` (default true).
    pub close_b_on_a_close: bool,
    /// `queue_high_water_bytes` (default 4 MiB): the most bytes held between the endpoints
    /// of one direction. The pump reads a chunk only once the previous one is written, so
    /// the chunk size (at most this) bounds the queue.
    pub queue_high_water_bytes: usize,
    /// `drain_timeout_ms` (default 1000): how long a write in progress when the binding
    /// ends, and the closing of each sink, may take before the binding gives them up.
    pub drain_timeout: Duration,
}

/// `queue_high_water_bytes` when the options name none (§5.23).
const DEFAULT_QUEUE_HIGH_WATER_BYTES: usize = 4 * 1024 * 1024;

/// `drain_timeout_ms` when the options name none (§5.23).
const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_millis(1000);

impl Options {
    /// Reads `options` (absent: no limits, both close policies on).
    pub fn parse(value: Option<&Value>) -> Result<Self, StreamError> {
        let value = value.unwrap_or(&Value::Null);
        if !(value.is_null() || value.is_object()) {
            return Err(StreamError::Invalid("options must be an object".into()));
        }
        let number = |key: &str| -> Result<Option<u64>, StreamError> {
            match value.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(item) => item.as_u64().filter(|n| *n > 0).map(Some).ok_or_else(|| {
                    StreamError::Invalid(format!("options.{key} must be a positive integer"))
                }),
            }
        };
        let flag = |key: &str| value.get(key).and_then(Value::as_bool) != Some(false);
        Ok(Options {
            idle_timeout: number("idle_timeout_ms")?.map(Duration::from_millis),
            max_duration: number("max_duration_ms")?.map(Duration::from_millis),
            max_bytes: number("max_bytes")?,
            flow_summary_interval: number("flow_summary_interval_ms")?.map(Duration::from_millis),
            close_a_on_b_close: flag("close_a_on_b_close"),
            close_b_on_a_close: flag("close_b_on_a_close"),
            queue_high_water_bytes: number("queue_high_water_bytes")?
                .map_or(DEFAULT_QUEUE_HIGH_WATER_BYTES, |n| {
                    usize::try_from(n).unwrap_or(usize::MAX)
                }),
            drain_timeout: number("drain_timeout_ms")?
                .map_or(DEFAULT_DRAIN_TIMEOUT, Duration::from_millis),
        })
    }
}

/// One binding request: `stream_bind`'s arguments or a `stream_bindings` declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindRequest {
    /// The source (and, bidirectional, also a sink).
    pub a: Endpoint,
    /// The sink (and, bidirectional, also a source).
    pub b: Endpoint,
    /// Pump both ways.
    pub bidirectional: bool,
    /// Limits and close policy.
    pub options: Options,
    /// Declarations only: reopen after an endpoint closes or fails.
    pub reconnect: bool,
}

impl BindRequest {
    /// Reads `{a, b, bidirectional?, options?, reconnect?}`; umbilical only as `a` (SRV-36),
    /// never with `bidirectional`.
    pub fn parse(value: &Value) -> Result<Self, StreamError> {
        let a = Endpoint::parse(value.get("a").unwrap_or(&Value::Null), "a")?;
        let b = Endpoint::parse(value.get("b").unwrap_or(&Value::Null), "b")?;
        let bidirectional = value.get("bidirectional").and_then(Value::as_bool) == Some(true);
        if !b.writable() {
            return Err(StreamError::Invalid(
                "endpoint b: umbilical is a read-only source and may only be endpoint a".into(),
            ));
        }
        if bidirectional && !a.writable() {
            return Err(StreamError::Invalid(
                "a bidirectional binding needs two writable endpoints; umbilical is read only"
                    .into(),
            ));
        }
        Ok(BindRequest {
            a,
            b,
            bidirectional,
            options: Options::parse(value.get("options"))?,
            reconnect: value.get("reconnect").and_then(Value::as_bool) == Some(true),
        })
    }
}

/// One `tcp_allowlist` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TcpRule {
    host: String,
    ports: Option<Vec<u16>>,
    range: Option<(u16, u16)>,
}

impl TcpRule {
    fn parse(value: &Value) -> Option<Self> {
        let host = value.get("host")?.as_str()?.to_ascii_lowercase();
        let port = |v: &Value| v.as_u64().and_then(|p| u16::try_from(p).ok());
        let mut ports: Option<Vec<u16>> = value.get("port").and_then(port).map(|p| vec![p]);
        if let Some(list) = value.get("ports").and_then(Value::as_array) {
            ports
                .get_or_insert_with(Vec::new)
                .extend(list.iter().filter_map(port));
        }
        let min = value.get("min_port").and_then(port);
        let max = value.get("max_port").and_then(port);
        let range =
            (min.is_some() || max.is_some()).then(|| (min.unwrap_or(1), max.unwrap_or(u16::MAX)));
        Some(TcpRule { host, ports, range })
    }

    fn allows(&self, host: &str, port: u16) -> bool {
        if self.host != "*" && self.host != host.to_ascii_lowercase() {
            return false;
        }
        match (&self.ports, self.range) {
            (None, None) => true,
            (ports, range) => {
                ports.as_ref().is_some_and(|list| list.contains(&port))
                    || range.is_some_and(|(min, max)| (min..=max).contains(&port))
            }
        }
    }
}

/// The agent's `stream_bind` gates (all default false; locked for every agent, §5.17).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gates {
    host_process: bool,
    container_shared: bool,
    container_isolated: bool,
    allow_tcp: bool,
    tcp_allowlist: Vec<TcpRule>,
}

impl Gates {
    /// The gates of an agent config.
    pub fn from_config(config: &Value) -> Self {
        let gates = config.get("stream_bind").unwrap_or(&Value::Null);
        let flag = |key: &str| gates.get(key).and_then(Value::as_bool) == Some(true);
        Gates {
            host_process: flag("host_process_bind"),
            container_shared: flag("container_shared_bind"),
            container_isolated: flag("container_isolated_bind"),
            allow_tcp: flag("allow_tcp_bind"),
            tcp_allowlist: gates
                .get("tcp_allowlist")
                .and_then(Value::as_array)
                .map(|rules| rules.iter().filter_map(TcpRule::parse).collect())
                .unwrap_or_default(),
        }
    }

    /// Whether the gates let the agent use `endpoint` (SRV-37, SRV-38). `ws` and `umbilical`
    /// need no gate: they are the agent's own connections and events.
    pub fn check(&self, endpoint: &Endpoint) -> Result<(), StreamError> {
        match endpoint {
            Endpoint::Ws { .. } | Endpoint::Umbilical { .. } => Ok(()),
            Endpoint::Tcp { host, port } => {
                if !self.allow_tcp {
                    return Err(StreamError::Refused(
                        "tcp endpoints are disabled: stream_bind.allow_tcp_bind is false (an owner setting)".into(),
                    ));
                }
                if !self.tcp_allowlist.iter().any(|r| r.allows(host, *port)) {
                    return Err(StreamError::Refused(format!(
                        "{host}:{port} is not in stream_bind.tcp_allowlist"
                    )));
                }
                Ok(())
            }
            Endpoint::Process { isolation, .. } => {
                let (allowed, flag) = match isolation {
                    Isolation::Host => (self.host_process, "host_process_bind"),
                    Isolation::ContainerShared => (self.container_shared, "container_shared_bind"),
                    Isolation::ContainerIsolated => {
                        (self.container_isolated, "container_isolated_bind")
                    }
                };
                if !allowed {
                    return Err(StreamError::Refused(format!(
                        "process endpoints with isolation {} are disabled: stream_bind.{flag} is false (an owner setting)",
                        isolation.name()
                    )));
                }
                if *isolation != Isolation::Host {
                    return Err(StreamError::NotSupported(format!(
                        "process isolation {} is not supported yet: this runtime runs no containers",
                        isolation.name()
                    )));
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn srv_36_umbilical_only_as_endpoint_a() {
        let umbilical = json!({ "kind": "umbilical" });
        let tcp = json!({ "kind": "tcp", "host": "127.0.0.1", "port": 9 });
        let refused = BindRequest::parse(&json!({ "a": tcp, "b": umbilical })).unwrap_err();
        assert!(
            refused.to_string().contains("only be endpoint a"),
            "{refused}"
        );
        assert!(BindRequest::parse(&json!({ "a": umbilical, "b": tcp })).is_ok());
        let both = BindRequest::parse(&json!({ "a": umbilical, "b": tcp, "bidirectional": true }))
            .unwrap_err();
        assert!(matches!(both, StreamError::Invalid(_)), "{both}");
        let unknown = BindRequest::parse(&json!({ "a": { "kind": "udp" }, "b": tcp })).unwrap_err();
        assert!(unknown.to_string().contains("not 'udp'"), "{unknown}");
    }

    #[test]
    fn srv_37_tcp_needs_the_flag_and_an_allowlist_match() {
        let tcp = |port: u16| Endpoint::Tcp {
            host: "127.0.0.1".into(),
            port,
        };
        let off =
            Gates::from_config(&json!({ "stream_bind": { "tcp_allowlist": [{ "host": "*" }] } }));
        assert!(matches!(
            off.check(&tcp(5432)),
            Err(StreamError::Refused(_))
        ));
        let empty = Gates::from_config(&json!({ "stream_bind": { "allow_tcp_bind": true } }));
        assert!(matches!(
            empty.check(&tcp(5432)),
            Err(StreamError::Refused(_))
        ));
        let gates = Gates::from_config(
            &json!({ "stream_bind": { "allow_tcp_bind": true, "tcp_allowlist": [
            { "host": "127.0.0.1", "port": 5432 },
            { "host": "127.0.0.1", "ports": [6000, 6001] },
            { "host": "127.0.0.1", "min_port": 7000, "max_port": 7010 },
            { "host": "db.local" }
        ] } }),
        );
        for allowed in [5432, 6001, 7000, 7010] {
            assert!(gates.check(&tcp(allowed)).is_ok(), "{allowed}");
        }
        for refused in [5433, 6002, 6999, 7011] {
            let error = gates.check(&tcp(refused)).unwrap_err();
            assert!(
                error.to_string().contains("tcp_allowlist"),
                "{refused}: {error}"
            );
        }
        let any_port = Endpoint::Tcp {
            host: "DB.local".into(),
            port: 1,
        };
        assert!(gates.check(&any_port).is_ok());
    }

    #[test]
    fn srv_38_process_gates_per_isolation_and_the_isolated_image() {
        let missing = Endpoint::parse(
            &json!({ "kind": "process", "isolation": "container_isolated", "command": ["cat"] }),
            "b",
        )
        .unwrap_err();
        assert!(
            missing.to_string().contains("requires an image"),
            "{missing}"
        );
        let no_command = Endpoint::parse(&json!({ "kind": "process", "command": [] }), "b");
        assert!(no_command.is_err());
        let host = Endpoint::parse(&json!({ "kind": "process", "command": ["cat"] }), "b").unwrap();
        let shared = Endpoint::parse(
            &json!({ "kind": "process", "isolation": "container_shared", "command": ["cat"] }),
            "b",
        )
        .unwrap();
        let closed = Gates::default();
        assert!(matches!(closed.check(&host), Err(StreamError::Refused(_))));
        assert!(matches!(
            closed.check(&shared),
            Err(StreamError::Refused(_))
        ));
        let open = Gates::from_config(
            &json!({ "stream_bind": { "host_process_bind": true, "container_shared_bind": true } }),
        );
        assert!(open.check(&host).is_ok());
        assert!(matches!(
            open.check(&shared),
            Err(StreamError::NotSupported(_))
        ));
    }

    #[test]
    fn srv_39_options_parse_with_close_policies_on_by_default() {
        let options = Options::parse(Some(
            &json!({ "idle_timeout_ms": 50, "max_bytes": 10, "close_a_on_b_close": false }),
        ))
        .unwrap();
        assert_eq!(options.idle_timeout, Some(Duration::from_millis(50)));
        assert_eq!(options.max_bytes, Some(10));
        assert!(!options.close_a_on_b_close);
        assert!(options.close_b_on_a_close);
        assert!(Options::parse(Some(&json!({ "max_bytes": -1 }))).is_err());
    }

    #[test]
    fn process_summaries_never_show_env_values() {
        let endpoint = Endpoint::parse(
            &json!({ "kind": "process", "command": ["cat"], "env": { "TOKEN": "s3cret" } }),
            "b",
        )
        .unwrap();
        let shown = endpoint.summary().to_string();
        assert!(
            shown.contains("TOKEN") && !shown.contains("s3cret"),
            "{shown}"
        );
    }
}
