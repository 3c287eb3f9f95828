//! Self-test of the Redis test harness, against whichever backend it selected (CI runs it
//! with `REDIS_TEST_BACKEND=process` and `=container`).

use std::time::{Duration, Instant};

use tests::harness::{Backend, RedisServer, init_tracing, wait_until, wait_until_blocking};

#[test]
fn start_stop_restart_pause_resume() {
    init_tracing();
    let mut server = RedisServer::start();
    let port = server.port();
    assert_eq!(server.url(), format!("redis://127.0.0.1:{port}/"));

    // Basic command round trip and reply rendering.
    assert_eq!(server.cli(&["SET", "k", "v"]), "OK");
    assert_eq!(server.cli(&["GET", "k"]), "v");
    assert_eq!(server.cli(&["GET", "missing"]), "(nil)");
    assert_eq!(server.cli(&["INCR", "n"]), "1");
    server.cli(&["RPUSH", "l", "a", "b"]);
    assert_eq!(server.cli(&["LRANGE", "l", "0", "-1"]), "a\nb");
    assert!(server.try_cli(&["NOSUCHCOMMAND"]).is_err());

    // Typed access through a sync connection.
    let mut con = server.connection();
    let got: String =
        deadpool_redis::redis::cmd("GET").arg("k").query(&mut con).expect("GET over connection()");
    assert_eq!(got, "v");
    drop(con);

    // Hard stop: connections are refused, the port is kept.
    server.stop();
    assert!(server.pid().is_none());
    let err = server.try_cli(&["PING"]).expect_err("PING on a stopped server");
    assert!(err.is_connection_refusal(), "expected connection refused, got {err}");

    // Restart on the same port; the data set is empty (no persistence).
    server.restart();
    assert_eq!(server.port(), port);
    assert_eq!(server.cli(&["PING"]), "PONG");
    assert_eq!(server.cli(&["GET", "k"]), "(nil)");

    // Paused: a command fails within the client timeout instead of hanging.
    server.pause();
    let started = Instant::now();
    let err = server.try_cli(&["PING"]).expect_err("PING on a paused server");
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(6), "paused PING took {elapsed:?}: {err}");
    assert!(!err.is_connection_refusal(), "paused server should not refuse: {err}");

    // Resumed: answers again.
    server.resume();
    assert!(wait_until_blocking(Duration::from_secs(5), || {
        server.try_cli(&["PING"]).is_ok_and(|r| r == "PONG")
    }));

    // Drop while paused must still clean up.
    server.pause();
    let pid = server.pid().expect("running");
    drop(server);
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
}

#[test]
fn restart_while_running() {
    let mut server = RedisServer::start();
    server.cli(&["SET", "k", "v"]);
    server.restart();
    assert_eq!(server.cli(&["EXISTS", "k"]), "0");
}

#[tokio::test]
async fn wait_until_async() {
    let start = Instant::now();
    assert!(wait_until(Duration::from_secs(1), || start.elapsed() > Duration::from_millis(20)).await);
    assert!(!wait_until(Duration::from_millis(30), || false).await);
    assert!(!wait_until_blocking(Duration::from_millis(30), || false));
}

#[test]
fn the_selected_backend_is_reported() {
    let server = RedisServer::start();
    let backend = server.backend().expect("a private server has a backend");
    assert_eq!(backend, Backend::selected());
    assert_eq!(server.container_id().is_some(), backend == Backend::Container);
    assert!(server.pid().is_some());
}

#[test]
fn shared_is_redis_url_or_a_private_server() {
    let mut server = RedisServer::shared();
    let key = format!("harness:shared:{}", std::process::id());
    assert_eq!(server.cli(&["SET", &key, "v", "PX", "10000"]), "OK");
    assert_eq!(server.cli(&["GET", &key]), "v");
    server.cli(&["DEL", &key]);
    match std::env::var("REDIS_URL") {
        Ok(url) if !url.trim().is_empty() => {
            assert_eq!(server.backend(), None);
            assert_eq!(server.url(), url.trim());
            assert_eq!(server.pid(), None);
            // Fault injection is refused on a server other tests share.
            let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.stop()));
            let message = *stopped.expect_err("stop() on the shared server").downcast::<String>().unwrap();
            assert!(message.contains("RedisServer::start()"), "{message}");
            assert_eq!(server.cli(&["PING"]), "PONG");
        }
        _ => assert_eq!(server.backend(), Some(Backend::selected())),
    }
}
