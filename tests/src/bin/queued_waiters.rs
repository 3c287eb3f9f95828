//! Queues waiters for one key and keeps waiting until killed: the replica that dies with
//! callers queued, in the hand-off tests.
//!
//! Usage: `queued_waiters <redis-url> <key> <waiters> <command-timeout-ms>`. Prints `waiting`
//! once every waiter has been started; the hand-off time of its waiters is the command timeout.

use std::time::Duration;

use lock_core::{LockClient, LockOptions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, key, waiters, timeout_ms] = args.as_slice() else {
        anyhow::bail!("usage: queued_waiters <redis-url> <key> <waiters> <command-timeout-ms>");
    };
    let client = LockClient::builder()
        .url(url.as_str())
        .instance_id("queued-waiters")
        .command_timeout(Duration::from_millis(timeout_ms.parse()?))
        .build()?;
    let mut tasks = Vec::new();
    for _ in 0..waiters.parse::<usize>()? {
        let (client, key) = (client.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            // Held until the process is killed.
            let guard = client.acquire(&key, LockOptions::new().wait(Duration::from_secs(600))).await;
            println!("acquired {}", guard.is_ok());
            std::future::pending::<()>().await;
        }));
    }
    println!("waiting");
    for task in tasks {
        task.await?;
    }
    Ok(())
}
