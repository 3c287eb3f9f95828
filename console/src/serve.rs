//! Serving the console on a listener with bounds a console left running needs: a header-read
//! timeout (a client that sends half a request, or keeps a connection open without sending
//! the next one, is cut off), the client's address for the audit log, and a shutdown that ends
//! within a grace period however many connections are still half open.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::{Extension, Router};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How [`serve`] bounds its connections. `Default` gives the values documented on each field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServeOptions {
    /// How long a client has to send a request's headers, counted from when the server starts
    /// waiting for them (a new connection, or the previous response on a kept-alive one): past
    /// it the connection is closed. It is also the idle timeout of kept-alive connections.
    /// Default 10 s.
    pub header_read_timeout: Duration,
    /// How long shutdown waits for requests in flight to finish once the signal came; then
    /// every connection left is closed. Default 5 s.
    pub shutdown_grace: Duration,
    /// Most connections served at once; a connection beyond it is closed at once. Default 256.
    pub max_connections: usize,
    /// Most connections served at once from one client address, so that one client holding
    /// half-sent requests open cannot take every connection from the others (each is cut off
    /// after the header-read timeout, but could be opened again). Default 32.
    pub max_connections_per_client: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            header_read_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(5),
            max_connections: 256,
            max_connections_per_client: 32,
        }
    }
}

impl ServeOptions {
    /// Sets [`header_read_timeout`](Self::header_read_timeout).
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout;
        self
    }

    /// Sets [`shutdown_grace`](Self::shutdown_grace).
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Sets [`max_connections`](Self::max_connections).
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// Sets [`max_connections_per_client`](Self::max_connections_per_client).
    pub fn max_connections_per_client(mut self, max: usize) -> Self {
        self.max_connections_per_client = max;
        self
    }
}

/// Serves `router` (e.g. [`Console::router`](crate::Console::router)) on `listener` over
/// HTTP/1.1 until `shutdown` completes, then stops accepting, lets requests in flight finish
/// for at most [`ServeOptions::shutdown_grace`] and closes every connection left. Returns once
/// every connection is closed. Each request carries axum's `ConnectInfo<SocketAddr>`. A failed
/// `accept` (e.g. out of file descriptors) is logged and retried after a pause; it does not end
/// the server.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) {
    let (closing, close_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    // Connections open per client address (an entry goes when its last connection ends).
    let mut per_client: HashMap<IpAddr, usize> = HashMap::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "console: accept failed; retrying shortly");
                    // Not a synchronisation: a pause so that a persistent error (no file
                    // descriptors left) does not spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        while let Some(ended) = connections.try_join_next() {
            if let Ok(ip) = ended {
                leave(&mut per_client, ip);
            }
        }
        if connections.len() >= options.max_connections {
            tracing::warn!(client = %peer, max = options.max_connections, "console: too many connections; closed one");
            drop(stream);
            continue;
        }
        let from_client = per_client.entry(peer.ip()).or_default();
        if *from_client >= options.max_connections_per_client {
            tracing::warn!(
                client = %peer,
                max = options.max_connections_per_client,
                "console: too many connections from this client; closed one"
            );
            drop(stream);
            continue;
        }
        *from_client += 1;
        connections.spawn(connection(stream, peer, router.clone(), options, close_rx.clone()));
    }
    drop(listener);
    // Every connection finishes the request it is serving, then closes; an idle one closes at
    // once. A half-sent request is not one hyper can end early: it waits out the grace below.
    let _ = closing.send(true);
    let drained = tokio::time::timeout(options.shutdown_grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            left = connections.len(),
            grace = ?options.shutdown_grace,
            "console: connections still open after the shutdown grace; closing them"
        );
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
}

/// One connection from `ip` ended.
fn leave(per_client: &mut HashMap<IpAddr, usize>, ip: IpAddr) {
    if let Some(open) = per_client.get_mut(&ip) {
        *open = open.saturating_sub(1);
        if *open == 0 {
            per_client.remove(&ip);
        }
    }
}

/// Serves one connection until it ends, or until shutdown asks it to close; returns the
/// client's address, for the per-client count.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    options: ServeOptions,
    closing: watch::Receiver<bool>,
) -> IpAddr {
    serve_connection(stream, peer, router, options, closing).await;
    peer.ip()
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    options: ServeOptions,
    mut closing: watch::Receiver<bool>,
) {
    let service = TowerToHyperService::new(router.layer(Extension(ConnectInfo(peer))));
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(options.header_read_timeout).keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(client = %peer, error = %e, "console: connection ended");
            }
            return;
        }
        _ = closing.wait_for(|closing| *closing) => {}
    }
    conn.as_mut().graceful_shutdown();
    if let Err(e) = conn.await {
        tracing::debug!(client = %peer, error = %e, "console: connection ended at shutdown");
    }
}
