//! Secret redaction for `sys_get_config` (tools guide: MCP server `env`/`headers`, provider
//! credentials, and secret-named `model`/provider params become `__redacted__`; the keys stay
//! so the agent sees which credentials exist without reading them).

use serde_json::{Map, Value};

/// What a redacted value reads as.
pub const REDACTED: &str = "__redacted__";

/// Fields whose every value is material (static env vars and HTTP headers of MCP servers,
/// process endpoints, adapters): the keys stay, the values go.
const VALUE_MAPS: [&str; 2] = ["env", "headers"];

/// Words that make a field name secret wherever it appears.
const SECRET_WORDS: [&str; 12] = [
    "key",
    "apikey",
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "credential",
    "credentials",
    "authorization",
    "bearer",
    "cookie",
];

/// Last words that make a secret-looking name a pointer to a secret rather than the secret
/// (`bearer_token_env_var`, `credential_ref`, `credential_files`, `key_id`).
const POINTER_WORDS: [&str; 10] = [
    "env", "var", "ref", "refs", "id", "name", "path", "file", "files", "schema",
];

/// A copy of `config` with every secret value replaced by [`REDACTED`].
pub fn redact(config: &Value) -> Value {
    let mut copy = config.clone();
    redact_in_place(&mut copy);
    copy
}

fn redact_in_place(value: &mut Value) {
    match value {
        Value::Object(map) => {
            redact_param_pair(map);
            for (key, child) in map.iter_mut() {
                if VALUE_MAPS.contains(&key.as_str()) || is_secret_name(key) {
                    redact_all(child);
                } else {
                    redact_in_place(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_in_place),
        _ => {}
    }
}

/// `{key: "api_key", value: "..."}` pairs (`model.params`, `providers[].params`) hide the
/// value when the key names a secret.
fn redact_param_pair(map: &mut Map<String, Value>) {
    let secret = map
        .get("key")
        .and_then(Value::as_str)
        .is_some_and(is_secret_name);
    if secret && let Some(value) = map.get_mut("value") {
        redact_all(value);
    }
}

/// Replaces every leaf under `value`, keeping object keys. Empty strings and nulls stay: they
/// carry no material and show the owner that a credential is missing.
fn redact_all(value: &mut Value) {
    match value {
        Value::Object(map) => map.values_mut().for_each(redact_all),
        Value::Array(items) => items.iter_mut().for_each(redact_all),
        Value::Null => {}
        Value::String(text) if text.is_empty() => {}
        other => *other = Value::String(REDACTED.to_owned()),
    }
}

/// Whether a field name names secret material: one of its words (split on `_`, `-`, `.` and
/// camelCase) is a secret word, and it is not a pointer to a secret. The bare word `key` is a
/// name field (`env_schema[].key`, param pairs), not a secret.
pub fn is_secret_name(name: &str) -> bool {
    let words = words(name);
    if words.len() == 1 && words[0] == "key" {
        return false;
    }
    if words
        .last()
        .is_some_and(|last| POINTER_WORDS.contains(&last.as_str()))
    {
        return false;
    }
    words.iter().any(|w| SECRET_WORDS.contains(&w.as_str()))
}

fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for ch in name.chars() {
        if !ch.is_alphanumeric() {
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
            previous_lower = false;
            continue;
        }
        if ch.is_uppercase() && previous_lower && !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
        previous_lower = ch.is_lowercase() || ch.is_ascii_digit();
        current.extend(ch.to_lowercase());
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_names() {
        for secret in [
            "apiKey",
            "api_key",
            "OPENAI_API_KEY",
            "x-api-key",
            "Authorization",
            "access_token",
            "client_secret",
            "password",
            "token",
        ] {
            assert!(is_secret_name(secret), "{secret}");
        }
        for plain in [
            "key",
            "max_tokens",
            "env_keys",
            "bearer_token_env_var",
            "credential_ref",
            "credential_files",
            "auth",
            "keepalive_interval_ms",
            "model_id",
        ] {
            assert!(!is_secret_name(plain), "{plain}");
        }
    }

    #[test]
    fn redacts_values_and_keeps_keys() {
        let config = json!({
            "model": { "max_tokens": 10, "params": [{ "key": "api_key", "value": "s1" }, { "key": "seed", "value": "7" }] },
            "mcp": { "servers": [{ "name": "gh", "env": { "GITHUB_TOKEN": "s2", "EMPTY": "" }, "headers": { "X-Trace": "s3" }, "env_schema": [{ "key": "GITHUB_TOKEN", "scope": "agent" }] }] },
            "providers": [{ "id": "p", "apiKey": "s4", "baseUrl": "https://x" }],
        });
        assert_eq!(
            redact(&config),
            json!({
                "model": { "max_tokens": 10, "params": [{ "key": "api_key", "value": REDACTED }, { "key": "seed", "value": "7" }] },
                "mcp": { "servers": [{ "name": "gh", "env": { "GITHUB_TOKEN": REDACTED, "EMPTY": "" }, "headers": { "X-Trace": REDACTED }, "env_schema": [{ "key": "GITHUB_TOKEN", "scope": "agent" }] }] },
                "providers": [{ "id": "p", "apiKey": REDACTED, "baseUrl": "https://x" }],
            })
        );
    }
}
