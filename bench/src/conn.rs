//! The raw baseline's connection: one multiplexed connection to a single node, or a cluster
//! connection (redis-rs routes each command by its key) for `--cluster`.

use anyhow::{Context, Result};
use lock_core::redis::aio::{ConnectionLike, MultiplexedConnection};
use lock_core::redis::cluster::ClusterClient;
use lock_core::redis::cluster_async::ClusterConnection;
use lock_core::redis::{self, Cmd, Pipeline, RedisFuture, Value};

/// Where the raw baseline connects.
pub(crate) enum Server {
    // Boxed: their sizes differ a lot, and with the `tls` feature the other way round.
    Node(Box<redis::Client>),
    Cluster(Box<ClusterClient>),
}

impl Server {
    /// From the bench's URL: `redis+cluster://h1:p1,h2:p2` is a cluster, anything else a node.
    pub(crate) fn open(url: &str) -> Result<Server> {
        match url.strip_prefix("redis+cluster://") {
            Some(hosts) => {
                let nodes: Vec<String> =
                    hosts.trim_end_matches('/').split(',').map(|h| format!("redis://{h}/")).collect();
                Ok(Server::Cluster(Box::new(ClusterClient::new(nodes).context("invalid cluster node list")?)))
            }
            None => Ok(Server::Node(Box::new(redis::Client::open(url).context("invalid Redis URL")?))),
        }
    }

    pub(crate) async fn connect(&self) -> Result<RawConn> {
        Ok(match self {
            Server::Node(client) => {
                RawConn::Node(client.get_multiplexed_async_connection().await.context("connecting to Redis")?)
            }
            Server::Cluster(client) => {
                RawConn::Cluster(client.get_async_connection().await.context("connecting to the cluster")?)
            }
        })
    }
}

/// A raw connection of either kind.
#[derive(Clone)]
pub(crate) enum RawConn {
    Node(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for RawConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RawConn::Node(c) => c.req_packed_command(cmd),
            RawConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RawConn::Node(c) => c.req_packed_commands(pipeline, offset, count),
            RawConn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RawConn::Node(c) => c.get_db(),
            RawConn::Cluster(c) => c.get_db(),
        }
    }
}

/// Connections to the masters whose counters the scenarios read: the node itself, or every
/// master of the cluster (replicas would count replicated writes twice).
pub(crate) async fn admin_connections(server: &Server, url: &str) -> Result<Vec<MultiplexedConnection>> {
    if let Server::Node(client) = server {
        return Ok(vec![client.get_multiplexed_async_connection().await.context("connecting to Redis")?]);
    }
    let hosts = url.trim_start_matches("redis+cluster://").trim_end_matches('/');
    let mut masters = Vec::new();
    for host in hosts.split(',') {
        let client = redis::Client::open(format!("redis://{host}/")).context("invalid node address")?;
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .with_context(|| format!("connecting to {host}"))?;
        let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut conn).await.context("ROLE")?;
        if matches!(role.first(), Some(Value::BulkString(r)) if r.as_slice() == b"master") {
            masters.push(conn);
        }
    }
    Ok(masters)
}
