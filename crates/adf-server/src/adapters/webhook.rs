//! The public webhook route of channel adapters that are pushed to (WhatsApp's Cloud API):
//! `GET`/`POST /agents/{handle}/adapters/{type}/webhook`. A leaf: the front door asks
//! [`is_webhook_route`] to let it through without the token (the adapter authenticates each
//! request: a signature, a verify token), and `api::webhooks` hands it to the running adapter.

/// The most a webhook body may carry: the Cloud API batches small JSON notifications.
pub(crate) const MAX_WEBHOOK_BYTES: usize = 4 * 1024 * 1024;

/// Whether `method path` is an adapter webhook request (public, like the mesh routes).
pub(crate) fn is_webhook_route(method: &axum::http::Method, path: &str) -> bool {
    if !matches!(method.as_str(), "GET" | "POST") {
        return false;
    }
    let Some(rest) = path.strip_prefix("/agents/") else {
        return false;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    matches!(
        parts.as_slice(),
        [handle, "adapters", kind, "webhook"] if !handle.is_empty() && !kind.is_empty()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    #[test]
    fn only_get_and_post_of_the_exact_shape_are_webhook_routes() {
        assert!(is_webhook_route(
            &Method::POST,
            "/agents/bot/adapters/whatsapp/webhook"
        ));
        assert!(is_webhook_route(
            &Method::GET,
            "/agents/bot/adapters/whatsapp/webhook"
        ));
        for (method, path) in [
            (Method::DELETE, "/agents/bot/adapters/whatsapp/webhook"),
            (Method::POST, "/agents/bot/adapters/whatsapp"),
            (Method::POST, "/agents/bot/adapters/whatsapp/webhook/x"),
            (Method::POST, "/agents//adapters/whatsapp/webhook"),
            (Method::POST, "/agents/bot/adapters//webhook"),
            (Method::POST, "/agents/bot/config"),
        ] {
            assert!(!is_webhook_route(&method, path), "{method} {path}");
        }
    }
}
