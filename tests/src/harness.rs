//! A private Redis per test, with fault injection, from a process or a container.
//!
//! This is the tests' view of the workspace's Redis fixture ([`redis_fixture`]), plus
//! [`init_tracing`]. [`RedisServer::start`] gives a test its own Redis on a free `127.0.0.1`
//! port, which it can hard-stop ([`RedisServer::stop`]), restart on the same port
//! ([`RedisServer::restart`]), freeze ([`RedisServer::pause`]) and thaw
//! ([`RedisServer::resume`]); dropping the value removes it. [`RedisServer::shared`] and
//! [`redis_url_or_start`] use `REDIS_URL` when it is set, for tests that can share a server.
//!
//! Where private servers come from (`redis-server` on `PATH`, else Docker; forced by
//! `REDIS_TEST_BACKEND=process|container`) is chosen once per test binary and printed to
//! stderr: see [`RedisServer`] and [`Backend`].
//!
//! The API is synchronous so it can be used from plain `#[test]` functions as well as from
//! `#[tokio::test]` ones of either runtime flavour.

pub use redis_fixture::{
    AclUser, BACKEND_VAR, Backend, CLIENT_TIMEOUT, Direction, Fault, FaultProxy, IMAGE_VAR, ProxyStats,
    RedisCluster, RedisSentinelGroup, RedisServer, RedisTls, ServerConfig, URL_VAR, create_user,
    lock_user_acl_line, lock_user_rules, query, redis_url_or_start, wait_until, wait_until_blocking,
};

/// Installs a `tracing-subscriber` fmt subscriber writing through the test harness's captured
/// output, filtered by `RUST_LOG` (default `warn`).
///
/// Safe to call from every test: if a global subscriber is already installed the call does
/// nothing.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
}

/// A lock client of `server` named `instance`, with a short (500 ms) command timeout so that
/// tests of failures settle quickly.
pub fn client(server: &RedisServer, instance: &str) -> lock_core::LockClient {
    lock_core::LockClient::builder()
        .url(server.url())
        .instance_id(instance)
        .command_timeout(std::time::Duration::from_millis(500))
        .build()
        .expect("valid client configuration")
}
