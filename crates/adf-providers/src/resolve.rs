//! Provider resolution: `model.provider` → a configured [`HttpProvider`] with its key, model id,
//! parameters and retry policy.
//!
//! Lookup order for the provider id: the agent's `config.providers[]` (§5.16, travels with the
//! file), then the runtime's own providers (settings in `$ADF_HOME`), then the built-in ids
//! `anthropic`, `openai` and `openrouter`; an `http(s)://` URL in `model.provider` means an
//! OpenAI-compatible server at that URL.
//!
//! Key order: the key the caller passes (the agent's sealed `provider:<id>:apiKey`, unsealed by
//! the caller), then the runtime settings' key for that id, then the type's environment
//! variable (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`, `OPENROUTER_API_KEY`). The agent's own key
//! wins because it is the most specific choice.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::error::ProviderError;
use super::http::{ApiKey, key_fix, non_empty};
use super::retry::{RetryObserver, RetryPolicy};
use super::types::{ChatRequest, Message, ModelParams, ToolSpec};
use super::{HttpProvider, ProviderKind};

/// One `providers[]` entry (§5.16).
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderConfig {
    /// `id`, referenced by `model.provider` and by `provider:<id>:apiKey`.
    pub id: String,
    /// `type`.
    pub kind: ProviderKind,
    /// `name`, for display.
    pub name: String,
    /// `baseUrl`; the type's default when absent.
    pub base_url: Option<String>,
    /// `defaultModel`, used when `model.model_id` is empty.
    pub default_model: Option<String>,
    /// `params` `{key, value}[]`, applied before the model's own `params`.
    pub params: Vec<(String, String)>,
    /// `requestDelayMs`.
    pub request_delay_ms: u64,
}

impl ProviderConfig {
    /// Reads a `providers[]` entry.
    pub fn from_json(v: &Value) -> Result<Self, ProviderError> {
        let s = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let id = s("id").unwrap_or_default();
        let ty = s("type").unwrap_or_default();
        let kind = ProviderKind::parse(&ty).ok_or_else(|| ProviderError::Config {
            provider: id.clone(),
            message: format!(
                "providers[].type {ty:?} is not one of anthropic, openai, openai-compatible, openrouter"
            ),
        })?;
        let params = crate::types::key_value_params(v);
        Ok(ProviderConfig {
            name: s("name").unwrap_or_else(|| id.clone()),
            id,
            kind,
            base_url: s("baseUrl"),
            default_model: s("defaultModel"),
            params,
            request_delay_ms: v.get("requestDelayMs").and_then(Value::as_u64).unwrap_or(0),
        })
    }

    fn builtin(kind: ProviderKind) -> Self {
        ProviderConfig {
            id: kind.as_str().to_owned(),
            kind,
            name: kind.as_str().to_owned(),
            base_url: None,
            default_model: None,
            params: Vec::new(),
            request_delay_ms: 0,
        }
    }
}

type EnvFn = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Resolves agent configs to providers. Holds the runtime-level settings; cheap to clone.
#[derive(Clone)]
pub struct Resolver {
    runtime_providers: Vec<ProviderConfig>,
    runtime_keys: HashMap<String, ApiKey>,
    env: EnvFn,
    observer: Option<RetryObserver>,
    io: Option<tokio::runtime::Handle>,
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids: Vec<&String> = self.runtime_keys.keys().collect();
        ids.sort();
        f.debug_struct("Resolver")
            .field("runtime_providers", &self.runtime_providers)
            .field("runtime_key_ids", &ids)
            .finish_non_exhaustive()
    }
}

impl Default for Resolver {
    fn default() -> Self {
        Self::new()
    }
}

impl Resolver {
    /// A resolver reading keys from the process environment.
    pub fn new() -> Self {
        Resolver {
            runtime_providers: Vec::new(),
            runtime_keys: HashMap::new(),
            env: Arc::new(|k| std::env::var(k).ok()),
            observer: None,
            io: None,
        }
    }

    /// The runtime the providers this resolver builds send their requests on
    /// ([`HttpProvider::with_io_runtime`]).
    pub fn with_io_runtime(mut self, io: Option<tokio::runtime::Handle>) -> Self {
        self.io = io;
        self
    }

    /// Replaces the environment lookup (tests; embedding runtimes with their own settings).
    pub fn with_env(
        mut self,
        env: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.env = Arc::new(env);
        self
    }

    /// Adds a runtime-level provider (from the runtime settings).
    pub fn with_runtime_provider(mut self, p: ProviderConfig) -> Self {
        self.runtime_providers.retain(|q| q.id != p.id);
        self.runtime_providers.push(p);
        self
    }

    /// Adds a runtime-level key for provider `id`.
    pub fn with_runtime_key(mut self, id: impl Into<String>, key: ApiKey) -> Self {
        self.runtime_keys.insert(id.into(), key);
        self
    }

