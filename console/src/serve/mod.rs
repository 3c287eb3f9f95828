//! Serving the console on a listener with bounds a console left running needs: a header-read
//! timeout (a client that sends half a request, or keeps a connection open without sending
//! the next one, is cut off), caps on connections that cannot be held shut by connections that
//! never finish a request ([`registry`]: the least valuable connection makes room for a new
//! one), the client's address for the audit log, and a shutdown that ends within a grace
//! period however many connections are still half open.

mod activity;
mod io;
mod registry;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::{Extension, Router};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::serve::activity::{Activity, Tracked};
use crate::serve::io::SharedStream;
use crate::serve::registry::{Among, Connection, Registry};

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
    /// Most connections open at once. A new connection beyond it takes the place of the
    /// open one worth least (one that has not sent a whole request, or is idle between
    /// requests, of the address holding the most connections, idle the longest); it is closed
    /// only if every open connection is being served or has request bytes waiting. So
    /// connections that never finish a request, from any number of addresses, cannot keep a
    /// client that sends its request from an answer. Default 256.
    pub max_connections: usize,
    /// Most connections open at once from one client address: a new one beyond it takes the
    /// place of that address's own connection worth least, as above, so that one address
    /// cannot fill the server. Behind a reverse proxy every connection comes from the proxy:
    /// raise it to the proxy's pool. Default 32.
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
    let mut registry = Registry::default();
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
        while let Some(ended) = connections.try_join_next_with_id() {
            let id = match ended {
                Ok((id, ())) => id,
                Err(e) => e.id(),
            };
            registry.remove(id);
        }
        if !make_room(&mut registry, peer, options) {
            drop(stream);
            continue;
        }
        let stream = Arc::new(stream);
        let activity = Activity::new();
        let weak = Arc::downgrade(&stream);
        let task = connection(stream, peer, router.clone(), options, activity.clone(), close_rx.clone());
        let abort = connections.spawn(task);
        registry.insert(abort.id(), Connection { ip: peer.ip(), activity, stream: weak, abort });
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

/// Makes room for a new connection from `peer` under the caps, closing the connection worth
/// least if need be; false if there is none to close (every one is being served or speaking),
/// and the new one must be refused.
fn make_room(registry: &mut Registry, peer: SocketAddr, options: ServeOptions) -> bool {
    let ip = peer.ip();
    if registry.of(ip) >= options.max_connections_per_client {
        if registry.close_least_valuable(Among::Address(ip)).is_none() {
            tracing::warn!(
                client = %peer,
                max = options.max_connections_per_client,
                "console: every connection from this client is busy; refused a new one"
            );
            return false;
        }
        tracing::debug!(client = %peer, "console: closed this client's least busy connection to make room");
    }
    if registry.len() >= options.max_connections {
        let Some(closed) = registry.close_least_valuable(Among::All) else {
            tracing::warn!(
                client = %peer,
                max = options.max_connections,
                "console: every connection is busy; refused a new one"
            );
            return false;
        };
        tracing::debug!(client = %peer, closed_from = %closed, "console: closed the least busy connection to make room");
    }
    true
}

/// Serves one connection until it ends, or until shutdown asks it to close.
async fn connection(
    stream: Arc<TcpStream>,
    peer: SocketAddr,
    router: Router,
    options: ServeOptions,
    activity: Arc<Activity>,
    mut closing: watch::Receiver<bool>,
) {
    let inner = TowerToHyperService::new(router.layer(Extension(ConnectInfo(peer))));
    let service = Tracked { inner, activity };
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(options.header_read_timeout).keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(SharedStream(stream)), service);
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
