//! The response side: a route lambda's `{status, headers?, body}` (§12.1) as HTTP, and the
//! JSON errors `{error, code}` serving answers with.

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The codes of serving's own errors (the `code` member of the JSON error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// 404: no agent by that key.
    AgentNotFound,
    /// 404: no route, public file or shared file at that path.
    NotFound,
    /// 405: a route has that path, for other methods.
    MethodNotAllowed,
    /// 400: the path or body cannot be read.
    BadRequest,
    /// 413: the body is larger than [`crate::ServingLimits::max_body_bytes`].
    BodyTooLarge,
    /// 503: the agent has too many requests in flight.
    AgentBusy,
    /// 503: the agent is `off`.
    AgentOff,
    /// 500: the route lambda threw or failed.
    LambdaError,
    /// 504: the route lambda ran out of time.
    LambdaTimeout,
    /// 504: the request as a whole ran out of time.
    RequestTimeout,
    /// 502: the lambda returned something other than `{status, headers?, body}`.
    InvalidRouteResponse,
    /// The route's middleware rejected the request (its status).
    MiddlewareRejected,
    /// 500: the file could not be opened or read.
    Internal,
}

impl ErrorCode {
    /// The code as the JSON error spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::AgentNotFound => "AGENT_NOT_FOUND",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            ErrorCode::BadRequest => "BAD_REQUEST",
            ErrorCode::BodyTooLarge => "BODY_TOO_LARGE",
            ErrorCode::AgentBusy => "AGENT_BUSY",
            ErrorCode::AgentOff => "AGENT_OFF",
            ErrorCode::LambdaError => "LAMBDA_ERROR",
            ErrorCode::LambdaTimeout => "LAMBDA_TIMEOUT",
            ErrorCode::RequestTimeout => "REQUEST_TIMEOUT",
            ErrorCode::InvalidRouteResponse => "INVALID_ROUTE_RESPONSE",
            ErrorCode::MiddlewareRejected => "MIDDLEWARE_REJECTED",
            ErrorCode::Internal => "INTERNAL_ERROR",
        }
    }

    /// The HTTP status of the code (a middleware rejection carries its own).
    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::AgentNotFound | ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
            ErrorCode::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::AgentBusy | ErrorCode::AgentOff => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::LambdaError | ErrorCode::Internal | ErrorCode::MiddlewareRejected => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            ErrorCode::LambdaTimeout | ErrorCode::RequestTimeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorCode::InvalidRouteResponse => StatusCode::BAD_GATEWAY,
        }
    }
}

/// `{error, code}` with the code's status.
pub fn error_response(code: ErrorCode, message: &str) -> Response {
    Shaped::error(code, message).into_response()
}

/// A response as plain data (so it can be cached and built on a blocking thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shaped {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Shaped {
    pub(crate) fn error(code: ErrorCode, message: &str) -> Shaped {
        Shaped::error_with_status(code.status().as_u16(), code, message)
    }

    pub(crate) fn error_with_status(status: u16, code: ErrorCode, message: &str) -> Shaped {
        Shaped {
            status,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                (CSP.into(), CSP_SANDBOX.into()),
            ],
            body: json!({ "error": message, "code": code.as_str() })
                .to_string()
                .into_bytes(),
        }
    }

    /// Adds `Content-Security-Policy: sandbox` unless it is there: a document the agent
    /// serves runs in an opaque origin (no `allow-same-origin`), so its script can neither
    /// read nor send as the daemon's origin. A policy the agent set itself stays: a browser
    /// enforces every policy it is sent, so it can narrow this one, never widen it.
    pub(crate) fn sandbox(&mut self) {
        let present = self
            .headers
            .iter()
            .any(|(n, v)| n == CSP && v == CSP_SANDBOX);
        if !present {
            self.headers.push((CSP.into(), CSP_SANDBOX.into()));
        }
    }

    /// A file's bytes with its MIME type.
    pub(crate) fn file(mime: &str, body: Vec<u8>) -> Shaped {
        Shaped {
            status: 200,
            headers: vec![("content-type".into(), mime.to_owned())],
            body,
        }
    }

    fn has_header(&self, name: &str) -> bool {
        self.headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    pub(crate) fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, Body::from(self.body)).into_response();
        let headers = response.headers_mut();
        for (name, value) in self.headers {
            // Checked when the lambda's answer was read; a bad one here is skipped.
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&value),
            ) {
                headers.append(name, value);
            }
        }
        headers
            .entry(header::X_CONTENT_TYPE_OPTIONS)
            .or_insert(HeaderValue::from_static("nosniff"));
        response
    }
}

/// Headers a lambda may not set: the server frames the body itself, and a cookie set on the
/// daemon's host would reach the Studio (browsers do not keep cookies apart by port) while
/// agent code never sees a cookie anyway (`request::WITHHELD_HEADERS`).
const DROPPED_HEADERS: [&str; 4] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "set-cookie",
];

