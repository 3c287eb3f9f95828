//! The container backend: Redis in a Docker container, driven through testcontainers.
//!
//! Each server is one container from the image named by `REDIS_TEST_IMAGE`
//! (default `redis:7-alpine`), with its port 6379 published on a fixed free
//! `127.0.0.1` port. The port is chosen before the container is created, so
//! it stays the same across `docker kill` / `docker start`, which is what
//! [`stop`](ContainerServer::stop) and [`restart`](ContainerServer::restart)
//! do; [`pause`](ContainerServer::pause) and [`resume`](ContainerServer::resume)
//! are `docker pause` / `docker unpause` (the cgroup freezer: connections are
//! still accepted, nothing is answered).
//!
//! testcontainers is async; the harness API is synchronous and is called from
//! plain tests and from both tokio runtime flavours. Every Docker call therefore
//! runs on a small runtime owned by the harness, and the caller blocks on a
//! channel until it finishes or its deadline passes. Containers are also
//! removed on that runtime, so a test's own runtime is never involved.

use std::collections::HashMap;
use std::future::Future;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::{Duration, Instant};

use testcontainers::bollard::models::PortBinding;
use testcontainers::bollard::query_parameters::{
    InspectContainerOptions, KillContainerOptions, RemoveContainerOptionsBuilder,
};
use testcontainers::core::client::docker_client_instance;
use testcontainers::core::{ContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use super::process::free_port;
use super::{PORT_ATTEMPTS, READY_POLL, READY_TIMEOUT, probe_info, wait_until_blocking};

/// Environment variable naming the Redis image.
pub(super) const IMAGE_VAR: &str = "REDIS_TEST_IMAGE";

/// The image used when [`IMAGE_VAR`] is unset: public, so a machine with
/// registry access needs nothing else.
pub(super) const DEFAULT_IMAGE: &str = "redis:7-alpine";

/// Label put on every container the harness starts (value: the test process id),
/// so leftovers of a killed test run can be found:
/// `docker ps -aq --filter label=org.distributed-lock.test-harness`.
pub(super) const LABEL: &str = "org.distributed-lock.test-harness";

/// The port Redis listens on inside the container.
const REDIS_PORT: u16 = 6379;

/// Deadline of one Docker API call (kill, start, pause, inspect, remove).
const DOCKER_TIMEOUT: Duration = Duration::from_secs(30);

/// Deadline for creating and starting a container until Redis logs that it is
/// ready (generous: the first container of a run may wait on the engine).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// How long [`docker_status`] waits for the engine to answer a ping.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// Makes container names unique within the process.
static NAME_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The image to run: `REDIS_TEST_IMAGE` if set and non-empty, else [`DEFAULT_IMAGE`].
pub(super) fn image() -> String {
    match std::env::var(IMAGE_VAR) {
        Ok(image) if !image.trim().is_empty() => image.trim().to_owned(),
        _ => DEFAULT_IMAGE.to_owned(),
    }
}

/// `Ok` when a Docker engine answers a ping, else why not.
pub(super) fn docker_status() -> Result<(), String> {
    block_on("pinging the Docker engine", PING_TIMEOUT, async {
        let docker = docker_client_instance().await.map_err(|e| e.to_string())?;
        docker.ping().await.map(drop).map_err(|e| e.to_string())
    })
    .and_then(|answer| answer)
}

/// A private Redis container.
#[derive(Debug)]
pub(super) struct ContainerServer {
    /// The container; `None` only during drop.
    container: Option<Arc<ContainerAsync<GenericImage>>>,
    /// Container id, for messages and [`id`](Self::id).
    id: String,
    /// The image it runs.
    image: String,
    /// Host port (on 127.0.0.1) published for Redis; kept across restarts.
    port: u16,
    /// Whether the container is running (false after [`stop`](Self::stop)).
    running: bool,
    /// Whether it is frozen by [`pause`](Self::pause) (pause takes `&self`).
    paused: AtomicBool,
    /// `run_id` of the Redis process last seen, to recognise a restarted one.
    run_id: String,
}

impl ContainerServer {
    /// Starts a container from `image` on a free host port and waits until
    /// Redis answers there; panics with a message saying how to fix it.
    pub(super) fn start(image: &str) -> ContainerServer {
        let mut last_error = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            match create(image, port) {
                Ok(container) => return ContainerServer::ready(container, image, port),
                Err(e) if is_port_conflict(&e) => {
                    last_error = format!("host port {port} was taken before Docker could bind it: {e}");
                }
                Err(e) => panic!(
                    "cannot start a Redis container from image `{image}`: {e}\n\
                     If the engine cannot pull images, build one from the local redis-server with \
                     `scripts/build-redis-image.sh` and set {IMAGE_VAR} to the name it prints."
                ),
            }
        }
        panic!("could not start a Redis container after {PORT_ATTEMPTS} attempts; last error: {last_error}");
    }

    /// Wraps a started container once Redis answers on its published port.
    fn ready(container: ContainerAsync<GenericImage>, image: &str, port: u16) -> ContainerServer {
        let id = container.id().to_owned();
        let mut server = ContainerServer {
            container: Some(Arc::new(container)),
            id,
            image: image.to_owned(),
            port,
            running: true,
            paused: AtomicBool::new(false),
            run_id: String::new(),
        };
        server.run_id = server.wait_for_new_run_id("start");
        server
    }

    pub(super) fn port(&self) -> u16 {
        self.port
    }

    pub(super) fn id(&self) -> &str {
        &self.id
    }

    /// The host pid of the container's main process, as the engine reports it
    /// (meaningful when the engine runs on this host), or `None` while stopped.
    pub(super) fn pid(&self) -> Option<u32> {
        if !self.running {
            return None;
        }
        let id = self.id.clone();
        let pid = block_on("docker inspect", DOCKER_TIMEOUT, async move {
            let docker = docker_client_instance().await.ok()?;
            let info = docker.inspect_container(&id, None::<InspectContainerOptions>).await.ok()?;
            info.state?.pid
        })
        .ok()
        .flatten()?;
        u32::try_from(pid).ok().filter(|&pid| pid != 0)
    }

    /// `docker kill` (SIGKILL, nothing persisted), then wait until the
    /// published port refuses connections. Does nothing if already stopped.
    pub(super) fn stop(&mut self) {
        if !self.running {
            return;
        }
        if self.paused.load(Ordering::SeqCst) {
            // The engine refuses to kill a paused container.
            self.resume();
        }
        let id = self.id.clone();
        self.docker("docker kill", async move {
            let docker = docker_client_instance().await?;
            docker.kill_container(&id, None::<KillContainerOptions>).await?;
            // kill returns once the signal is sent; wait for the exit.
            let deadline = Instant::now() + DOCKER_TIMEOUT;
            loop {
                let info = docker.inspect_container(&id, None::<InspectContainerOptions>).await?;
                if !info.state.and_then(|s| s.running).unwrap_or(false) || Instant::now() >= deadline {
                    return Ok(());
                }
                tokio::time::sleep(READY_POLL).await;
            }
        });
        self.running = false;
        // The engine's port proxy goes away with the container; wait for that
        // so the caller observes "connection refused" at once.
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        wait_until_blocking(Duration::from_secs(5), || {
            matches!(
                TcpStream::connect_timeout(&addr, Duration::from_millis(200)),
                Err(e) if e.kind() == ErrorKind::ConnectionRefused
            )
        });
    }

    /// `docker start` on the same port (after a kill if it is running), then
    /// wait until a new Redis process answers. The data set starts empty.
    pub(super) fn restart(&mut self) {
        self.stop();
        let container = self.container();
        self.docker("docker start", async move { Ok(container.start().await?) });
        self.running = true;
        self.run_id = self.wait_for_new_run_id("restart");
    }

    /// `docker pause`: the cgroup freezer stops every process in the container.
    pub(super) fn pause(&self) {
        assert!(self.running, "cannot pause the Redis container on port {}: it is stopped", self.port);
        let container = self.container();
        self.docker("docker pause", async move { Ok(container.pause().await?) });
        self.paused.store(true, Ordering::SeqCst);
    }

    /// `docker unpause`.
    pub(super) fn resume(&self) {
        assert!(self.running, "cannot resume the Redis container on port {}: it is stopped", self.port);
        let container = self.container();
        self.docker("docker unpause", async move { Ok(container.unpause().await?) });
        self.paused.store(false, Ordering::SeqCst);
    }

    /// Polls the published port until a Redis process other than the last
    /// one seen answers, and returns its `run_id`.
    fn wait_for_new_run_id(&self, what: &str) -> String {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(run_id) = probe_info(self.port, "run_id").filter(|id| *id != self.run_id) {
                return run_id;
            }
            if Instant::now() >= deadline {
                panic!(
                    "Redis in container {} (image `{}`) did not answer on 127.0.0.1:{} within {READY_TIMEOUT:?} \
                     after {what}\n{}",
                    self.id,
                    self.image,
                    self.port,
                    self.log_tail()
                );
            }
            std::thread::sleep(READY_POLL);
        }
    }

    /// The last lines the container printed, for panic messages.
    fn log_tail(&self) -> String {
        let container = self.container();
        let logs = block_on("docker logs", DOCKER_TIMEOUT, async move {
            let mut out = container.stdout_to_vec().await.unwrap_or_default();
            out.extend(container.stderr_to_vec().await.unwrap_or_default());
            out
        })
        .unwrap_or_default();
        let text = String::from_utf8_lossy(&logs);
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("--- tail of the container's output ---\n{tail}")
    }

    /// A handle to the container for a `'static` future.
    fn container(&self) -> Arc<ContainerAsync<GenericImage>> {
        Arc::clone(self.container.as_ref().expect("container is present until drop"))
    }

    /// Runs one Docker operation; panics naming it and the container on failure.
    fn docker<F>(&self, what: &str, fut: F)
    where
        F: Future<Output = Result<(), Box<dyn std::error::Error + Send + Sync>>> + Send + 'static,
    {
        if let Err(e) = block_on(what, DOCKER_TIMEOUT, fut).and_then(|r| r.map_err(|e| e.to_string())) {
            panic!("{what} on Redis container {} (port {}) failed: {e}", self.id, self.port);
        }
    }
}

