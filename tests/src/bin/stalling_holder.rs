//! Holds a watchdog lock and reports, as it runs, whether it believes it holds it: the process
//! the tests freeze with SIGSTOP past its liveness TTL.
//!
//! Usage: `stalling_holder <redis-url> <key> <liveness-ttl-ms>`. Prints `acquired <token>`, then
//! every few ms `held <unix µs before the check> <true|false>`; when `lost()` fires, `lost
//! <reason> <unix µs>`, then takes `<key>:after` and prints `after <token>` (a new identity
//! once the old one died) and exits.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_core::{LockClient, LockOptions};

fn unix_us() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, key, liveness_ms] = args.as_slice() else {
        anyhow::bail!("usage: stalling_holder <redis-url> <key> <liveness-ttl-ms>");
    };
    let client = LockClient::builder()
        .url(url.as_str())
        .instance_id("stalling-holder")
        .liveness_ttl(Duration::from_millis(liveness_ms.parse()?))
        .command_timeout(Duration::from_millis(200))
        .build()?;
    let guard = client.try_lock(key, LockOptions::new()).await?;
    println!("acquired {}", guard.token());
    let mut lost = std::pin::pin!(guard.lost());
    loop {
        tokio::select! {
            reason = &mut lost => {
                println!("lost {reason:?} {}", unix_us());
                break;
            }
            () = tokio::time::sleep(Duration::from_millis(5)) => {
                // The time is read before the check: the belief held at some point after it.
                let before = unix_us();
                println!("held {before} {}", guard.is_held());
            }
        }
    }
    let after =
        client.acquire(&format!("{key}:after"), LockOptions::new().wait(Duration::from_secs(10))).await?;
    println!("after {}", after.token());
    after.release().await?;
    drop(guard);
    client.flush_releases(Duration::from_secs(2)).await;
    Ok(())
}
