//! Takes a watchdog lock and holds it until killed: the "replica" that crashes in the
//! crash-recovery tests.
//!
//! Usage: `lock_holder <redis-url> <key> <watchdog-lease-ms> [<liveness-ttl-ms> [<ca-file>]]`;
//! prints `acquired <token>` once it holds the lock. The URL may be any form lock-core accepts
//! (`rediss://`, `redis+sentinel://`, `redis+cluster://`); `<ca-file>` is the PEM CA a
//! `rediss://` server's certificate is checked against.

use std::time::Duration;

use lock_core::{LockClient, LockOptions};

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
    let guard = loop {
        match client.try_lock(key, LockOptions::new()).await {
            Ok(guard) => break guard,
            Err(e) if e.is_transient() && std::time::Instant::now() < deadline => {
                eprintln!("lock_holder: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    println!("acquired {}", guard.token());
    // Hold until killed; the watchdog renews meanwhile.
    std::future::pending::<()>().await;
    Ok(())
}
