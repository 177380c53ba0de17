//! The request side: the agent key and relative path of `/agents/{key}/…`, route patterns,
//! and the `HttpRequest` a route lambda receives (§12.1).

use axum::extract::Query;
use axum::http::{HeaderMap, Uri, header};
use serde_json::{Map, Value, json};

/// `(key, rest)` of `/agents/{key}/{rest}`: `rest` is what follows the key's slash (maybe
/// empty, for the public index). `None` for any other path, or for `/agents/{key}` alone.
pub(crate) fn split_agent_path(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/agents/")?;
    let (key, tail) = rest.split_once('/')?;
    (!key.is_empty()).then_some((key, tail))
}

/// Percent-decodes one path (`%20` → space); `None` when the bytes are not UTF-8 or an
/// escape is malformed.
pub(crate) fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The decoded segments of a relative path, or `None` when one is `.` or `..` or holds a
/// NUL: such a path names no file and no route.
pub(crate) fn segments(rest: &str) -> Option<Vec<String>> {
    let decoded = percent_decode(rest)?;
    let parts: Vec<String> = decoded
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if parts
        .iter()
        .any(|s| s == "." || s == ".." || s.contains('\0'))
    {
        return None;
    }
    Some(parts)
}

/// Matches a route path (`/status`, `/users/:id`, `/users/{id}`, `/files/*`) against the
/// request's segments; the captured parameters on a match (`*` captures the rest as `*`).
pub(crate) fn match_route(pattern: &str, segments: &[String]) -> Option<Map<String, Value>> {
    let mut params = Map::new();
    let parts: Vec<&str> = pattern.split('/').filter(|s| !s.is_empty()).collect();
    for (index, part) in parts.iter().enumerate() {
        if *part == "*" && index + 1 == parts.len() {
            let rest = segments.get(index..).unwrap_or_default().join("/");
            params.insert("*".into(), Value::String(rest));
            return Some(params);
        }
        let segment = segments.get(index)?;
        if let Some(name) = part
            .strip_prefix(':')
            .or_else(|| part.strip_prefix('{').and_then(|p| p.strip_suffix('}')))
        {
            params.insert(name.to_owned(), Value::String(segment.clone()));
        } else if part != segment {
            return None;
        }
    }
    (parts.len() == segments.len()).then_some(params)
}

/// Request headers agent code never sees: the browser sends the owner's Studio session
/// cookie to every port of the daemon's host, and a client may send the daemon's token.
pub const WITHHELD_HEADERS: [&str; 3] = ["cookie", "authorization", "proxy-authorization"];

/// The request's headers as one lowercase name → value map (repeated headers joined with
/// `, `; values that are not visible ASCII/UTF-8 left out; [`WITHHELD_HEADERS`] left out).
pub(crate) fn header_map(headers: &HeaderMap) -> Map<String, Value> {
    let mut out = Map::new();
    for (name, value) in headers {
        if WITHHELD_HEADERS.contains(&name.as_str()) {
            continue;
        }
        let Ok(value) = value.to_str() else { continue };
        match out.get_mut(name.as_str()) {
            Some(Value::String(existing)) => {
                existing.push_str(", ");
                existing.push_str(value);
            }
            _ => {
                out.insert(name.as_str().to_owned(), Value::String(value.to_owned()));
            }
        }
    }
    out
}

/// The query string as a map (a repeated key keeps its last value).
pub(crate) fn query_map(uri: &Uri) -> Map<String, Value> {
    Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|Query(pairs)| {
            pairs
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect()
        })
        .unwrap_or_default()
}

/// Why a body cannot be given to a lambda.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BadBody(pub(crate) String);

/// The body as the lambda sees it: nothing → `null`; `application/json` (or `+json`) →
/// the parsed value; text (`text/*`, forms, or any valid UTF-8 without a binary type) → a
/// string; anything else → bytes (a `Uint8Array`).
pub(crate) fn body_value(headers: &HeaderMap, body: &[u8]) -> Result<Value, BadBody> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    let essence = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    if essence == "application/json" || essence.ends_with("+json") {
        return serde_json::from_slice(body)
            .map_err(|e| BadBody(format!("the body is not valid JSON: {e}")));
    }
    let binary = essence == "application/octet-stream"
        || essence.starts_with("image/")
        || essence.starts_with("audio/")
        || essence.starts_with("video/");
    match std::str::from_utf8(body) {
        Ok(text) if !binary => Ok(Value::String(text.to_owned())),
        _ => Ok(adf_sandbox::bytes_value(body)),
    }
}

