//! Webhooks: a platform that pushes to the agent (WhatsApp's Cloud API) calls the daemon's
//! public route `/agents/{handle}/adapters/{type}/webhook`; the daemon hands the request as it
//! came to the running adapter ([`crate::Adapter::webhook`]) and answers what the adapter says.
//! The adapter, not the daemon, authenticates the request (a signature or a verify token),
//! before it stores anything.

/// One webhook request, as the daemon received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookRequest {
    /// `GET` or `POST` (upper case).
    pub method: String,
    /// The query string's pairs, percent-decoded, in order.
    pub query: Vec<(String, String)>,
    /// The headers, names lower case, in order.
    pub headers: Vec<(String, String)>,
    /// The raw body: a signature covers these exact bytes.
    pub body: Vec<u8>,
}

impl WebhookRequest {
    /// The first query value named `name`.
    pub fn query_value(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// The answer to a webhook request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookResponse {
    /// The HTTP status.
    pub status: u16,
    /// The body's content type.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

impl WebhookResponse {
    /// A `text/plain` answer.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        WebhookResponse {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into().into_bytes(),
        }
    }

    /// A JSON answer.
    pub fn json(status: u16, body: &serde_json::Value) -> Self {
        WebhookResponse {
            status,
            content_type: "application/json",
            body: body.to_string().into_bytes(),
        }
    }

    /// A JSON error answer.
    pub fn error(status: u16, message: &str) -> Self {
        Self::json(status, &serde_json::json!({ "error": message }))
    }
}
