//! `service_client` (model providers, the daemon API client) follows redirects, but never a
//! hop to another origin that reaches a runtime control API on this machine: a model server
//! named by an agent's config cannot bounce a request into a daemon (§5.6 rule 2).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use adf_egress::{ClientOptions, service_client};

/// Serves every connection on 127.0.0.1 with `answer(request line)`, a full HTTP/1.1 response.
async fn responder(answer: fn(&str, SocketAddr) -> String) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&got);
                let line = text.lines().next().unwrap_or_default().to_owned();
                let _ = socket.write_all(answer(&line, addr).as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    addr
}

fn redirect(location: &str) -> String {
    format!(
        "HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
}

fn ok(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn client() -> reqwest::Client {
    service_client(ClientOptions {
        timeout: Some(Duration::from_secs(20)),
        ..ClientOptions::default()
    })
    .unwrap()
}

fn chain(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        text.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    text
}

#[tokio::test]
async fn srv_22_a_redirect_into_a_control_api_is_refused_before_connecting() {
    // The control API: a listener nobody serves; a connection would wait in its backlog. It
    // stays bound for the life of the test binary: its port stays registered.
    let api: &'static std::net::TcpListener = Box::leak(Box::new(
        std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
    ));
    api.set_nonblocking(true).unwrap();
    let port = api.local_addr().unwrap().port();
    adf_egress::protect_control_api(api.local_addr().unwrap());
    static PORT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    PORT.store(port, std::sync::atomic::Ordering::SeqCst);
    let model_server = responder(|line, _| {
        let port = PORT.load(std::sync::atomic::Ordering::SeqCst);
        if line.contains("/by-name") {
            redirect(&format!("http://localhost:{port}/agents/bob/stop"))
        } else {
            redirect(&format!("http://127.0.0.1:{port}/agents/bob/stop"))
        }
    })
    .await;
    for path in ["/v1/chat/completions", "/by-name"] {
        let error = client()
            .post(format!("http://{model_server}{path}"))
            .body("{}")
            .send()
            .await
            .expect_err(path);
        let text = chain(&error);
        assert!(
            text.contains("control API") && text.contains("never followed"),
            "{path}: {text}"
        );
    }
    match api.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the control API was connected to: {other:?}"),
    }
}

#[tokio::test]
async fn a_redirect_elsewhere_or_within_a_daemons_own_origin_is_followed() {
    let target = responder(|_, _| ok("model answer")).await;
    static TARGET: std::sync::Mutex<Option<SocketAddr>> = std::sync::Mutex::new(None);
    *TARGET.lock().unwrap() = Some(target);
    let bouncer = responder(|_, _| {
        let target = TARGET.lock().unwrap().unwrap();
        redirect(&format!("http://{target}/v1/chat/completions"))
    })
    .await;
    let answer = client()
        .post(format!("http://{bouncer}/v1"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.text().await.unwrap(), "model answer");

    // The daemon API client talks to a control API on purpose; its own redirects stay there.
    let daemon = responder(|line, own| {
        if line.contains("/start") {
            redirect(&format!("http://{own}/studio/"))
        } else {
            ok("studio")
        }
    })
    .await;
    // Registered, then released when the stand-in daemon stops: a port refused beyond its
    // listener's life could be the next test's server.
    let home = tempfile::tempdir().unwrap();
    let registration = adf_egress::control::register(&home.path().join("daemon.json"), &[daemon]);
    let page = client()
        .get(format!("http://{daemon}/start"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.text().await.unwrap(), "studio");
    registration.release();
}
