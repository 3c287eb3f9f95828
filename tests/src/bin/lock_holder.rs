//! Takes a watchdog lock and holds it until killed: the "replica" that crashes in the
//! crash-recovery tests.
//!
//! Usage: `lock_holder <redis-url> <key> <watchdog-lease-ms> [<liveness-ttl-ms>]`; prints
//! `acquired <token>` once it holds the lock.

use std::time::Duration;

use lock_core::{LockClient, LockOptions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (url, key, lease_ms, liveness_ms) = match args.as_slice() {
        [_, url, key, lease_ms] => (url, key, lease_ms, None),
        [_, url, key, lease_ms, liveness_ms] => (url, key, lease_ms, Some(liveness_ms)),
        _ => {
            return Err("usage: lock_holder <redis-url> <key> <watchdog-lease-ms> [<liveness-ttl-ms>]".into());
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
    let client = builder.build()?;
    let guard = client.try_lock(key, LockOptions::new()).await?;
    println!("acquired {}", guard.token());
    // Hold until killed; the watchdog renews meanwhile.
    std::future::pending::<()>().await;
    Ok(())
}
