//! A private Redis per test, with fault injection, from a process or a container.
//!
//! [`RedisServer::start`] gives a test its own Redis on a free `127.0.0.1`
//! port. The server can be hard-stopped ([`RedisServer::stop`]), restarted on
//! the same port ([`RedisServer::restart`]), frozen ([`RedisServer::pause`])
//! and thawed ([`RedisServer::resume`]). Dropping the value removes it.
//!
//! # Where the Redis comes from
//!
//! Private servers come from one of two [`Backend`]s, picked once per test
//! binary in this order (the choice is printed once to stderr):
//!
//! 1. [`Backend::Process`]: `redis-server` found on `PATH`, started as a child
//!    process in a fresh temp dir (`SIGKILL` / `SIGSTOP` / `SIGCONT` for faults);
//! 2. [`Backend::Container`]: when a Docker engine answers, a container through
//!    testcontainers, from the image named by `REDIS_TEST_IMAGE` (default
//!    `redis:7-alpine`; `scripts/build-redis-image.sh` builds one from the
//!    local binary for engines that cannot pull), with `docker kill` / `start`
//!    / `pause` / `unpause` for faults on a fixed host port;
//! 3. otherwise starting a server panics with a message naming the three fixes.
//!
//! `REDIS_TEST_BACKEND=process|container` forces a backend (CI runs the suites
//! once with each). An external server given by `REDIS_URL` comes first for
//! tests that can share one ([`RedisServer::shared`], [`redis_url_or_start`]);
//! tests that inject faults or read server-wide counters always start their
//! own with [`RedisServer::start`].
//!
//! The API is synchronous so it can be used from plain `#[test]` functions as
//! well as from `#[tokio::test]` ones of either runtime flavour.

use std::fmt;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use deadpool_redis::redis::{self, RedisResult, Value};

mod container;
mod process;

use container::ContainerServer;
use process::ProcessServer;

/// Connect, read and write timeout used by [`RedisServer::cli`] and
/// [`RedisServer::connection`].
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// Environment variable that forces a [`Backend`]: `process` or `container`.
pub const BACKEND_VAR: &str = "REDIS_TEST_BACKEND";

/// Environment variable naming the image of [`Backend::Container`].
pub const IMAGE_VAR: &str = container::IMAGE_VAR;

/// Environment variable with the URL of an external server for tests that can
/// share one.
pub const URL_VAR: &str = "REDIS_URL";

/// How long starting or restarting a server waits for it to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Interval between readiness probes.
const READY_POLL: Duration = Duration::from_millis(10);

/// Timeout of a single readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(250);

/// How many fresh ports a start tries when the chosen port turns out to be
/// taken.
const PORT_ATTEMPTS: usize = 5;

/// Hint appended to panics when the server binary is missing or broken.
const INSTALL_HINT: &str = "install Redis so that `redis-server` is on PATH \
     (Debian/Ubuntu: `apt-get install redis-server`; macOS: `brew install redis`)";

/// Where a private Redis server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A `redis-server` child process found on `PATH`.
    Process,
    /// A Docker container from the image named by `REDIS_TEST_IMAGE`.
    Container,
}

impl Backend {
    /// The backend this test binary uses for [`RedisServer::start`], chosen
    /// once (see the [module docs](self)) and announced on stderr.
    ///
    /// # Panics
    ///
    /// Panics with a message naming the three ways to get a Redis if neither
    /// backend is available, or naming what is missing if `REDIS_TEST_BACKEND`
    /// forces an unavailable one.
    pub fn selected() -> Backend {
        static SELECTED: OnceLock<Result<Backend, String>> = OnceLock::new();
        let selected = SELECTED.get_or_init(|| {
            let forced = std::env::var(BACKEND_VAR).ok();
            let redis_server = find_on_path(process::REDIS_SERVER);
            let choice =
                choose(forced.as_deref(), redis_server, container::image(), container::docker_status);
            match &choice {
                Ok((backend, why)) => announce(&format!("private Redis servers: {backend} backend ({why})")),
                Err(e) => announce(e),
            }
            choice.map(|(backend, _)| backend)
        });
        selected.clone().unwrap_or_else(|e| panic!("{e}"))
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Process => "process",
            Backend::Container => "container",
        })
    }
}

/// A Redis server owned by one test (or, from [`RedisServer::shared`], the
/// external `REDIS_URL` server).
///
/// Dropping a private server kills it and removes its temp dir or container.
#[derive(Debug)]
pub struct RedisServer {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Process(ProcessServer),
    Container(ContainerServer),
    /// The server at `REDIS_URL`: never stopped, restarted or paused.
    Shared {
        url: String,
        port: u16,
    },
}

