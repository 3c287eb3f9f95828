//! The Redis the examples run against, picked so that one command works on a fresh machine.
//!
//! [`Redis::start`] tries, in order:
//!
//! 1. **`REDIS_URL`**, if set and not empty: an existing server (yours, CI's, a container you
//!    started). Nothing is started or stopped.
//! 2. **A private `redis-server`** found on `PATH`, started on a free loopback port in a fresh
//!    temporary directory with persistence off (`--save "" --appendonly no`). It is stopped and
//!    its directory removed when the returned [`Redis`] is dropped, so keep the handle alive
//!    for as long as the example runs. (Ctrl-C reaches it too: it is in the terminal's
//!    foreground process group.)
//! 3. **A container** through testcontainers, when a Docker engine answers: the image named by
//!    `REDIS_IMAGE` (default `redis:7-alpine`; an engine without registry access can use the one
//!    `scripts/build-redis-image.sh` builds), published on a loopback port and removed on drop.
//!
//! If none works, the error says what to install (`apt-get install redis-server`,
//! `brew install redis`) or to set `REDIS_URL`.
//!
//! Both examples use it the same way:
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! let redis = examples::redis::Redis::start()?; // prints which Redis was picked
//! let locks = lock_core::LockClient::from_url(redis.url())?;
//! # let _ = locks;
//! # Ok(()) }
//! ```
//!
//! A multi-process example starts Redis once in the parent and hands the URL to its children
//! through `REDIS_URL`; the children then call [`Redis::start_quiet`] (or read the variable).

use std::fmt;
use std::io::{self, ErrorKind};
use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lock_core::redis;

use crate::temp::TempDir;

/// The environment variable naming an existing Redis.
pub const REDIS_URL_VAR: &str = "REDIS_URL";

/// The server binary looked up on `PATH`.
const REDIS_SERVER: &str = "redis-server";

/// What to do when no Redis can be found.
const INSTALL_HINT: &str = "set REDIS_URL=redis://<host>:<port>/ to use a running Redis, or install \
     Redis so that `redis-server` is on PATH (Debian/Ubuntu: `apt-get install redis-server`; \
     macOS: `brew install redis`), or start a Docker engine";

/// The environment variable naming the image of the container fallback.
pub const REDIS_IMAGE_VAR: &str = "REDIS_IMAGE";
/// The image used when `REDIS_IMAGE` is not set.
const DEFAULT_IMAGE: &str = "redis:7-alpine";
/// How long the Docker engine has to answer a ping before it counts as absent.
const DOCKER_PING_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a container has to start and say it is ready (a first pull may take a while).
const CONTAINER_START_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a freshly started server has to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Interval between readiness probes.
const READY_POLL: Duration = Duration::from_millis(10);
/// Timeout of one readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(250);
/// Fresh ports tried when the chosen one is taken between choosing and binding.
const PORT_ATTEMPTS: usize = 5;

/// Where the Redis of an example came from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisSource {
    /// The server named by `REDIS_URL`.
    Env,
    /// A private `redis-server` this process started (and stops on drop).
    Private {
        /// Its process id.
        pid: u32,
    },
    /// A container this process started (and removes on drop).
    Container {
        /// The image it runs.
        image: String,
    },
}

/// No Redis could be found or started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisStartError {
    /// Neither `REDIS_URL`, nor `redis-server` on `PATH`, nor a container engine.
    #[error("no Redis to run the example against: {INSTALL_HINT}")]
    NotFound,
    /// `redis-server` is installed but did not come up.
    #[error("`redis-server` was found on PATH but did not start: {reason}\nAlternatively, {INSTALL_HINT}")]
    StartFailed {
        /// What went wrong, with the tail of the server's log when there is one.
        reason: String,
    },
    /// A Docker engine answered, but the Redis container did not start.
    #[error(
        "a Docker engine answered, but the Redis container from `{image}` did not start: {reason}\n\
         Without registry access, build a local image with scripts/build-redis-image.sh and set \
         {REDIS_IMAGE_VAR} to the name it prints; or {INSTALL_HINT}"
    )]
    ContainerFailed {
        /// The image that was tried.
        image: String,
        /// What went wrong.
        reason: String,
    },
}

/// A Redis to run an example against. If it is a private server, dropping this stops it.
pub struct Redis {
    url: String,
    source: RedisSource,
    /// What this process started (a server process or a container), held only to be dropped
    /// last, which stops it.
    _server: Option<Box<dyn Send + Sync>>,
}

impl Redis {
    /// Picks a Redis (see the [module docs](self)) and prints one line saying which.
    pub fn start() -> Result<Redis, RedisStartError> {
        let redis = Redis::start_quiet()?;
        println!("Redis: {redis}");
        Ok(redis)
    }

