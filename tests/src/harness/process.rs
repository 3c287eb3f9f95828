//! The process backend: a `redis-server` child process on a free loopback port.

use std::fmt::Write as _;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{INSTALL_HINT, PORT_ATTEMPTS, READY_POLL, READY_TIMEOUT, probe_info, wait_until_blocking};

/// Name of the server binary looked up on `PATH`.
pub(super) const REDIS_SERVER: &str = "redis-server";

/// Per-process counter making temp dir names unique.
static DIR_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A private `redis-server` child process.
#[derive(Debug)]
pub(super) struct ProcessServer {
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

impl ProcessServer {
    /// Starts `redis-server` on a free port in a new temp dir; panics with a
    /// message naming what to install on failure.
    pub(super) fn start() -> ProcessServer {
        let dir = make_temp_dir();
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            match launch(port, &dir) {
                Ok(child) => {
                    return ProcessServer { child: Some(child), port, dir };
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

    pub(super) fn port(&self) -> u16 {
        self.port
    }

    pub(super) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `SIGKILL` and reap; the port stays reserved for [`restart`](Self::restart).
    pub(super) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }

    pub(super) fn restart(&mut self) {
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

    /// `SIGSTOP`, then wait until the kernel reports the process stopped.
    pub(super) fn pause(&self) {
        let pid = self.running_pid("pause");
        send_signal(pid, "STOP");
        // Signal delivery is asynchronous; on Linux wait until the kernel
        // reports the process as stopped so the caller observes the pause.
        wait_until_blocking(Duration::from_secs(2), || proc_state(pid).is_none_or(|s| s == 'T' || s == 't'));
    }

    /// `SIGCONT`, then wait until the process runs again.
    pub(super) fn resume(&self) {
        let pid = self.running_pid("resume");
        send_signal(pid, "CONT");
        wait_until_blocking(Duration::from_secs(2), || proc_state(pid).is_none_or(|s| s != 'T' && s != 't'));
    }

    /// The pid of the running process, or a panic naming `what` was tried.
    fn running_pid(&self, what: &str) -> u32 {
        self.pid()
            .unwrap_or_else(|| panic!("cannot {what} redis-server on port {}: it is stopped", self.port))
    }
}

impl Drop for ProcessServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

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
pub(super) fn free_port() -> u16 {
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
        if probe_info(port, "process_id").and_then(|pid| pid.parse().ok()) == Some(child.id()) {
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