impl RedisServer {
    /// Starts a private server from the [selected backend](Backend::selected)
    /// and waits until it answers.
    ///
    /// # Panics
    ///
    /// Panics with a message naming what to install or set if no backend is
    /// available, and with the tail of the server's log if it does not come
    /// up within 10 s (or keeps losing the race for a free port).
    pub fn start() -> RedisServer {
        RedisServer::start_with(Backend::selected())
    }

    /// Starts a private server from the given backend, whatever the
    /// selection. Panics as [`start`](Self::start) does.
    pub fn start_with(backend: Backend) -> RedisServer {
        let inner = match backend {
            Backend::Process => Inner::Process(ProcessServer::start()),
            Backend::Container => Inner::Container(ContainerServer::start(&container::image())),
        };
        RedisServer { inner }
    }

    /// The server at `REDIS_URL` when that is set and non-empty, otherwise a
    /// private one as from [`start`](Self::start).
    ///
    /// For tests that neither inject faults nor read server-wide counters
    /// (`INFO commandstats`, `DBSIZE`, ...): other tests may use the same
    /// server at the same time, so use keys no other test uses. On the shared
    /// server, [`stop`](Self::stop), [`restart`](Self::restart),
    /// [`pause`](Self::pause) and [`resume`](Self::resume) panic.
    ///
    /// # Panics
    ///
    /// Panics if `REDIS_URL` is not a valid Redis URL, or as
    /// [`start`](Self::start) does.
    pub fn shared() -> RedisServer {
        match external_url() {
            Some(url) => {
                let info = redis::Client::open(url.as_str())
                    .unwrap_or_else(|e| panic!("{URL_VAR} is not a valid Redis URL: {e}"))
                    .get_connection_info()
                    .clone();
                let port = match info.addr() {
                    redis::ConnectionAddr::Tcp(_, port) | redis::ConnectionAddr::TcpTls { port, .. } => *port,
                    _ => 0,
                };
                RedisServer { inner: Inner::Shared { url, port } }
            }
            None => RedisServer::start(),
        }
    }

    /// Where this server runs, or `None` for the shared `REDIS_URL` server.
    pub fn backend(&self) -> Option<Backend> {
        match &self.inner {
            Inner::Process(_) => Some(Backend::Process),
            Inner::Container(_) => Some(Backend::Container),
            Inner::Shared { .. } => None,
        }
    }

    /// The connection URL: `redis://127.0.0.1:<port>/` for a private server,
    /// `REDIS_URL` for the shared one.
    pub fn url(&self) -> String {
        match &self.inner {
            Inner::Shared { url, .. } => url.clone(),
            _ => format!("redis://127.0.0.1:{}/", self.port()),
        }
    }

    /// The port the server listens on (stable across restarts); for a
    /// container, the host port published for it.
    pub fn port(&self) -> u16 {
        match &self.inner {
            Inner::Process(server) => server.port(),
            Inner::Container(server) => server.port(),
            Inner::Shared { port, .. } => *port,
        }
    }

    /// The OS process id of the running server, or `None` while stopped and
    /// for the shared server. For a container it is the host pid of the
    /// container's main process as the Docker engine reports it.
    pub fn pid(&self) -> Option<u32> {
        match &self.inner {
            Inner::Process(server) => server.pid(),
            Inner::Container(server) => server.pid(),
            Inner::Shared { .. } => None,
        }
    }

    /// The container id, for a server from [`Backend::Container`].
    pub fn container_id(&self) -> Option<&str> {
        match &self.inner {
            Inner::Container(server) => Some(server.id()),
            _ => None,
        }
    }

    /// Hard-stops the server: `SIGKILL` (`docker kill` for a container) and
    /// wait; no graceful shutdown, nothing persisted. The port stays reserved
    /// for [`restart`](Self::restart). Does nothing if already stopped.
    ///
    /// # Panics
    ///
    /// Panics on the shared server, and if the engine fails to kill a container.
    pub fn stop(&mut self) {
        match &mut self.inner {
            Inner::Process(server) => server.stop(),
            Inner::Container(server) => server.stop(),
            Inner::Shared { .. } => panic!("{}", shared_fault("stop")),
        }
    }