    /// Like [`start`](Self::start), without printing.
    pub fn start_quiet() -> Result<Redis, RedisStartError> {
        if let Ok(url) = std::env::var(REDIS_URL_VAR)
            && !url.trim().is_empty()
        {
            return Ok(Redis { url: url.trim().to_owned(), source: RedisSource::Env, _server: None });
        }
        let local_failure = match start_private() {
            Ok(redis) => return Ok(redis),
            Err(Private::NotInstalled) => None,
            Err(Private::Failed(reason)) => Some(reason),
        };
        if let Some(redis) = start_container()? {
            return Ok(redis);
        }
        Err(match local_failure {
            Some(reason) => RedisStartError::StartFailed { reason },
            None => RedisStartError::NotFound,
        })
    }

    /// The connection URL, e.g. `redis://127.0.0.1:40123/`. May carry a password when it came
    /// from `REDIS_URL`: don't print it; print the [`Redis`] itself, which hides it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Where it came from.
    pub fn source(&self) -> &RedisSource {
        &self.source
    }
}

impl fmt::Display for Redis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            RedisSource::Env => write!(f, "{} from {REDIS_URL_VAR}", redact(&self.url)),
            RedisSource::Private { pid } => {
                write!(f, "private redis-server at {} (pid {pid}, in memory only, stopped on exit)", self.url)
            }
            RedisSource::Container { image } => {
                write!(f, "Redis container from `{image}` at {} (removed on exit)", self.url)
            }
        }
    }
}

impl fmt::Debug for Redis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redis").field("url", &redact(&self.url)).field("source", &self.source).finish()
    }
}

/// Hides the password of `scheme://user:password@host` URLs.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or("", |(user, _)| user);
            format!("{scheme}://{user}:***@{host}")
        }
        None => url.to_owned(),
    }
}

/// Redis in a container through testcontainers: `Ok(None)` when no Docker engine answers,
/// `Err` when one does but the container does not start.
fn start_container() -> Result<Option<Redis>, RedisStartError> {
    use std::collections::HashMap;

    use testcontainers::bollard::models::PortBinding;
    use testcontainers::core::client::docker_client_instance;
    use testcontainers::core::{IntoContainerPort, WaitFor};
    use testcontainers::runners::AsyncRunner;
    use testcontainers::{GenericImage, ImageExt};

    let ping = docker::block_on(DOCKER_PING_TIMEOUT, async {
        let docker = docker_client_instance().await.map_err(|e| e.to_string())?;
        docker.ping().await.map(drop).map_err(|e| e.to_string())
    });
    if !matches!(ping, Some(Ok(()))) {
        return Ok(None);
    }
    let image = std::env::var(REDIS_IMAGE_VAR)
        .ok()
        .filter(|i| !i.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_IMAGE.to_owned());
    let (name, tag) = split_image(&image);
    let failed = |reason: String| RedisStartError::ContainerFailed { image: image.clone(), reason };
    let port = free_port().map_err(|e| failed(format!("no free port: {e}")))?;
    let request = GenericImage::new(name, tag)
        .with_wait_for(WaitFor::message_on_stdout("Ready to accept connections"))
        // Arguments only: the official image's entrypoint prepends `redis-server` to them.
        // Protected mode would refuse connections through Docker's port proxy; the port is
        // published on loopback only instead.
        .with_cmd(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
        .with_mapped_port(port, 6379.tcp())
        .with_host_config_modifier(move |config| {
            let binding =
                PortBinding { host_ip: Some("127.0.0.1".to_owned()), host_port: Some(port.to_string()) };
            config.port_bindings = Some(HashMap::from([("6379/tcp".to_owned(), Some(vec![binding]))]));
        })
        .with_startup_timeout(CONTAINER_START_TIMEOUT);
    let started = docker::block_on(CONTAINER_START_TIMEOUT + DOCKER_PING_TIMEOUT, async move {
        request.start().await.map_err(|e| e.to_string())
    })
    .ok_or_else(|| failed("timed out".into()))?;
    let container = started.map_err(failed)?;
    Ok(Some(Redis {
        url: format!("redis://127.0.0.1:{port}/"),
        source: RedisSource::Container { image: image.clone() },
        _server: Some(Box::new(ContainerServer { container: Some(container) })),
    }))
}

/// `name[:tag]` (the name may hold a registry `host:port/`), the tag defaulting to `latest`.
fn split_image(image: &str) -> (&str, &str) {
    let name_start = image.rfind('/').map_or(0, |slash| slash + 1);
    match image[name_start..].rfind(':') {
        Some(colon) => (&image[..name_start + colon], &image[name_start + colon + 1..]),
        None => (image, "latest"),
    }
}

/// A Redis container, removed on drop.
struct ContainerServer {
    container: Option<testcontainers::ContainerAsync<testcontainers::GenericImage>>,
}

impl Drop for ContainerServer {
    fn drop(&mut self) {
        if let Some(container) = self.container.take() {
            let _ = docker::block_on(Duration::from_secs(30), async move { container.rm().await });
        }
    }
}

/// Docker calls are async; [`Redis::start`] is not, and may be called inside a runtime (where
/// `block_on` would panic). They run on a small runtime of their own.
mod docker {
    use std::future::Future;
    use std::sync::{OnceLock, mpsc};
    use std::time::Duration;

    fn runtime() -> Option<&'static tokio::runtime::Runtime> {
        static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
        RUNTIME
            .get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("examples-docker")
                    .enable_all()
                    .build()
                    .ok()
            })
            .as_ref()
    }

    /// Runs `fut` on the Docker runtime and waits for it, at most `timeout` (`None`: timed out
    /// or no runtime).
    pub(super) fn block_on<T: Send + 'static>(
        timeout: Duration,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = mpsc::sync_channel(1);
        runtime()?.spawn(async move {
            let _ = tx.send(tokio::time::timeout(timeout, fut).await.ok());
        });
        rx.recv().ok().flatten()
    }
}

