//! No secret in any `Debug`, `Display`, log line or error: every public type is built from a
//! URL with a password (right, wrong and missing), and their outputs and the captured logs
//! (at TRACE) are searched for the passwords. Credential errors say what to fix and are not
//! retried as if transient.
//!
//! One test in this binary: it installs the process-wide log capture.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_core::tick::TickRun;
use lock_core::{LockClient, LockError, LockOptions};
use tests::harness::RedisServer;

const PASSWORD: &str = "s3cret-Pa55word";
const WRONG: &str = "Wr0ng-Pa55word";

/// A writer appending every log line to a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
            .into_owned()
    }
}

fn client(url: &str, instance: &str) -> LockClient {
    LockClient::builder()
        .url(url)
        .instance_id(instance)
        .command_timeout(Duration::from_millis(500))
        .watchdog_lease(Duration::from_millis(600))
        .build()
        .expect("a valid configuration")
}

#[tokio::test]
async fn no_password_in_debug_display_logs_or_errors() {
    let logs = Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    let server = RedisServer::start();
    server.cli(&["CONFIG", "SET", "requirepass", PASSWORD]);
    let port = server.port();
    let good_url = format!("redis://:{PASSWORD}@127.0.0.1:{port}/");
    let mut shown: Vec<String> = Vec::new();

    // The builder, the client, its pool and stats, a guard, the current lock, errors.
    let builder = LockClient::builder().url(&good_url).instance_id("pod-1");
    shown.push(format!("{builder:?}"));
    let good = client(&good_url, "pod-1");
    let other = client(&good_url, "pod-2");
    shown.push(format!("{good:?}"));
    shown.push(format!("{:?}", good.pool()));
    let guard = good.acquire("lock:secret", LockOptions::new().fencing(true)).await.expect("acquired");
    shown.push(format!("{guard:?}"));
    shown.push(format!("{:?}", good.stats()));
    let held = other.try_lock("lock:secret", LockOptions::new()).await.expect_err("held");
    assert!(matches!(held, LockError::Held { .. }), "{held:?}");
    shown.push(format!("{held} / {held:?}"));
    let tick = other.run_tick("lock:secret", 1, LockOptions::new(), async {}).await.expect("no error");
    assert!(matches!(tick, TickRun::Held { .. }), "{tick:?}");
    shown.push(format!("{tick:?}"));
    good.with_lock("lock:secret-section", LockOptions::new(), async {
        shown.push(format!("{:?}", lock_core::current()));
    })
    .await
    .expect("a free lock");
    assert!(guard.release().await.expect("released"));
    drop(good.acquire("lock:secret-dropped", LockOptions::new()).await.expect("acquired"));
    assert!(good.flush_releases(Duration::from_secs(2)).await);

    // A wrong password: a credential error naming what to check, not retried until the
    // wait bound as if Redis were merely unreachable.
    let wrong = client(&format!("redis://:{WRONG}@127.0.0.1:{port}/"), "pod-3");
    let started = Instant::now();
    let err = wrong
        .acquire("lock:secret", LockOptions::new().wait(Duration::from_secs(5)))
        .await
        .expect_err("wrong password");
    assert!(matches!(err, LockError::Auth { .. }), "{err:?}");
    assert!(!err.is_transient(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "a wrong password is not retried: {:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("password"), "{err}");
    shown.push(format!("{err} / {err:?}"));

    // No password at all: the message says one is needed.
    let missing = client(&format!("redis://127.0.0.1:{port}/"), "pod-4");
    let err = missing.try_lock("lock:secret", LockOptions::new()).await.expect_err("no password");
    assert!(matches!(err, LockError::Auth { .. }), "{err:?}");
    assert!(err.to_string().contains("requires a password"), "{err}");
    shown.push(format!("{err} / {err:?}"));

    // A URL that does not parse, with a password in it.
    let err = LockClient::from_url(&format!("redis://:{PASSWORD}@127.0.0.1:notaport/")).expect_err("bad url");
    shown.push(format!("{err} / {err:?}"));

    let logs = logs.text();
    assert!(logs.contains("lock acquired"), "the log capture works: {logs}");
    for (i, text) in shown.iter().chain(std::iter::once(&logs)).enumerate() {
        for secret in [PASSWORD, WRONG] {
            assert!(!text.contains(secret), "output {i} shows a password: {text}");
        }
    }
}