/// `HttpRequest {method, path, params, query, headers, body}` (§12.1); `path` is the path
/// under the agent, with its leading slash.
pub(crate) fn http_request(
    method: &str,
    path: &str,
    params: Map<String, Value>,
    query: Map<String, Value>,
    headers: Map<String, Value>,
    body: Value,
) -> Value {
    json!({
        "method": method,
        "path": path,
        "params": params,
        "query": query,
        "headers": headers,
        "body": body,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn segs(path: &str) -> Vec<String> {
        segments(path).unwrap()
    }

    #[test]
    fn agent_paths_split_into_key_and_rest() {
        assert_eq!(
            split_agent_path("/agents/bob/hello"),
            Some(("bob", "hello"))
        );
        assert_eq!(split_agent_path("/agents/bob/"), Some(("bob", "")));
        assert_eq!(split_agent_path("/agents/bob/a/b"), Some(("bob", "a/b")));
        assert_eq!(split_agent_path("/agents/bob"), None);
        assert_eq!(split_agent_path("/agents//x"), None);
        assert_eq!(split_agent_path("/health"), None);
    }

    #[test]
    fn dot_segments_and_bad_escapes_name_nothing() {
        assert_eq!(segs("a/b%20c/"), vec!["a", "b c"]);
        assert!(segments("a/../secret.md").is_none());
        assert!(segments("a/%2e%2e/secret.md").is_none());
        assert!(segments("a/%zz").is_none());
        assert!(segments("a/%ff").is_none());
    }

    #[test]
    fn srv_05_route_patterns_capture_params() {
        let params = match_route("/users/:id/posts/{post}", &segs("users/7/posts/x")).unwrap();
        assert_eq!(params["id"], "7");
        assert_eq!(params["post"], "x");
        assert!(match_route("/users/:id", &segs("users")).is_none());
        assert!(match_route("/users/:id", &segs("users/1/2")).is_none());
        assert!(match_route("/status", &segs("status/")).is_some());
        assert!(match_route("/status", &segs("other")).is_none());
        let rest = match_route("/files/*", &segs("files/a/b.txt")).unwrap();
        assert_eq!(rest["*"], "a/b.txt");
        assert!(match_route("/", &segs("")).is_some());
    }

    #[test]
    fn bodies_take_the_shape_of_their_content_type() {
        let mut json_headers = HeaderMap::new();
        json_headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        assert_eq!(
            body_value(&json_headers, br#"{"a":1}"#).unwrap(),
            json!({"a": 1})
        );
        assert!(body_value(&json_headers, b"{").is_err());
        assert_eq!(body_value(&HeaderMap::new(), b"").unwrap(), Value::Null);
        assert_eq!(body_value(&HeaderMap::new(), b"hi").unwrap(), json!("hi"));
        let mut binary = HeaderMap::new();
        binary.insert(
            header::CONTENT_TYPE,
            "application/octet-stream".parse().unwrap(),
        );
        assert_eq!(
            adf_sandbox::value_bytes(&body_value(&binary, b"hi").unwrap()).unwrap(),
            b"hi"
        );
        assert_eq!(
            adf_sandbox::value_bytes(&body_value(&HeaderMap::new(), &[0xff, 0]).unwrap()).unwrap(),
            vec![0xff, 0]
        );
    }

    #[test]
    fn repeated_headers_join_and_query_keeps_the_last_value() {
        let mut headers = HeaderMap::new();
        headers.append("x-a", "1".parse().unwrap());
        headers.append("x-a", "2".parse().unwrap());
        assert_eq!(header_map(&headers)["x-a"], "1, 2");
        let uri: Uri = "/agents/b/x?a=1&b=two%20words&a=3".parse().unwrap();
        let query = query_map(&uri);
        assert_eq!(query["a"], "3");
        assert_eq!(query["b"], "two words");
    }
}
