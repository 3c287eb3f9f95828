//! A private `redis-server` per test, with fault injection.
//!
//! [`RedisServer::start`] launches `redis-server` (found on `PATH`) on a free
//! loopback port inside a fresh temporary directory. The server can then be
//! hard-stopped ([`RedisServer::stop`]), restarted on the same port
//! ([`RedisServer::restart`]), frozen ([`RedisServer::pause`], `SIGSTOP`) and
//! thawed ([`RedisServer::resume`], `SIGCONT`). Dropping the value kills the
//! process and removes its directory.
//!
//! The API is synchronous (built on [`std::process`]) so it can be used from
//! plain `#[test]` functions as well as from `#[tokio::test]` ones.
//!
//! [`redis_url_or_start`] lets non-destructive tests run against an external
//! server given by `REDIS_URL`; fault-injection tests must always use
//! [`RedisServer::start`] so they never disturb a shared server.

use std::fmt::Write as _;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use deadpool_redis::redis::{self, RedisResult, Value};

/// Connect, read and write timeout used by [`RedisServer::cli`] and
/// [`RedisServer::connection`].
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long [`RedisServer::start`] / [`RedisServer::restart`] wait for the
/// server to answer before giving up.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Interval between readiness probes.
const READY_POLL: Duration = Duration::from_millis(10);

/// Timeout of a single readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(250);

/// How many fresh ports [`RedisServer::start`] tries when the chosen port
/// turns out to be taken.
const PORT_ATTEMPTS: usize = 5;

/// Name of the server binary looked up on `PATH`.
const REDIS_SERVER: &str = "redis-server";

/// Hint appended to panics when the server binary is missing or broken.
const INSTALL_HINT: &str = "install Redis so that `redis-server` is on PATH \
     (Debian/Ubuntu: `apt-get install redis-server`; macOS: `brew install redis`)";

/// Per-process counter making temp dir names unique.
static DIR_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A private `redis-server` process owned by one test.
///
/// Dropping it kills the process (`SIGKILL` + wait) and removes its temporary
/// directory.
#[derive(Debug)]
pub struct RedisServer {
    /// The running process, `None` while stopped.
    child: Option<Child>,
    /// Loopback port the server listens on; kept across restarts.
    port: u16,
    /// Temporary working directory (also holds `redis.log`).
    dir: PathBuf,
}

/// Why one launch attempt failed.
enum LaunchError {
    /// The process exited because its port was already in use.
    PortInUse,
    /// Any other failure; the message is ready to be used in a panic.
    Fatal(String),
}

