//! `adf-studio`: the Studio, the owner's web page for watching, steering and editing the
//! agents of a daemon.
//!
//! The page is three embedded assets (`index.html`, `studio.css`, `studio.js`: plain HTML,
//! CSS and vanilla JavaScript, no build step, no Node toolchain, nothing from a CDN) that
//! render from the daemon's own JSON API and its event streams. This crate knows nothing of
//! the daemon: [`router`] serves the assets, and `adf-server` mounts it at `/` behind its front
//! door (Host, Origin, login cookie), so the page's requests are same-origin and carry the
//! session cookie `/login?code=…` set (a one-time code, never the token). No secret is ever
//! part of an asset.
//!
//! Principal items: [`router`] (the routes), [`asset`] (lookup by path, for tests and for
//! callers that serve the assets elsewhere) and [`Asset`].

use axum::Router;
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// One embedded file of the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asset {
    /// The URL path it is served at.
    pub path: &'static str,
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Its bytes, compiled into the binary.
    pub body: &'static str,
}

/// Every asset of the page.
pub const ASSETS: [Asset; 3] = [
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: include_str!("../assets/index.html"),
    },
    Asset {
        path: "/studio/studio.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../assets/studio.css"),
    },
    Asset {
        path: "/studio/studio.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../assets/studio.js"),
    },
];

/// The page's Content-Security-Policy: only this origin's own script, style and connections,
/// never framed, so an injected string in agent data cannot load or send anything elsewhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The asset served at `path`, if any (`/index.html` is `/`).
pub fn asset(path: &str) -> Option<&'static Asset> {
    let path = if path == "/index.html" { "/" } else { path };
    ASSETS.iter().find(|a| a.path == path)
}

/// The Studio's routes (`/`, `/index.html`, `/studio/*`), for any router state: the handlers
/// read nothing but the request path.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(serve))
        .route("/index.html", get(serve))
        .route("/studio/{file}", get(serve))
}

async fn serve(uri: Uri) -> Response {
    let Some(found) = asset(uri.path()) else {
        return (StatusCode::NOT_FOUND, "no such Studio asset").into_response();
    };
    let mut response = found.body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(found.content_type),
    );
    // The assets change with the binary; revalidating costs one loopback round trip.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_reachable_and_the_page_links_only_its_own_assets() {
        let page = asset("/").unwrap().body;
        for linked in ["/studio/studio.css", "/studio/studio.js"] {
            assert!(page.contains(linked), "index.html links {linked}");
            assert!(asset(linked).is_some(), "{linked} is embedded");
        }
        assert_eq!(asset("/index.html"), asset("/"));
        assert!(asset("/studio/missing.js").is_none());
    }

    #[test]
    fn no_asset_loads_anything_from_another_origin() {
        for a in ASSETS {
            for scheme in ["http://", "https://", "//cdn", "ws://"] {
                assert!(
                    !a.body.contains(scheme),
                    "{} mentions {scheme}: the Studio must work offline",
                    a.path
                );
            }
        }
    }

    #[test]
    fn script_never_builds_html_from_strings() {
        // Agent data (file names, model text) is put in the page with textContent only.
        let script = asset("/studio/studio.js").unwrap().body;
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!script.contains(sink), "studio.js uses {sink}");
        }
    }
}
