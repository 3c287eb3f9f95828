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
//! 3. **A container**, when a Docker engine is available: `start_container` in this module is
//!    the one place for that path (not built yet: it always answers "no engine").
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
     macOS: `brew install redis`)";

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
}

/// A Redis to run an example against. If it is a private server, dropping this stops it.
pub struct Redis {
    url: String,
    source: RedisSource,
    /// Declared last: dropped after the fields above, and it stops the server.
    _server: Option<PrivateServer>,
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

/// Redis in a container through testcontainers, when a Docker engine is available.
///
/// This is the one place for that path: return `Ok(Some(redis))` with the container handle
/// kept inside the [`Redis`] (stopping it on drop), `Ok(None)` when no engine is reachable so
/// that [`Redis::start`] reports what to install, and `Err` only for an engine that is there
/// but fails. Until it is built it always answers "no engine".
fn start_container() -> Result<Option<Redis>, RedisStartError> {
    Ok(None)
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
                    _server: Some(PrivateServer { child, _dir: dir }),
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
