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
    AclUser, BACKEND_VAR, Backend, CLIENT_TIMEOUT, Direction, Fault, FaultProxy, Hold, IMAGE_VAR, ProxyStats,
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

/// Every command a server runs from now on, those run by scripts included (`MONITOR`), one
/// text line each (e.g. `+1733400000.123456 [0 lua] "SET" "lock:x" "pod-a:..." "PX" "30000"`):
/// proof that a command held in the network did run, and when.
pub struct Monitor {
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    stream: std::net::TcpStream,
}

impl Monitor {
    /// Starts monitoring `server`; returns once the server confirmed.
    pub fn start(server: &RedisServer) -> Monitor {
        use std::io::{BufRead, Write};
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", server.port())).expect("connect to monitor");
        stream.write_all(b"MONITOR\r\n").expect("send MONITOR");
        let mut reader = std::io::BufReader::new(stream.try_clone().expect("clone the monitor socket"));
        let mut ok = String::new();
        reader.read_line(&mut ok).expect("MONITOR's reply");
        assert_eq!(ok.trim_end(), "+OK", "MONITOR refused");
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in reader.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Monitor { lines, stream }
    }

    /// The first command line from now on for which `matches` holds, if one comes within
    /// `within`.
    pub async fn find(
        &mut self,
        within: std::time::Duration,
        matches: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) if matches(&line) => return Some(line),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return None,
            }
        }
    }
}

impl Monitor {
    /// Every command line up to and including the first for which `last` holds (send a
    /// marker command, e.g. `ECHO <marker>`, after the commands of interest), or all lines
    /// within `within` if none does.
    pub async fn until(&mut self, within: std::time::Duration, last: impl Fn(&str) -> bool) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + within;
        let mut lines = Vec::new();
        while let Ok(Some(line)) = tokio::time::timeout_at(deadline, self.lines.recv()).await {
            let done = last(&line);
            lines.push(line);
            if done {
                break;
            }
        }
        lines
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}
