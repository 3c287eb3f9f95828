//! The metrics port of the `daily_report` example: `/metrics` (the Prometheus text format),
//! `/livez` and `/readyz` (a scheduler's [`Health`]), 404 for any other path.
//!
//! A plain HTTP/1 responder on a tokio listener: one request per connection, answered and
//! closed, which is what Prometheus and the kubelet's probes send. A request whose head does not
//! arrive within 5 s, or is larger than 8 KiB, is dropped.

use std::sync::Arc;
use std::time::Duration;

use lock_scheduler::{Health, HealthProbe};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long a client has to send its request's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest request head read.
const HEAD_LIMIT: usize = 8 * 1024;

/// What the port serves: the metrics text, and the health of the scheduler once it is known.
pub struct Probes {
    /// Renders the metrics in the Prometheus text format.
    pub metrics: Box<dyn Fn() -> String + Send + Sync>,
    /// The scheduler's health.
    pub health: HealthProbe,
}

/// A response: status line and body.
fn respond(probes: &Probes, method: &str, path: &str) -> (&'static str, String) {
    if method != "GET" && method != "HEAD" {
        return ("405 Method Not Allowed", "only GET and HEAD\n".to_owned());
    }
    // A query string does not change the answer (`/readyz?verbose`).
    let path = path.split_once('?').map_or(path, |(path, _)| path);
    let health = probes.health.health();
    match path {
        "/metrics" => ("200 OK", (probes.metrics)()),
        "/livez" => verdict(
            health.live,
            "live: the scheduler's timer is turning",
            "not live: the scheduler's timer is not turning",
            health,
        ),
        "/readyz" => verdict(
            health.ready,
            "ready: Redis answers and this replica is announced in its group",
            "not ready: Redis does not answer, or this replica is not announced in its group yet",
            health,
        ),
        _ => ("404 Not Found", "not found: this port serves /metrics, /livez and /readyz\n".to_owned()),
    }
}

fn verdict(ok: bool, yes: &str, no: &str, health: Health) -> (&'static str, String) {
    let body = format!("{}\nlive={} ready={}\n", if ok { yes } else { no }, health.live, health.ready);
    (if ok { "200 OK" } else { "503 Service Unavailable" }, body)
}

/// Serves `probes` on `listener` until the process ends.
pub async fn serve(listener: TcpListener, probes: Arc<Probes>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let probes = probes.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(HEAD_TIMEOUT, answer(stream, &probes)).await;
        });
    }
}

async fn answer(mut stream: TcpStream, probes: &Probes) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 || head.len() + n > HEAD_LIMIT {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let mut words = line.lines().next().unwrap_or_default().split(' ');
    let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    let (status, body) = respond(probes, method, path);
    let content_type = if path.starts_with("/metrics") { "text/plain; version=0.0.4" } else { "text/plain" };
    let mut response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    if method != "HEAD" {
        response.push_str(&body);
    }
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
