//! One scheduler replica as its own process: the replica that is killed mid-run, or that gets
//! SIGTERM while its job runs, in the scheduler tests.
//!
//! Usage: `scheduler_replica <redis-url> <instance> <lock-key> <job-ms> <watchdog-lease-ms> <grace-ms>
//! [<cron>]`. Runs job `replica-job` every second (or on `<cron>`) under `<lock-key>`; the job
//! prints `started <tick>`,
//! sleeps `<job-ms>`, prints `finished <tick>`. Stops gracefully on SIGTERM / Ctrl-C and prints
//! `stopped finished=<n> cancelled=<n>`. Logs (tracing, no colours) go to stderr.

use std::time::Duration;

use lock_core::LockClient;
use lock_scheduler::{Job, Scheduler};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (args, cron) = match args.as_slice() {
        [head @ .., cron] if args.len() == 8 => (head, cron.as_str()),
        all => (all, "* * * * * *"),
    };
    let [_, url, instance, key, job_ms, lease_ms, grace_ms] = args else {
        anyhow::bail!(
            "usage: scheduler_replica <redis-url> <instance> <lock-key> <job-ms> <watchdog-lease-ms> <grace-ms> [<cron>]"
        );
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).with_writer(std::io::stderr).init();

    let client = LockClient::builder()
        .url(url.as_str())
        .instance_id(instance.as_str())
        .watchdog_lease(Duration::from_millis(lease_ms.parse()?))
        .command_timeout(Duration::from_millis(200))
        .build()?;
    let job_time = Duration::from_millis(job_ms.parse()?);
    let scheduler = Scheduler::builder()
        .client(client)
        .shutdown_grace(Duration::from_millis(grace_ms.parse()?))
        .job(
            Job::with_context("replica-job", cron, move |ctx| async move {
                println!("started {}", ctx.tick());
                tokio::time::sleep(job_time).await;
                println!("finished {}", ctx.tick());
            })
            .lock(key.as_str()),
        )
        .build()?;
    let report = scheduler.run_until_signal().await?;
    println!("stopped finished={} cancelled={}", report.finished.len(), report.cancelled.len());
    Ok(())
}