/// The header every answer of an agent carries unless the owner opted out.
pub(crate) const CSP: &str = "content-security-policy";
/// Its value: a unique opaque origin, scripts allowed, nothing same-origin.
pub(crate) const CSP_SANDBOX: &str =
    "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads";

/// Reads a lambda's return value as `HttpResponse {status, headers?, body}`: the body is
/// sent as text (a string; `text/plain; charset=utf-8` unless the lambda set a type), bytes
/// (a `Uint8Array`; `application/octet-stream`), or JSON (anything else but `null`).
pub(crate) fn from_lambda(value: &Value) -> Result<Shaped, String> {
    let Value::Object(object) = value else {
        return Err("the route lambda must return {status, headers?, body}".into());
    };
    let status = object
        .get("status")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .filter(|s| (100..=599).contains(s))
        .ok_or("the route lambda's status must be a number from 100 to 599")?;
    let mut headers = Vec::new();
    match object.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(given)) => {
            for (name, value) in given {
                let value = match value {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    _ => return Err(format!("header '{name}' must be a string")),
                };
                let lower = name.to_ascii_lowercase();
                if HeaderName::from_bytes(lower.as_bytes()).is_err()
                    || HeaderValue::from_str(&value).is_err()
                {
                    return Err(format!("header '{name}' is not a valid HTTP header"));
                }
                if DROPPED_HEADERS.contains(&lower.as_str()) {
                    continue;
                }
                headers.push((lower, value));
            }
        }
        Some(_) => return Err("the route lambda's headers must be an object".into()),
    }
    let (body, default_type) = match object.get("body") {
        None | Some(Value::Null) => (Vec::new(), None),
        Some(Value::String(text)) => (text.as_bytes().to_vec(), Some("text/plain; charset=utf-8")),
        Some(other) => match adf_sandbox::value_bytes(other) {
            Some(bytes) => (bytes, Some("application/octet-stream")),
            None => (other.to_string().into_bytes(), Some("application/json")),
        },
    };
    let mut shaped = Shaped {
        status,
        headers,
        body,
    };
    if let Some(default_type) = default_type
        && !shaped.has_header("content-type")
    {
        shaped
            .headers
            .push(("content-type".into(), default_type.into()));
    }
    Ok(shaped)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn content_type(shaped: &Shaped) -> &str {
        shaped
            .headers
            .iter()
            .find(|(n, _)| n == "content-type")
            .map(|(_, v)| v.as_str())
            .unwrap()
    }

    #[test]
    fn srv_05_text_json_and_bytes_bodies() {
        let text = from_lambda(&json!({"status": 200, "body": "hi"})).unwrap();
        assert_eq!(text.body, b"hi");
        assert_eq!(content_type(&text), "text/plain; charset=utf-8");
        let json_body = from_lambda(&json!({"status": 201, "body": {"a": [1]}})).unwrap();
        assert_eq!(json_body.status, 201);
        assert_eq!(json_body.body, br#"{"a":[1]}"#);
        assert_eq!(content_type(&json_body), "application/json");
        let bytes = from_lambda(&json!({
            "status": 200,
            "body": adf_sandbox::bytes_value(&[0, 1, 255]),
        }))
        .unwrap();
        assert_eq!(bytes.body, vec![0, 1, 255]);
        assert_eq!(content_type(&bytes), "application/octet-stream");
        let html = from_lambda(&json!({
            "status": 200,
            "headers": {"Content-Type": "text/html", "X-N": 3, "Content-Length": "999"},
            "body": "<p>",
        }))
        .unwrap();
        assert_eq!(content_type(&html), "text/html");
        assert!(html.headers.contains(&("x-n".into(), "3".into())));
        assert!(!html.headers.iter().any(|(n, _)| n == "content-length"));
        let empty = from_lambda(&json!({"status": 204})).unwrap();
        assert!(empty.body.is_empty());
    }

    #[test]
    fn answers_that_are_not_http_responses_are_refused() {
        for bad in [
            json!("hello"),
            json!({"body": "no status"}),
            json!({"status": 99}),
            json!({"status": 600}),
            json!({"status": 200, "headers": "x"}),
            json!({"status": 200, "headers": {"bad name": "x"}}),
            json!({"status": 200, "headers": {"x": "line\nbreak"}}),
            json!({"status": 200, "headers": {"x": {"nested": 1}}}),
        ] {
            assert!(from_lambda(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_are_json_with_a_code() {
        let shaped = Shaped::error(ErrorCode::BodyTooLarge, "too big");
        assert_eq!(shaped.status, 413);
        let body: Value = serde_json::from_slice(&shaped.body).unwrap();
        assert_eq!(body, json!({"error": "too big", "code": "BODY_TOO_LARGE"}));
    }
}