impl Drop for ContainerServer {
    fn drop(&mut self) {
        let Some(container) = self.container.take() else { return };
        let id = self.id.clone();
        // `rm` is a forced remove: it works on running, paused and stopped containers.
        let removed = block_on("docker rm", DOCKER_TIMEOUT, async move {
            match Arc::try_unwrap(container) {
                Ok(container) => container.rm().await.map_err(|e| e.to_string()),
                Err(_) => Err("the container is still in use".to_owned()),
            }
        });
        if let Err(e) = removed.and_then(|r| r) {
            super::announce(&format!(
                "could not remove Redis container {id}: {e} (remove it with `docker rm -f {id}`)"
            ));
        }
    }
}

/// Creates and starts a container from `image` publishing Redis on
/// `127.0.0.1:port`, and waits until Redis reports it is ready.
fn create(image: &str, port: u16) -> Result<ContainerAsync<GenericImage>, String> {
    let (name, tag) = split_image(image);
    let container_name =
        format!("redis-test-{}-{}-{port}", std::process::id(), NAME_COUNTER.fetch_add(1, Ordering::Relaxed));
    let request = GenericImage::new(name, tag)
        .with_wait_for(WaitFor::message_on_stdout("Ready to accept connections"))
        // Arguments only: the official image's entrypoint prepends
        // `redis-server` to arguments starting with `-`, and the image
        // built by scripts/build-redis-image.sh has redis-server as its
        // entrypoint.
        .with_cmd([
            "--port",
            "6379",
            "--bind",
            "0.0.0.0",
            "--protected-mode",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .with_mapped_port(port, ContainerPort::Tcp(REDIS_PORT))
        // Publish on loopback only, like the process backend, rather than on
        // every interface as a plain mapped port would.
        .with_host_config_modifier(move |config| {
            let binding =
                PortBinding { host_ip: Some("127.0.0.1".to_owned()), host_port: Some(port.to_string()) };
            config.port_bindings = Some(HashMap::from([(format!("{REDIS_PORT}/tcp"), Some(vec![binding]))]));
        })
        .with_container_name(container_name.clone())
        .with_label(LABEL, std::process::id().to_string())
        .with_startup_timeout(STARTUP_TIMEOUT);
    let started = block_on("starting a Redis container", STARTUP_TIMEOUT + DOCKER_TIMEOUT, async move {
        request.start().await.map_err(|e| e.to_string())
    })
    .and_then(|r| r);
    if started.is_err() {
        // A container that was created but failed to start is not removed by
        // testcontainers; remove it by name (it may not exist: ignore errors).
        let _ = block_on("docker rm", DOCKER_TIMEOUT, async move {
            if let Ok(docker) = docker_client_instance().await {
                let options = RemoveContainerOptionsBuilder::new().force(true).v(true).build();
                let _ = docker.remove_container(&container_name, Some(options)).await;
            }
        });
    }
    started
}

/// Splits `name[:tag]` (the name may hold a registry `host:port/`) into name
/// and tag, the tag defaulting to `latest`.
pub(super) fn split_image(image: &str) -> (&str, &str) {
    let name_start = image.rfind('/').map_or(0, |slash| slash + 1);
    match image[name_start..].rfind(':') {
        Some(colon) => (&image[..name_start + colon], &image[name_start + colon + 1..]),
        None => (image, "latest"),
    }
}

/// Whether a start error means the chosen host port was taken meanwhile.
fn is_port_conflict(error: &str) -> bool {
    error.contains("port is already allocated") || error.contains("address already in use")
}

/// The harness's own runtime for Docker calls (one worker thread).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("redis-test-docker")
            .enable_all()
            .build()
            .expect("cannot build the test harness's runtime for Docker calls")
    })
}

/// Runs `fut` on the harness runtime and blocks until it finishes, at most
/// `timeout`. Works from any thread, including a test's own runtime.
fn block_on<T, F>(what: &str, timeout: Duration, fut: F) -> Result<T, String>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = mpsc::sync_channel(1);
    runtime().spawn(async move {
        let _ = tx.send(tokio::time::timeout(timeout, fut).await);
    });
    match rx.recv() {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(_)) => Err(format!("{what} did not finish within {timeout:?}")),
        Err(_) => Err(format!("{what} panicked")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_split_into_name_and_tag() {
        assert_eq!(split_image("redis:7-alpine"), ("redis", "7-alpine"));
        assert_eq!(split_image("redis"), ("redis", "latest"));
        assert_eq!(split_image("distributed-lock/redis:local"), ("distributed-lock/redis", "local"));
        assert_eq!(split_image("localhost:5000/redis"), ("localhost:5000/redis", "latest"));
        assert_eq!(split_image("localhost:5000/team/redis:7.0"), ("localhost:5000/team/redis", "7.0"));
    }
}