/// A `redis-server` child process and its directory.
struct PrivateServer {
    child: Child,
    /// Removed after the process is killed (fields drop after `Drop::drop` runs).
    _dir: TempDir,
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        // SIGKILL: nothing is persisted, so there is nothing to shut down gracefully.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Why the private server could not be used.
enum Private {
    /// `redis-server` is not on `PATH`.
    NotInstalled,
    /// It is, but did not come up.
    Failed(String),
}

fn start_private() -> Result<Redis, Private> {
    let dir = TempDir::new("example-redis")
        .map_err(|e| Private::Failed(format!("cannot create a temporary directory: {e}")))?;
    let mut last = String::new();
    for _ in 0..PORT_ATTEMPTS {
        let port = free_port().map_err(|e| Private::Failed(format!("no free loopback port: {e}")))?;
        match launch(port, dir.path())? {
            Launch::Ready(child) => {
                let pid = child.id();
                return Ok(Redis {
                    url: format!("redis://127.0.0.1:{port}/"),
                    source: RedisSource::Private { pid },
                    _server: Some(Box::new(PrivateServer { child, _dir: dir })),
                });
            }
            Launch::PortTaken => last = format!("port {port} was taken before redis-server could bind it"),
        }
    }
    Err(Private::Failed(format!("no free port after {PORT_ATTEMPTS} attempts ({last})")))
}

/// Asks the OS for a currently free loopback port.
fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}

enum Launch {
    Ready(Child),
    PortTaken,
}

/// Starts `redis-server` on `port` and waits until it, and not some other process, answers.
fn launch(port: u16, dir: &Path) -> Result<Launch, Private> {
    let log = dir.join("redis.log");
    let _ = std::fs::remove_file(&log);
    let mut child = Command::new(REDIS_SERVER)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| match e.kind() {
            ErrorKind::NotFound => Private::NotInstalled,
            _ => Private::Failed(format!("cannot run `{REDIS_SERVER}`: {e}")),
        })?;
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let tail = log_tail(&log);
                return if tail.contains("Address already in use") {
                    Ok(Launch::PortTaken)
                } else {
                    Err(Private::Failed(format!("it exited during startup ({status})\n{tail}")))
                };
            }
            Ok(None) => {}
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Private::Failed(format!("cannot check its process status: {e}")));
            }
        }
        if answering_pid(port) == Some(child.id()) {
            return Ok(Launch::Ready(child));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Private::Failed(format!(
                "it did not answer on port {port} within {READY_TIMEOUT:?}\n{}",
                log_tail(&log)
            )));
        }
        std::thread::sleep(READY_POLL);
    }
}

/// The `process_id` of the server answering on `port`, if one answers.
fn answering_pid(port: u16) -> Option<u32> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let mut con = client.get_connection_with_timeout(PROBE_TIMEOUT).ok()?;
    con.set_read_timeout(Some(PROBE_TIMEOUT)).ok()?;
    con.set_write_timeout(Some(PROBE_TIMEOUT)).ok()?;
    let info: String = redis::cmd("INFO").arg("server").query(&mut con).ok()?;
    info.lines().find_map(|l| l.strip_prefix("process_id:")).and_then(|pid| pid.trim().parse().ok())
}

/// The last lines of the server log, for an error message.
fn log_tail(log: &Path) -> String {
    match std::fs::read_to_string(log) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n");
            format!("--- tail of {} ---\n{tail}", log.display())
        }
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(redact("redis://:secret@db:6379/0"), "redis://:***@db:6379/0");
        assert_eq!(redact("rediss://app:secret@db/"), "rediss://app:***@db/");
        assert_eq!(redact("redis://127.0.0.1:6379/"), "redis://127.0.0.1:6379/");
    }
}