    /// Observes every scheduled retry of every provider this resolver builds.
    pub fn with_retry_observer(mut self, observer: RetryObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The provider id an agent config names (`model.provider`, trimmed; may be empty).
    pub fn provider_id(config: &Value) -> String {
        config
            .pointer("/model/provider")
            .and_then(Value::as_str)
            .unwrap_or("")
            .trim()
            .to_owned()
    }

    /// Finds the provider entry for `id` (agent file, runtime settings, built-ins, URL).
    pub fn lookup(&self, config: &Value, id: &str) -> Result<ProviderConfig, ProviderError> {
        if id.is_empty() {
            return Err(ProviderError::Config {
                provider: String::new(),
                message: "model.provider is empty: set it to anthropic, openai, openrouter or the id of a providers[] entry".into(),
            });
        }
        let in_file = config
            .get("providers")
            .and_then(Value::as_array)
            .and_then(|a| {
                a.iter()
                    .find(|p| p.get("id").and_then(Value::as_str) == Some(id))
            });
        if let Some(p) = in_file {
            return ProviderConfig::from_json(p);
        }
        if let Some(p) = self.runtime_providers.iter().find(|p| p.id == id) {
            return Ok(p.clone());
        }
        match ProviderKind::parse(id) {
            Some(k) if k != ProviderKind::OpenAiCompatible => {
                return Ok(ProviderConfig::builtin(k));
            }
            _ => {}
        }
        if id.starts_with("http://") || id.starts_with("https://") {
            return Ok(ProviderConfig {
                base_url: Some(id.to_owned()),
                ..ProviderConfig::builtin(ProviderKind::OpenAiCompatible)
            });
        }
        Err(ProviderError::Config {
            provider: id.to_owned(),
            message: format!(
                "provider {id:?} not found: add it to config.providers ({{id, type, baseUrl}}) or the runtime settings, or use anthropic, openai or openrouter"
            ),
        })
    }

    /// Resolves `config` (a whole agent config) with the caller's key for the agent, if any.
    pub fn resolve(
        &self,
        config: &Value,
        agent_key: Option<ApiKey>,
    ) -> Result<ResolvedModel, ProviderError> {
        let id = Self::provider_id(config);
        let pc = self.lookup(config, &id)?;
        let base_url = pc
            .base_url
            .clone()
            .or_else(|| pc.kind.default_base_url().map(str::to_owned))
            .ok_or_else(|| ProviderError::Config {
                provider: id.clone(),
                message: "an openai-compatible provider needs a baseUrl (e.g. http://localhost:11434/v1 for Ollama)".into(),
            })?;
        let model = config.get("model").cloned().unwrap_or(Value::Null);
        let model_id = model
            .get("model_id")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .or_else(|| pc.default_model.clone())
            .ok_or_else(|| ProviderError::Config {
                provider: id.clone(),
                message: "model.model_id is empty and the provider has no defaultModel".into(),
            })?;
        let key = non_empty(agent_key)
            .or_else(|| non_empty(self.runtime_keys.get(&id).cloned()))
            .or_else(|| {
                non_empty(
                    pc.kind
                        .env_var()
                        .and_then(|v| (self.env)(v))
                        .map(ApiKey::new),
                )
            });
        if key.is_none() && pc.kind.requires_key() {
            return Err(ProviderError::MissingKey {
                provider: id.clone(),
                fix: key_fix(&id, pc.kind),
            });
        }
        let mut params = ModelParams::from_model_config(&model);
        let mut merged = pc.params.clone();
        merged.append(&mut params.params);
        params.params = merged;
        let mut retry = RetryPolicy::from_recovery(config.get("recovery"));
        retry.observer = self.observer.clone();
        let provider = HttpProvider::new(id.clone(), pc.kind, &base_url, key)
            .with_retry(retry)
            .with_request_delay(Duration::from_millis(pc.request_delay_ms))
            .with_daemon_record(super::control::daemon_record_path(&*self.env))
            .with_io_runtime(self.io.clone());
        Ok(ResolvedModel {
            provider: Arc::new(provider),
            model_id,
            params,
        })
    }
}

/// A provider ready for an agent: the client, the model id and the §5.18 parameters.
#[derive(Debug, Clone)]
pub struct ResolvedModel {
    /// The provider (coerces to `Arc<dyn Provider>`).
    pub provider: Arc<HttpProvider>,
    /// The model id to request.
    pub model_id: String,
    /// Sampling, reasoning and extra parameters.
    pub params: ModelParams,
}

impl ResolvedModel {
    /// A request for this model.
    pub fn request(
        &self,
        system: Option<String>,
        messages: Vec<Message>,
        tools: Vec<ToolSpec>,
    ) -> ChatRequest {
        ChatRequest {
            model: self.model_id.clone(),
            system,
            messages,
            tools: tools.into(),
            params: self.params.clone(),
            wire: crate::WireCache::default(),
        }
    }
}
