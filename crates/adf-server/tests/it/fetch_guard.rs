//! The daemon registers its control API with the fetch guard when it binds, so no agent's
//! `sys_fetch` or native `fetch` can reach it, on any loopback spelling, flag or not (SRV-22).

use crate::common;

use adf_runtime::fetch::{self, FetchErrorKind, FetchRequest, FetchSettings, Policy};
use common::Harness;

#[tokio::test]
async fn srv_22_daemon_control_api_is_never_fetchable() {
    let h = Harness::start().await;
    let port = h.server.addr.port();
    let permissive = Policy {
        allow_local: true,
        served_origins: Vec::new(),
    };
    for url in [
        h.server.url(),
        format!("http://localhost:{port}/agents"),
        format!("http://0.0.0.0:{port}/agents"),
        format!("http://[::ffff:127.0.0.1]:{port}/agents"),
    ] {
        let error = fetch::fetch(
            FetchRequest::get(url.clone()),
            permissive.clone(),
            FetchSettings::default(),
        )
        .await
        .expect_err(&url);
        assert_eq!(error.kind, FetchErrorKind::Rejected, "{url}: {error}");
        assert!(error.message.contains("control API"), "{url}: {error}");
    }
    h.stop().await;
}