    /// Starts the server again on the same port and waits until it answers
    /// `PING`. If it is still running it is hard-stopped first. The data set
    /// starts empty (persistence is disabled).
    ///
    /// # Panics
    ///
    /// Panics on the shared server, and if the server does not come back
    /// within 10 s (for example because another process grabbed the port
    /// meanwhile).
    pub fn restart(&mut self) {
        match &mut self.inner {
            Inner::Process(server) => server.restart(),
            Inner::Container(server) => server.restart(),
            Inner::Shared { .. } => panic!("{}", shared_fault("restart")),
        }
    }

    /// Freezes the server (`SIGSTOP`; `docker pause` for a container):
    /// connections stay open and new TCP connects are still accepted, but
    /// nothing is answered until [`resume`](Self::resume).
    ///
    /// # Panics
    ///
    /// Panics on the shared server, if the server is stopped, or if the
    /// signal or Docker call fails.
    pub fn pause(&self) {
        match &self.inner {
            Inner::Process(server) => server.pause(),
            Inner::Container(server) => server.pause(),
            Inner::Shared { .. } => panic!("{}", shared_fault("pause")),
        }
    }

    /// Thaws a server frozen by [`pause`](Self::pause) (`SIGCONT`;
    /// `docker unpause`).
    ///
    /// # Panics
    ///
    /// As [`pause`](Self::pause).
    pub fn resume(&self) {
        match &self.inner {
            Inner::Process(server) => server.resume(),
            Inner::Container(server) => server.resume(),
            Inner::Shared { .. } => panic!("{}", shared_fault("resume")),
        }
    }

    /// Runs one command over a fresh connection and renders the reply like
    /// a terse `redis-cli`: nil as `(nil)`, integers in decimal, bulk and
    /// simple strings as UTF-8 (`OK` for the OK status), arrays/sets/maps
    /// flattened and joined by `'\n'`.
    ///
    /// Connect, read and write are bounded by [`CLIENT_TIMEOUT`], so calling
    /// this on a paused or stopped server fails instead of hanging.
    ///
    /// # Panics
    ///
    /// Panics if the connection or the command fails (including a server
    /// error reply). Use [`try_cli`](Self::try_cli) to inspect failures.
    pub fn cli(&self, args: &[&str]) -> String {
        self.try_cli(args)
            .unwrap_or_else(|e| panic!("redis command {args:?} against {} failed: {e}", self.url()))
    }

    /// Like [`cli`](Self::cli) but returns the error (connection refused,
    /// timeout, server error reply, ...) instead of panicking.
    ///
    /// # Panics
    ///
    /// Panics if `args` is empty.
    pub fn try_cli(&self, args: &[&str]) -> RedisResult<String> {
        let (name, rest) = args.split_first().expect("cli() needs at least the command name");
        let mut con = self.try_connection()?;
        let mut cmd = redis::cmd(name);
        for arg in rest {
            cmd.arg(*arg);
        }
        let value: Value = cmd.query(&mut con)?;
        Ok(render(&value))
    }

    /// Opens a new synchronous connection for typed access.
    ///
    /// Connect, read and write timeouts are set to [`CLIENT_TIMEOUT`]; call
    /// `set_read_timeout(None)` on the result before issuing long blocking
    /// commands.
    ///
    /// # Panics
    ///
    /// Panics if the server cannot be reached.
    pub fn connection(&self) -> redis::Connection {
        self.try_connection().unwrap_or_else(|e| panic!("cannot connect to {}: {e}", self.url()))
    }

    /// Opens a connection with [`CLIENT_TIMEOUT`] applied everywhere.
    fn try_connection(&self) -> RedisResult<redis::Connection> {
        open_connection(&self.url(), CLIENT_TIMEOUT)
    }
}

/// Returns the URL of a Redis to test against.
///
/// If the environment variable `REDIS_URL` is set and non-empty, returns
/// `(None, REDIS_URL)`; otherwise starts a private server and returns it
/// together with its URL. Keep the returned server alive for as long as the
/// URL is used.
///
/// Only for tests that do not disturb the server: fault-injection tests
/// (stop, restart, pause, ...) must always use [`RedisServer::start`].
pub fn redis_url_or_start() -> (Option<RedisServer>, String) {
    match external_url() {
        Some(url) => (None, url),
        None => {
            let server = RedisServer::start();
            let url = server.url();
            (Some(server), url)
        }
    }
}

/// Installs a `tracing-subscriber` fmt subscriber writing through the test
/// harness's captured output, filtered by `RUST_LOG` (default `warn`).
///
/// Safe to call from every test: if a global subscriber is already installed
/// the call does nothing.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
}

