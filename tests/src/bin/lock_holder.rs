//! Takes a watchdog lock and holds it until killed: the "replica" that crashes in the
//! crash-recovery tests.
//!
//! Usage: `lock_holder <redis-url> <key> <watchdog-lease-ms>`; prints `acquired <token>` once
//! it holds the lock.

use std::time::Duration;

use lock_core::{LockClient, LockOptions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, key, lease_ms] = args.as_slice() else {
        return Err("usage: lock_holder <redis-url> <key> <watchdog-lease-ms>".into());
    };
    let client = LockClient::builder()
        .url(url.as_str())
        .instance_id("crashing-holder")
        .watchdog_lease(Duration::from_millis(lease_ms.parse()?))
        .command_timeout(Duration::from_millis(200))
        .build()?;
    let guard = client.try_lock(key, LockOptions::new()).await?;
    println!("acquired {}", guard.token());
    // Hold until killed; the watchdog renews meanwhile.
    std::future::pending::<()>().await;
    Ok(())
}