impl RedisServer {
    /// Starts a private `redis-server` on a free `127.0.0.1` port in a new
    /// temporary directory and waits until it answers.
    ///
    /// # Panics
    ///
    /// Panics with a message naming what to install if `redis-server` is not
    /// on `PATH`, and with the tail of the server log if it does not come up
    /// within 10 s (or keeps losing the race for a free port).
    pub fn start() -> RedisServer {
        let dir = make_temp_dir();
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            match launch(port, &dir) {
                Ok(child) => {
                    return RedisServer { child: Some(child), port, dir };
                }
                Err(LaunchError::PortInUse) => {
                    last_error = format!("port {port} was taken before redis-server could bind it");
                }
                Err(LaunchError::Fatal(msg)) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    panic!("{msg}");
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        panic!("could not start redis-server after {PORT_ATTEMPTS} attempts; last error: {last_error}");
    }

    /// The connection URL, `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The loopback port the server listens on (stable across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The OS process id of the running server, or `None` while stopped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Hard-stops the server: `SIGKILL` and wait (no `SIGTERM`, no graceful
    /// shutdown, nothing persisted). The port stays reserved for
    /// [`restart`](Self::restart). Does nothing if already stopped.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }

    /// Starts the server again on the same port and directory and waits until
    /// it answers `PING`. If it is still running it is hard-stopped first.
    /// The data set starts empty (persistence is disabled).
    ///
    /// # Panics
    ///
    /// Panics if the server does not come back within 10 s (for example
    /// because another process grabbed the port meanwhile).
    pub fn restart(&mut self) {
        self.stop();
        match launch(self.port, &self.dir) {
            Ok(child) => self.child = Some(child),
            Err(LaunchError::PortInUse) => panic!(
                "cannot restart redis-server: port {} was taken by another process while it was stopped\n{}",
                self.port,
                log_tail(&self.dir)
            ),
            Err(LaunchError::Fatal(msg)) => panic!("cannot restart redis-server: {msg}"),
        }
    }

    /// Freezes the server with `SIGSTOP`: connections stay open and new TCP
    /// connects are still accepted by the kernel, but nothing is answered
    /// until [`resume`](Self::resume).
    ///
    /// # Panics
    ///
    /// Panics if the server is stopped or the signal cannot be sent.
    pub fn pause(&self) {
        let pid = self.running_pid("pause");
        send_signal(pid, "STOP");
        // Signal delivery is asynchronous; on Linux wait until the kernel
        // reports the process as stopped so the caller observes the pause.
        wait_until_blocking(Duration::from_secs(2), || proc_state(pid).is_none_or(|s| s == 'T' || s == 't'));
    }

    /// Thaws a server frozen by [`pause`](Self::pause) with `SIGCONT`.
    ///
    /// # Panics
    ///
    /// Panics if the server is stopped or the signal cannot be sent.
    pub fn resume(&self) {
        let pid = self.running_pid("resume");
        send_signal(pid, "CONT");
        wait_until_blocking(Duration::from_secs(2), || proc_state(pid).is_none_or(|s| s != 'T' && s != 't'));
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
        open_connection(self.port, CLIENT_TIMEOUT)
    }

    /// The pid of the running process, or a panic naming `what` was tried.
    fn running_pid(&self, what: &str) -> u32 {
        self.pid()
            .unwrap_or_else(|| panic!("cannot {what} redis-server on port {}: it is stopped", self.port))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
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
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.trim().is_empty() => (None, url),
        _ => {
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

/// Creates a fresh, uniquely named directory under the system temp dir.
fn make_temp_dir() -> PathBuf {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let name = format!(
        "redis-test-{}-{}-{}",
        std::process::id(),
        DIR_COUNTER.fetch_add(1, Ordering::Relaxed),
        nanos
    );
    let dir = std::env::temp_dir().join(name);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create temp dir {}: {e}", dir.display()));
    dir
}

/// Asks the OS for a currently free loopback port.
fn free_port() -> u16 {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("cannot bind an ephemeral port on 127.0.0.1");
    listener.local_addr().expect("bound listener has no local address").port()
}

/// Spawns `redis-server` on `port` in `dir` and waits until it is ready.
fn launch(port: u16, dir: &Path) -> Result<Child, LaunchError> {
    let log = dir.join("redis.log");
    // Truncate the log so readiness failures show this attempt's output.
    let _ = std::fs::remove_file(&log);
    let mut child = Command::new(REDIS_SERVER)
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .args(["--daemonize", "no"])
        .args(["--protected-mode", "no"])
        .arg("--logfile")
        .arg(&log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            LaunchError::Fatal(if e.kind() == ErrorKind::NotFound {
                format!("`{REDIS_SERVER}` was not found on PATH: {INSTALL_HINT}")
            } else {
                format!("failed to spawn `{REDIS_SERVER}`: {e}; {INSTALL_HINT}")
            })
        })?;

    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let tail = log_tail(dir);
                if tail.contains("Address already in use") {
                    return Err(LaunchError::PortInUse);
                }
                return Err(LaunchError::Fatal(format!(
                    "redis-server on port {port} exited during startup ({status}); {INSTALL_HINT}\n{tail}"
                )));
            }
            Ok(None) => {}
            Err(e) => {
                kill_and_reap(&mut child);
                return Err(LaunchError::Fatal(format!("cannot query redis-server process status: {e}")));
            }
        }
        // Probe with INFO so we also check the answer comes from *our*
        // process, not from some other server that owns the port.
        if probe_pid(port) == Some(child.id()) {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            kill_and_reap(&mut child);
            return Err(LaunchError::Fatal(format!(
                "redis-server on port {port} did not answer PING within {READY_TIMEOUT:?}\n{}",
                log_tail(dir)
            )));
        }
        std::thread::sleep(READY_POLL);
    }
}

/// Pings the server on `port` and returns its `process_id`, if it answers.
fn probe_pid(port: u16) -> Option<u32> {
    let mut con = open_connection(port, PROBE_TIMEOUT).ok()?;
    redis::cmd("PING").query::<Value>(&mut con).ok()?;
    let info: String = redis::cmd("INFO").arg("server").query(&mut con).ok()?;
    info.lines().find_map(|l| l.strip_prefix("process_id:")).and_then(|pid| pid.trim().parse().ok())
}

/// Opens a sync connection to `127.0.0.1:port` with `timeout` applied to
/// connect, read and write.
fn open_connection(port: u16, timeout: Duration) -> RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let con = client.get_connection_with_timeout(timeout)?;
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    Ok(con)
}

/// `SIGKILL`s the child (which also works on a `SIGSTOP`ped process) and
/// reaps it.
fn kill_and_reap(child: &mut Child) {
    // Errors mean the process already exited; `wait` reaps it either way.
    let _ = child.kill();
    let _ = child.wait();
}

/// Sends `SIG<signal>` to `pid` using the `kill` utility (no `unsafe`).
fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run `kill -{signal} {pid}`: {e}"));
    assert!(status.success(), "`kill -{signal} {pid}` failed: {status}");
}

/// The process state letter from `/proc/<pid>/stat` (Linux only).
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Format: "pid (comm) S ..."; comm may contain spaces or parentheses.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The last lines of `redis.log` in `dir`, formatted for a panic message.
fn log_tail(dir: &Path) -> String {
    let path = dir.join("redis.log");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(30);
            let mut out = format!("--- tail of {} ---\n", path.display());
            for line in &lines[start..] {
                let _ = writeln!(out, "{line}");
            }
            out
        }
        Err(e) => format!("(no log at {}: {e})", path.display()),
    }
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