/// Polls `cond` every 5 ms (with `tokio::time::sleep`) until it returns
/// `true` or `timeout` elapses; returns whether it became `true`.
///
/// `cond` is always evaluated at least once, and once more at the deadline.
pub async fn wait_until<F: FnMut() -> bool>(timeout: Duration, mut cond: F) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        tokio::time::sleep(POLL_INTERVAL.min(deadline - now)).await;
    }
}

/// Blocking twin of [`wait_until`], sleeping with [`std::thread::sleep`].
pub fn wait_until_blocking<F: FnMut() -> bool>(timeout: Duration, mut cond: F) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(POLL_INTERVAL.min(deadline - now));
    }
}

/// Polling interval of [`wait_until`] and [`wait_until_blocking`].
const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// Picks the backend for private servers.
///
/// `forced` is `REDIS_TEST_BACKEND`, `redis_server` where `redis-server` was
/// found on `PATH`, `image` the container image and `docker` asks whether a
/// Docker engine answers (called only when needed). Returns the backend and
/// why it was picked, or the message to fail with.
fn choose(
    forced: Option<&str>,
    redis_server: Option<PathBuf>,
    image: String,
    docker: impl FnOnce() -> Result<(), String>,
) -> Result<(Backend, String), String> {
    let container_why = |how: &str| format!("{how}; image `{image}`, set {IMAGE_VAR} to change it");
    match forced.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("") => {
            if let Some(path) = redis_server {
                return Ok((Backend::Process, format!("{} found on PATH", path.display())));
            }
            match docker() {
                Ok(()) => Ok((
                    Backend::Container,
                    container_why("no redis-server on PATH, a Docker engine answers"),
                )),
                Err(reason) => Err(format!(
                    "no Redis to test against. Fix it one of three ways:\n  \
                     1. {INSTALL_HINT};\n  \
                     2. start a Docker engine: the tests then run Redis in containers from `{image}` \
                     ({IMAGE_VAR}; without registry access, build a local image with \
                     `scripts/build-redis-image.sh` and set {IMAGE_VAR} to the name it prints);\n  \
                     3. set {URL_VAR}=redis://HOST:PORT/ to use an existing server (tests that stop, \
                     restart or pause Redis still need 1 or 2).\n\
                     (Docker: {reason})"
                )),
            }
        }
        Some("process") => match redis_server {
            Some(path) => Ok((Backend::Process, format!("{BACKEND_VAR}=process; {}", path.display()))),
            None => Err(format!("{BACKEND_VAR}=process, but `redis-server` is not on PATH: {INSTALL_HINT}")),
        },
        Some("container") => match docker() {
            Ok(()) => Ok((Backend::Container, container_why(&format!("{BACKEND_VAR}=container")))),
            Err(reason) => Err(format!(
                "{BACKEND_VAR}=container, but no Docker engine answers ({reason}); start Docker or set \
                 DOCKER_HOST"
            )),
        },
        Some(other) => {
            Err(format!("{BACKEND_VAR} must be `process` or `container` (or unset), not `{other}`"))
        }
    }
}

