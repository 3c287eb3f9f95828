//! Takes a watchdog lock and holds it until killed: the "replica" that crashes in the
//! crash-recovery tests.
//!
//! Usage: `lock_holder <redis-url> <key> <watchdog-lease-ms> [<liveness-ttl-ms> [<ca-file>]]`;
//! prints `acquired <token>` once it holds the lock. The URL may be any form lock-core accepts
//! (`rediss://`, `redis+sentinel://`, `redis+cluster://`); `<ca-file>` is the PEM CA a
//! `rediss://` server's certificate is checked against.
//!
//! When the client learns that it lost the hold (its lease or liveness lapsed, e.g. while cut
//! off from Redis), it prints `lost <reason>` and keeps running.
//!
//! `LOCK_HOLD` picks what is held on `<key>`: `lock` (the default), `permit:<N>` (a permit of
//! the semaphore `<key>` of N permits), `read` or `write` (of the read-write lock `<key>`).

use std::any::Any;
use std::io::Write;
use std::time::Duration;

use futures_util::future::BoxFuture;
use lock_core::{LockClient, LockError, LockOptions, LossReason};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (url, key, lease_ms, liveness_ms, ca_file) = match args.as_slice() {
        [_, url, key, lease_ms] => (url, key, lease_ms, None, None),
        [_, url, key, lease_ms, liveness_ms] => (url, key, lease_ms, Some(liveness_ms), None),
        [_, url, key, lease_ms, liveness_ms, ca_file] => {
            (url, key, lease_ms, Some(liveness_ms), Some(ca_file))
        }
        _ => {
            return Err(
                "usage: lock_holder <redis-url> <key> <watchdog-lease-ms> [<liveness-ttl-ms> [<ca-file>]]"
                    .into(),
            );
        }
    };
    let mut builder = LockClient::builder()
        .url(url.as_str())
        .instance_id("crashing-holder")
        .watchdog_lease(Duration::from_millis(lease_ms.parse()?))
        .command_timeout(Duration::from_millis(200));
    if let Some(ms) = liveness_ms {
        builder = builder.liveness_ttl(Duration::from_millis(ms.parse()?));
    }
    if let Some(path) = ca_file {
        builder = builder.tls_root_ca(std::fs::read(path)?);
    }
    let client = builder.build()?;
    // A transient failure (the first TLS handshake of a debug build on a busy machine can
    // outlast the command timeout) is retried: the tests need the lock taken, not a race lost.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let hold = std::env::var("LOCK_HOLD").unwrap_or_else(|_| "lock".to_owned());
    if !["lock", "read", "write"].contains(&hold.as_str()) && !hold.starts_with("permit:") {
        return Err(format!("LOCK_HOLD={hold:?}: expected lock, permit:<N>, read or write").into());
    }
    let (token, _guard, lost) = loop {
        match take(&client, key, &hold).await {
            Ok(held) => break held,
            Err(e) if e.is_transient() && std::time::Instant::now() < deadline => {
                eprintln!("lock_holder: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    println!("acquired {token}");
    // Hold until killed; the watchdog renews meanwhile.
    let reason = lost.await;
    // Nobody may be reading any more (the tests that only wait for `acquired`): not an error.
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "lost {reason:?}").and_then(|()| stdout.flush());
    std::future::pending::<()>().await;
    Ok(())
}

/// What [`take`] holds: the token, the guard (to be kept alive) and its `lost()` future.
type Held = (String, Box<dyn Any>, BoxFuture<'static, LossReason>);

/// Takes `hold` on `key`.
async fn take(client: &LockClient, key: &str, hold: &str) -> Result<Held, LockError> {
    macro_rules! kept {
        ($guard:expr) => {{
            let guard = $guard;
            let lost: BoxFuture<'static, LossReason> = Box::pin(guard.lost());
            (guard.token().to_owned(), Box::new(guard) as Box<dyn Any>, lost)
        }};
    }
    let options = LockOptions::new();
    Ok(match hold.split_once(':') {
        Some(("permit", n)) => {
            let permits = n.parse().map_err(|_| LockError::InvalidOptions(format!("LOCK_HOLD={hold:?}")))?;
            kept!(client.semaphore(key, permits)?.acquire(options).await?)
        }
        _ => match hold {
            "read" => {
                kept!(client.rw_lock(key)?.read(options).await?)
            }
            "write" => {
                kept!(client.rw_lock(key)?.write(options).await?)
            }
            _ => {
                kept!(client.try_lock(key, options).await?)
            }
        },
    })
}
