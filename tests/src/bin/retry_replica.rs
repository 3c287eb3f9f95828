//! One scheduler replica whose job fails its first attempts at every slot, as its own process:
//! the replicas of the retry tests (`tests/tests/scheduler_retry.rs`).
//!
//! Usage: `retry_replica <redis-url> <instance> <lock-key> <cron> <failing-attempts> <attempts>
//! <base-delay-ms> <factor> [<pause-after-failures>]`. Runs job `retry-job` on `<cron>` under `<lock-key>` with a retry
//! policy of `<attempts>` attempts (no jitter); each attempt prints
//! `attempt <tick> <n> <wall ms>`, then attempts up to `<failing-attempts>` print
//! `failing <tick> <n> <wall ms>` and return an error, later ones print
//! `succeeded <tick> <n> <wall ms>`. Logs (tracing, no colours) go to stderr.

use std::time::Duration;

use lock_core::LockClient;
use lock_scheduler::chrono::Utc;
use lock_scheduler::{Job, RetryPolicy, Scheduler};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (args, pause_after) = match args.as_slice() {
        [rest @ .., pause] if rest.len() == 9 => (rest, Some(pause.parse::<u32>()?)),
        all => (all, None),
    };
    let [_, url, instance, key, cron, failing, attempts, base_ms, factor] = args else {
        anyhow::bail!(
            "usage: retry_replica <redis-url> <instance> <lock-key> <cron> <failing-attempts> <attempts> \
             <base-delay-ms> <factor> [<pause-after-failures>]"
        );
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).with_writer(std::io::stderr).init();

    let client = LockClient::builder()
        .url(url.as_str())
        .instance_id(instance.as_str())
        .command_timeout(Duration::from_millis(500))
        .build()?;
    let failing: u32 = failing.parse()?;
    let policy = RetryPolicy::attempts(attempts.parse()?)
        .base_delay(Duration::from_millis(base_ms.parse()?))
        .factor(factor.parse()?)
        .jitter(0.0);
    let job = Job::with_context("retry-job", cron.as_str(), move |ctx| async move {
        let (tick, n) = (ctx.tick(), ctx.attempt());
        println!("attempt {tick} {n} {}", Utc::now().timestamp_millis());
        if n <= failing {
            println!("failing {tick} {n} {}", Utc::now().timestamp_millis());
            return Err(format!("attempt {n} fails on purpose"));
        }
        println!("succeeded {tick} {n} {}", Utc::now().timestamp_millis());
        Ok(())
    })
    .lock(key.as_str())
    .retry(policy);
    // Pauses itself after that many slots failed for good in a row, if asked.
    let job = match pause_after {
        Some(n) => job.pause_after_failures(n),
        None => job,
    };
    let scheduler = Scheduler::builder().client(client).job(job).build()?;
    scheduler.run_until_signal().await?;
    Ok(())
}
