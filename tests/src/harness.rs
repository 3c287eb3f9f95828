//! A private Redis per test, with fault injection, from a process or a container.
//!
//! The servers come from the workspace's Redis fixture ([`redis_fixture`]); this module is the
//! tests' view of it, plus [`init_tracing`].
//!
//! [`RedisServer::start`] gives a test its own Redis on a free `127.0.0.1` port. The server can
//! be hard-stopped ([`RedisServer::stop`]), restarted on the same port
//! ([`RedisServer::restart`]), frozen ([`RedisServer::pause`]) and thawed
//! ([`RedisServer::resume`]). Dropping the value removes it.
//!
//! # Where the Redis comes from
//!
//! Private servers come from one of two [`Backend`]s, picked once per test binary in this
//! order (the choice is printed once to stderr):
//!
//! 1. [`Backend::Process`]: `redis-server` found on `PATH`, started as a child process in a
//!    fresh temp dir (`SIGKILL` / `SIGSTOP` / `SIGCONT` for faults);
//! 2. [`Backend::Container`]: when a Docker engine answers, a container through
//!    testcontainers, from the image named by `REDIS_TEST_IMAGE` (default `redis:7-alpine`;
//!    `scripts/build-redis-image.sh` builds one from the local binary for engines that cannot
//!    pull), with `docker kill` / `start` / `pause` / `unpause` for faults on a fixed host port;
//! 3. otherwise starting a server panics with a message naming the three fixes.
//!
//! `REDIS_TEST_BACKEND=process|container` forces a backend (CI runs the suites once with
//! each). An external server given by `REDIS_URL` comes first for tests that can share one
//! ([`RedisServer::shared`], [`redis_url_or_start`]); tests that inject faults or read
//! server-wide counters always start their own with [`RedisServer::start`].
//!
//! The API is synchronous so it can be used from plain `#[test]` functions as well as from
//! `#[tokio::test]` ones of either runtime flavour.

pub use redis_fixture::{
    BACKEND_VAR, Backend, CLIENT_TIMEOUT, IMAGE_VAR, RedisServer, URL_VAR, redis_url_or_start, wait_until,
    wait_until_blocking,
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
