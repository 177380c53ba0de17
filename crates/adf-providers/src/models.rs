//! A vendor's model list (`GET {baseUrl}/models`), for the owner's model picker: the same
//! base URL, key, headers, HTTP client (`adf-egress`) and control-API check (rule 2 of §5.6)
//! as a model request.

use serde_json::Value;

use super::error::ProviderError;
use super::{ANTHROPIC_VERSION, HttpProvider, ProviderKind, control, http};

/// Pages of a paginated list read at most (Anthropic pages 1,000 ids at a time).
const MAX_PAGES: usize = 20;

impl HttpProvider {
    /// The ids of the models the vendor lists, in its order: OpenAI, OpenRouter and
    /// compatible servers answer `{data: [{id}]}`; Anthropic pages with `has_more`/`last_id`.
    pub async fn list_models(&self) -> Result<Vec<String>, ProviderError> {
        if self.kind.requires_key() && self.key.is_none() {
            return Err(ProviderError::MissingKey {
                provider: self.id.clone(),
                fix: http::key_fix(&self.id, self.kind),
            });
        }
        let client = http::client(&self.id)?;
        let url = format!("{}/models", self.base_url);
        control::refuse_control_api(&self.id, &url, self.daemon_record.as_deref()).await?;
        let mut ids = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut page = reqwest::Url::parse(&url).map_err(|e| ProviderError::Config {
                provider: self.id.clone(),
                message: format!("the model list URL {url} is not a URL: {e}"),
            })?;
            if self.kind == ProviderKind::Anthropic {
                let mut query = page.query_pairs_mut();
                query.append_pair("limit", "1000");
                if let Some(after) = &after {
                    query.append_pair("after_id", after);
                }
            }
            let mut rb = client.get(page);
            match self.kind {
                ProviderKind::Anthropic => {
                    rb = rb.header("anthropic-version", ANTHROPIC_VERSION);
                    if let Some(k) = &self.key {
                        rb = rb.header("x-api-key", k.expose());
                    }
                }
                _ => {
                    if let Some(k) = &self.key {
                        rb = rb.bearer_auth(k.expose());
                    }
                }
            }
            let resp = rb
                .send()
                .await
                .map_err(|e| http::transport_error(&self.id, &e))?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let text = resp
                .text()
                .await
                .map_err(|e| http::transport_error(&self.id, &e))?;
            if !status.is_success() {
                return Err(http::status_error(
                    &self.id,
                    self.kind,
                    "",
                    status.as_u16(),
                    &headers,
                    &text,
                    self.key.as_ref(),
                ));
            }
            let body: Value = serde_json::from_str(&text).map_err(|e| ProviderError::Protocol {
                provider: self.id.clone(),
                message: format!("the model list is not JSON: {e}"),
            })?;
            let Some(data) = body.get("data").and_then(Value::as_array) else {
                return Err(ProviderError::Protocol {
                    provider: self.id.clone(),
                    message: "the model list has no `data` array".into(),
                });
            };
            ids.extend(
                data.iter()
                    .filter_map(|m| m.get("id").and_then(Value::as_str))
                    .map(str::to_owned),
            );
            let more = self.kind == ProviderKind::Anthropic
                && body.get("has_more").and_then(Value::as_bool) == Some(true);
            after = body
                .get("last_id")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if !more || after.is_none() {
                break;
            }
        }
        Ok(ids)
    }
}
