//! A `tools/call` result mapped to what the model and `adf` code get: text alone stays text;
//! images, audio, resources and structured content come back as an object whose `content`
//! lists each block as MCP gives it; `isError` becomes the call's error.

use adf_runtime::tools::{ErrorCode, ToolError};
use rmcp::model::CallToolResult;
use serde_json::{Map, Value, json};
use zeroize::Zeroizing;

/// Replaces each secret value by the redaction marker, so a server that echoes a credential
/// does not hand it to the model or the logs.
pub fn redact(text: &str, secrets: &[Zeroizing<String>]) -> String {
    let mut out = text.to_owned();
    for secret in secrets {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), "__redacted__");
        }
    }
    out
}

fn redact_value(value: &mut Value, secrets: &[Zeroizing<String>]) {
    match value {
        Value::String(text) => *text = redact(text, secrets),
        Value::Array(items) => items.iter_mut().for_each(|v| redact_value(v, secrets)),
        Value::Object(map) => map.values_mut().for_each(|v| redact_value(v, secrets)),
        _ => {}
    }
}

/// Maps a result (see the module docs). `secrets` are redacted from every string.
pub fn map(result: CallToolResult, secrets: &[Zeroizing<String>]) -> Result<Value, ToolError> {
    let mut wire = serde_json::to_value(&result)
        .map_err(|e| ToolError::failed(format!("the MCP result could not be read: {e}")))?;
    redact_value(&mut wire, secrets);
    let blocks: Vec<Value> = wire
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let texts: Vec<&str> = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    let only_text = texts.len() == blocks.len();
    let structured = wire.get("structuredContent").cloned();
    if result.is_error == Some(true) {
        let message = if texts.is_empty() {
            "the MCP tool reported an error without a message".to_owned()
        } else {
            texts.join("\n")
        };
        return Err(ToolError::new(ErrorCode::ToolError, message));
    }
    if only_text && structured.is_none() {
        return Ok(Value::String(texts.join("\n")));
    }
    let mut out = Map::new();
    if !texts.is_empty() {
        out.insert("text".into(), Value::String(texts.join("\n")));
    }
    out.insert("content".into(), Value::Array(blocks));
    if let Some(structured) = structured {
        out.insert("structuredContent".into(), structured);
    }
    Ok(json!(out))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn result(value: Value) -> CallToolResult {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn text_only_results_are_text_and_secrets_are_redacted() {
        let r = result(
            json!({"content": [{"type": "text", "text": "a s3cret b"}, {"type": "text", "text": "c"}]}),
        );
        let secrets = vec![Zeroizing::new("s3cret".to_owned())];
        assert_eq!(map(r, &secrets).unwrap(), json!("a __redacted__ b\nc"));
    }

    #[test]
    fn images_and_resources_keep_their_blocks() {
        let r = result(json!({"content": [
            {"type": "text", "text": "see"},
            {"type": "image", "data": "aGk=", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///x", "text": "body"}}
        ]}));
        let v = map(r, &[]).unwrap();
        assert_eq!(v["text"], json!("see"));
        assert_eq!(v["content"][1]["mimeType"], json!("image/png"));
        assert_eq!(v["content"][2]["resource"]["text"], json!("body"));
    }

    #[test]
    fn is_error_becomes_the_calls_error() {
        let r = result(
            json!({"content": [{"type": "text", "text": "no such issue"}], "isError": true}),
        );
        let error = map(r, &[]).unwrap_err();
        assert_eq!(error.code, ErrorCode::ToolError);
        assert_eq!(error.message, "no such issue");
    }
}