/// The first executable file called `name` in a `PATH` directory.
fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| {
        std::fs::metadata(candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// `REDIS_URL` if set and non-empty; announces it (without its password) once.
fn external_url() -> Option<String> {
    let url = std::env::var(URL_VAR).ok().map(|u| u.trim().to_owned()).filter(|u| !u.is_empty())?;
    static ANNOUNCED: OnceLock<()> = OnceLock::new();
    ANNOUNCED.get_or_init(|| {
        announce(&format!(
            "shared Redis: {URL_VAR}={} (tests that inject faults still start private servers)",
            redact(&url)
        ));
    });
    Some(url)
}

/// `url` with any password replaced by `***`.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split_once(':').map_or("", |(user, _)| user);
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// The panic message for a fault-injection call on the shared server.
fn shared_fault(what: &str) -> String {
    format!(
        "cannot {what} the shared {URL_VAR} server: tests that inject faults must use \
         RedisServer::start() for a private server"
    )
}

/// Prints one harness line to the process's stderr, bypassing the test
/// harness's output capture so it is seen once per test binary.
fn announce(message: &str) {
    static STDERR: Mutex<()> = Mutex::new(());
    let _guard = STDERR.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let _ = writeln!(std::io::stderr(), "tests::harness: {message}");
}

/// Pings the server on `127.0.0.1:port` and returns the `field` of its
/// `INFO server` section, if it answers.
fn probe_info(port: u16, field: &str) -> Option<String> {
    let mut con = open_connection(&format!("redis://127.0.0.1:{port}/"), PROBE_TIMEOUT).ok()?;
    redis::cmd("PING").query::<Value>(&mut con).ok()?;
    let info: String = redis::cmd("INFO").arg("server").query(&mut con).ok()?;
    let prefix = format!("{field}:");
    info.lines().find_map(|l| l.strip_prefix(prefix.as_str())).map(|v| v.trim().to_owned())
}

/// Opens a sync connection to `url` with `timeout` applied to connect, read
/// and write.
fn open_connection(url: &str, timeout: Duration) -> RedisResult<redis::Connection> {
    let client = redis::Client::open(url)?;
    let con = client.get_connection_with_timeout(timeout)?;
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    Ok(con)
}

/// Renders a reply the way [`RedisServer::cli`] documents.
fn render(value: &Value) -> String {
    match value {
        Value::Nil => "(nil)".to_owned(),
        Value::Int(i) => i.to_string(),
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Okay => "OK".to_owned(),
        Value::Array(items) | Value::Set(items) => join(items.iter()),
        Value::Push { data, .. } => join(data.iter()),
        Value::Map(pairs) => join(pairs.iter().flat_map(|(k, v)| [k, v])),
        Value::Attribute { data, .. } => render(data),
        Value::Double(d) => d.to_string(),
        Value::Boolean(b) => b.to_string(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::ServerError(err) => format!("(error) {err}"),
        other => format!("{other:?}"),
    }
}

/// Renders each value and joins them with `'\n'`.
fn join<'a>(values: impl Iterator<Item = &'a Value>) -> String {
    values.map(render).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const IMAGE: &str = "redis:7-alpine";

    fn no_docker() -> Result<(), String> {
        Err("connection refused".to_owned())
    }

    fn docker_must_not_be_asked() -> Result<(), String> {
        panic!("Docker was asked although redis-server is on PATH")
    }

    #[test]
    fn redis_server_on_path_wins_without_asking_docker() {
        let found = Some(PathBuf::from("/usr/bin/redis-server"));
        let (backend, why) = choose(None, found.clone(), IMAGE.into(), docker_must_not_be_asked).unwrap();
        assert_eq!(backend, Backend::Process);
        assert!(why.contains("/usr/bin/redis-server"), "{why}");
        assert_eq!(
            choose(Some(" "), found, IMAGE.into(), docker_must_not_be_asked).unwrap().0,
            Backend::Process
        );
    }

    #[test]
    fn docker_is_the_fallback() {
        let (backend, why) = choose(None, None, IMAGE.into(), || Ok(())).unwrap();
        assert_eq!(backend, Backend::Container);
        assert!(why.contains(IMAGE) && why.contains(IMAGE_VAR), "{why}");
    }

    #[test]
    fn nothing_available_names_the_three_fixes() {
        let err = choose(None, None, IMAGE.into(), no_docker).unwrap_err();
        for needle in ["apt-get install redis-server", "Docker", "REDIS_URL=", IMAGE, "connection refused"] {
            assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
        }
    }

    #[test]
    fn the_variable_forces_a_backend() {
        let found = Some(PathBuf::from("/usr/bin/redis-server"));
        let (backend, _) = choose(Some("container"), found.clone(), IMAGE.into(), || Ok(())).unwrap();
        assert_eq!(backend, Backend::Container);
        let err = choose(Some("container"), found, IMAGE.into(), no_docker).unwrap_err();
        assert!(err.contains("REDIS_TEST_BACKEND=container") && err.contains("connection refused"), "{err}");

        let (backend, _) =
            choose(Some("Process"), Some("/x/redis-server".into()), IMAGE.into(), || Ok(())).unwrap();
        assert_eq!(backend, Backend::Process);
        let err = choose(Some("process"), None, IMAGE.into(), || Ok(())).unwrap_err();
        assert!(err.contains("not on PATH"), "{err}");

        let err = choose(Some("podman"), None, IMAGE.into(), || Ok(())).unwrap_err();
        assert!(err.contains("`podman`"), "{err}");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://:s3cret@db:6379/0"), "redis://:***@db:6379/0");
        assert_eq!(redact("redis://user:s3cret@db/"), "redis://user:***@db/");
        assert_eq!(redact("redis://127.0.0.1:6379/"), "redis://127.0.0.1:6379/");
    }
}
