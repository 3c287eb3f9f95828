//! A console served on a loopback port, and a minimal HTTP/1.1 client to talk to it: one
//! request per connection (`Connection: close`), the whole response read. Enough for the
//! console's tests; no crate needed.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(15);

/// Serves `router` on a free `127.0.0.1` port until the runtime ends; returns the address.
pub async fn serve(router: axum::Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    addr
}

/// A response: status, headers (names lower-cased) and body.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body, decoded from chunks if it was chunked.
    pub body: String,
}

impl Response {
    /// The first header named `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON (panics, naming the body, if it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The `error.code` of a JSON error body.
    pub fn error_code(&self) -> String {
        self.json()["error"]["code"].as_str().unwrap_or_default().to_owned()
    }
}

/// Sends `method path` with `headers` (and an empty body) to `addr`.
pub async fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    tokio::time::timeout(TIMEOUT, send(addr, method, path, headers))
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: no response within {TIMEOUT:?}"))
}

/// `GET path`.
pub async fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, &[]).await
}

async fn send(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    let mut stream = TcpStream::connect(addr).await.expect("connect to the console");
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.expect("send the request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read the response");
    parse(&raw)
}

/// Sends `head` as it is (request line and headers, `\r\n`-separated, ending with an empty
/// line) to `addr` and reads the whole response: for requests [`request`] cannot make, such as
/// one with another `Host`.
pub async fn raw(addr: SocketAddr, head: &str) -> Response {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect to the console");
        stream.write_all(head.as_bytes()).await.expect("send the request");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.expect("read the response");
        parse(&raw)
    };
    tokio::time::timeout(TIMEOUT, exchange).await.unwrap_or_else(|_| panic!("no response within {TIMEOUT:?}"))
}

fn parse(raw: &[u8]) -> Response {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(raw.len());
    let head = String::from_utf8_lossy(&raw[..split]);
    let body = raw.get(split + 4..).unwrap_or_default();
    let mut lines = head.split("\r\n");
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked { dechunk(body) } else { body.to_vec() };
    Response { status, headers, body: String::from_utf8_lossy(&body).into_owned() }
}

/// Decodes a chunked body (sizes count bytes).
fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size =
            std::str::from_utf8(&rest[..eol]).ok().and_then(|s| usize::from_str_radix(s.trim(), 16).ok());
        let after = &rest[eol + 2..];
        match size {
            Some(size) if size > 0 && after.len() >= size => {
                out.extend_from_slice(&after[..size]);
                rest = after[size..].strip_prefix(b"\r\n").unwrap_or(&after[size..]);
            }
            _ => break,
        }
    }
    out
}
