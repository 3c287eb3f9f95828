//! [`Link`]: the lock commands' connection, to one node or to a whole cluster, behind the one
//! `ConnectionLike` interface redis-rs scripts, commands and pipelines are sent through.

use deadpool_redis::redis::aio::{ConnectionLike, MultiplexedConnection};
use deadpool_redis::redis::cluster_async::ClusterConnection;
use deadpool_redis::redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use deadpool_redis::redis::{Cmd, Pipeline, RedisFuture, Value};

/// A live connection: multiplexed, cheap to clone (clones share it).
#[derive(Clone)]
pub(crate) enum Link {
    /// One node: a single node, or the master Sentinel named.
    Node(MultiplexedConnection),
    /// A cluster: redis-rs routes each command by its keys and follows MOVED/ASK.
    Cluster(ClusterConnection),
}

impl Link {
    /// The same connection, with pipelines sent to `node` (`host`, `port`) instead of routed
    /// by their first key: a pipeline of keys of many slots that one node serves. A single node
    /// ignores the address.
    pub(crate) fn to_node(&self, node: Option<(String, u16)>) -> Routed {
        Routed { link: self.clone(), node }
    }

    /// Sends `cmd` to `node` (in a cluster), or to the node.
    pub(crate) async fn query_on_node(
        &mut self,
        cmd: Cmd,
        node: Option<&(String, u16)>,
    ) -> deadpool_redis::redis::RedisResult<Value> {
        match (self, node) {
            (Link::Cluster(conn), Some((host, port))) => {
                let route = SingleNodeRoutingInfo::ByAddress { host: host.clone(), port: *port };
                conn.route_command(cmd, RoutingInfo::SingleNode(route)).await
            }
            (link, _) => link.req_packed_command(&cmd).await,
        }
    }

    /// Sends `cmd` to the master of `key`'s slot (in a cluster), or to the node.
    pub(crate) async fn query_at_key(
        &mut self,
        cmd: Cmd,
        key: &str,
    ) -> deadpool_redis::redis::RedisResult<Value> {
        match self {
            Link::Node(conn) => conn.req_packed_command(&cmd).await,
            Link::Cluster(conn) => {
                let route = Route::new(super::slots::slot(key.as_bytes()), SlotAddr::Master);
                conn.route_command(cmd, RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)))
                    .await
            }
        }
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Node(conn) => conn.req_packed_command(cmd),
            Link::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Node(conn) => conn.req_packed_commands(pipeline, offset, count),
            Link::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Node(conn) => conn.get_db(),
            Link::Cluster(conn) => conn.get_db(),
        }
    }
}

/// A [`Link`] whose pipelines go to one node; see [`Link::to_node`].
pub(crate) struct Routed {
    link: Link,
    node: Option<(String, u16)>,
}

impl ConnectionLike for Routed {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.link.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match (&mut self.link, &self.node) {
            (Link::Cluster(conn), Some((host, port))) => {
                let route = SingleNodeRoutingInfo::ByAddress { host: host.clone(), port: *port };
                Box::pin(conn.route_pipeline(pipeline.clone(), offset, count, route))
            }
            (link, _) => link.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        self.link.get_db()
    }
}
