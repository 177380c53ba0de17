//! Plain TCP on 127.0.0.1 for tests of code that binds or relays sockets: a listener on a free
//! port, and accepts and reads that fail the test instead of hanging it.

use std::collections::HashMap;
use std::time::Duration;

use tokio::io::AsyncReadExt as _;
use tokio::net::{TcpListener, TcpStream};

/// Only a hung test waits this long; no assertion depends on it.
pub const HUNG: Duration = Duration::from_secs(30);

/// A listener on `127.0.0.1`, port 0, and the port it got.
pub async fn listener() -> (TcpListener, u16) {
    let listener = match TcpListener::bind("127.0.0.1:0").await {
        Ok(listener) => listener,
        Err(error) => panic!("cannot listen on 127.0.0.1: {error}"),
    };
    let port = match listener.local_addr() {
        Ok(addr) => addr.port(),
        Err(error) => panic!("the listener has no address: {error}"),
    };
    (listener, port)
}

/// The next connection to `listener`.
pub async fn accept(listener: &TcpListener) -> TcpStream {
    match tokio::time::timeout(HUNG, listener.accept()).await {
        Ok(Ok((socket, _))) => socket,
        Ok(Err(error)) => panic!("accept failed: {error}"),
        Err(_) => panic!("nothing connected within {HUNG:?}"),
    }
}

/// Exactly `n` bytes from `socket`.
pub async fn read_exactly(socket: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut got = vec![0; n];
    match tokio::time::timeout(HUNG, socket.read_exact(&mut got)).await {
        Ok(Ok(_)) => got,
        Ok(Err(error)) => panic!("reading {n} bytes failed: {error}"),
        Err(_) => panic!("{n} bytes did not arrive within {HUNG:?}"),
    }
}

/// Everything `socket` receives until the peer closes it.
pub async fn read_to_end(socket: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    match tokio::time::timeout(HUNG, socket.read_to_end(&mut got)).await {
        Ok(Ok(_)) => got,
        Ok(Err(error)) => panic!("reading to the end failed: {error}"),
        Err(_) => panic!("the peer did not close the socket within {HUNG:?}"),
    }
}

/// One HTTP/1.1 request as a hand-written test server reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// `GET /path HTTP/1.1`, as sent.
    pub request_line: String,
    /// The method.
    pub method: String,
    /// The request target (path and query).
    pub target: String,
    /// The headers, names lowercased.
    pub headers: HashMap<String, String>,
    /// The body, `content-length` bytes (or what arrived before the peer closed).
    pub body: Vec<u8>,
}

/// Reads one request (head and `content-length` body) from `socket`; `None` when the peer
/// closes or fails before the head is complete.
pub async fn read_http_request(socket: &mut TcpStream) -> Option<HttpRequest> {
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&chunk[..n]);
        if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_owned();
    let mut parts = request_line.split(' ');
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = raw[head_end + 4..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(HttpRequest {
        request_line,
        method,
        target,
        headers,
        body,
    })
}
