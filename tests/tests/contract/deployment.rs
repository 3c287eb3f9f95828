//! The deployments the contract suite runs against, behind one interface: how to build a
//! client for it, how to read what Redis holds for a key, and how the crashing holder process
//! (`lock_holder`) reaches it.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use lock_core::{LockClient, LockClientBuilder};
use tests::harness::{AclUser, RedisCluster, RedisSentinelGroup, RedisServer, RedisTls, create_user, query};

/// Command timeout of the suite's clients: generous, the machine may be saturated. A first
/// command over TLS includes the handshake, which in a debug build next to a CPU hog takes up
/// to ~400 ms (40 ms idle).
pub(crate) const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);
/// Liveness TTL of the suite's clients (more than twice the command timeout).
pub(crate) const LIVENESS_TTL: Duration = Duration::from_millis(2500);
/// Watchdog lease of the suite's clients: short, so renewal happens within a test.
pub(crate) const WATCHDOG_LEASE: Duration = Duration::from_millis(800);

/// The password of the suite's ACL user.
const PASSWORD: &str = "contract-pw";

/// A running deployment and how to talk to it.
pub(crate) struct Deployment {
    server: Server,
    /// Clients log in as this user, when set.
    user: Option<AclUser>,
}

/// The servers of a deployment.
enum Server {
    Single(RedisServer),
    Cluster(RedisCluster),
    Sentinel(RedisSentinelGroup),
    Tls(RedisTls),
}

impl Deployment {
    /// A single `redis-server`, clients as the default user.
    pub(crate) fn single() -> Deployment {
        Deployment { server: Server::Single(RedisServer::start()), user: None }
    }

    /// A single `redis-server`, clients as the lock ACL user README documents.
    pub(crate) fn single_acl() -> Deployment {
        let server = RedisServer::start();
        let user = AclUser::lock_user("lockuser", PASSWORD, "lock:");
        create_user(&server.url(), &user).expect("ACL SETUSER lockuser");
        Deployment { server: Server::Single(server), user: Some(user) }
    }

    /// A TLS-only server (certificates made for the test), clients over `rediss://` trusting
    /// its CA, as the lock ACL user.
    pub(crate) fn tls_acl() -> Deployment {
        let user = AclUser::lock_user("lockuser", PASSWORD, "lock:");
        Deployment { server: Server::Tls(RedisTls::start_with_user(&user)), user: Some(user) }
    }

    /// A 3-master cluster with a replica each, clients through `redis+cluster://` with every
    /// node.
    pub(crate) fn cluster() -> Deployment {
        Deployment { server: Server::Cluster(RedisCluster::start()), user: None }
    }

    /// A master, a replica and 3 sentinels, clients through `redis+sentinel://` with the 3
    /// sentinels and the master's name.
    pub(crate) fn sentinel() -> Deployment {
        Deployment { server: Server::Sentinel(RedisSentinelGroup::start()), user: None }
    }

    /// The URL (or address form) a client of this deployment is built from, with the user.
    pub(crate) fn client_url(&self) -> String {
        let url = match &self.server {
            Server::Single(server) => server.url(),
            Server::Tls(server) => server.url(),
            Server::Cluster(cluster) => multi_host_url("redis+cluster", &cluster.urls(), ""),
            Server::Sentinel(group) => {
                multi_host_url("redis+sentinel", &group.sentinel_urls(), group.master_name())
            }
        };
        match &self.user {
            Some(user) => user.url_on(&url),
            None => url,
        }
    }

    /// A client builder connected to the deployment.
    pub(crate) fn builder(&self) -> LockClientBuilder {
        let builder = LockClient::builder().url(self.client_url());
        match &self.server {
            Server::Tls(server) => builder.tls_root_ca(server.ca_cert_pem()),
            _ => builder,
        }
    }

    /// A client of this deployment with the suite's timings.
    pub(crate) fn client(&self, instance: &str) -> LockClient {
        self.builder()
            .instance_id(instance)
            .command_timeout(COMMAND_TIMEOUT)
            .liveness_ttl(LIVENESS_TTL)
            .watchdog_lease(WATCHDOG_LEASE)
            .build()
            .unwrap_or_else(|e| panic!("client of {}: {e}", self.client_url()))
    }

    /// Runs a command as the default user on the server that holds `key`.
    pub(crate) fn cli(&self, key: &str, args: &[&str]) -> String {
        match &self.server {
            Server::Single(server) => server.cli(args),
            Server::Tls(server) => server.cli(args),
            Server::Cluster(cluster) => cluster.cli_for_key(key, args),
            Server::Sentinel(group) => {
                let master = group.master_url();
                query(&master, args).unwrap_or_else(|e| panic!("{args:?} on {master}: {e}"))
            }
        }
    }

    /// The holder's token in `key` (its value without the queue mark it carries while others
    /// queue behind the holder), `None` when it does not exist.
    pub(crate) fn get(&self, key: &str) -> Option<String> {
        let value = Some(self.cli(key, &["GET", key])).filter(|v| v != "(nil)" && !v.is_empty())?;
        Some(lock_core::schema::unmarked(&value).to_owned())
    }

    /// The remaining time to live of `key` in ms (`-2`: no such key).
    pub(crate) fn pttl(&self, key: &str) -> i64 {
        let reply = self.cli(key, &["PTTL", key]);
        reply.parse().unwrap_or_else(|_| panic!("PTTL {key} answered {reply:?}"))
    }

    /// Whether `key` exists.
    pub(crate) fn exists(&self, key: &str) -> bool {
        self.cli(key, &["EXISTS", key]) == "1"
    }

    /// The URL `lock_holder` connects to.
    pub(crate) fn holder_url(&self) -> String {
        self.client_url()
    }

    /// The CA file `lock_holder` trusts, for a TLS deployment.
    pub(crate) fn holder_ca_file(&self) -> Option<String> {
        match &self.server {
            Server::Tls(server) => Some(server.ca_cert_path().display().to_string()),
            _ => None,
        }
    }
}

/// `<scheme>://host1:port1,host2:port2/<path>` from `redis://host:port/` URLs.
fn multi_host_url(scheme: &str, urls: &[String], path: &str) -> String {
    let hosts: Vec<&str> =
        urls.iter().map(|u| u.trim_start_matches("redis://").trim_end_matches('/')).collect();
    format!("{scheme}://{}/{path}", hosts.join(","))
}

/// One deployment of a kind shared by the tests that run at the same time, started by the
/// first and stopped when the last one drops its handle (a `static` would never be dropped,
/// leaving its servers running after the test binary exits).
pub(crate) fn shared(slot: &'static Mutex<Weak<Deployment>>, start: fn() -> Deployment) -> Arc<Deployment> {
    let mut weak = slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(deployment) = weak.upgrade() {
        return deployment;
    }
    let deployment = Arc::new(start());
    *weak = Arc::downgrade(&deployment);
    deployment
}
