//! One scheduler replica whose jobs are declared with `#[scheduled]` and found at start-up:
//! `declared-cron` (cron, every second) and `declared-every` (every 2 s, offset 1 s), each
//! printing `ran <job> <tick> <instance> <prefix>` where the prefix comes from the scheduler's
//! state. Used by tests/tests/scheduled.rs with several replica processes.
//!
//! Usage: `declared_replica <redis-url> <instance>`. The environment's `SCHEDULE_<JOB>`
//! variables override the jobs' schedules. Stops gracefully on SIGTERM / Ctrl-C.

use std::time::Duration;

use lock_core::LockClient;
use lock_scheduler::{RunContext, Scheduler, State, scheduled};

/// State given to the scheduler, taken by both jobs.
#[derive(Clone)]
struct Prefix(String);

#[scheduled(cron = "* * * * * *", name = "declared-cron", group = "declared")]
async fn every_second(State(prefix): State<Prefix>, run: RunContext) {
    println!("ran {} {} {} {}", run.job(), run.tick(), run.instance(), prefix.0);
}

#[scheduled(every = "2s", offset = "1s", name = "declared-every", group = "declared")]
async fn every_two_seconds(run: RunContext, State(prefix): State<Prefix>) {
    println!("ran {} {} {} {}", run.job(), run.tick(), run.instance(), prefix.0);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, instance] = args.as_slice() else {
        anyhow::bail!("usage: declared_replica <redis-url> <instance>");
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(false).with_writer(std::io::stderr).init();
    let client = LockClient::builder()
        .url(url.as_str())
        .instance_id(instance.as_str())
        .liveness_ttl(Duration::from_secs(1))
        .command_timeout(Duration::from_millis(250))
        .build()?;
    let scheduler = Scheduler::builder()
        .client(client)
        .group("declared")
        .state(Prefix("from-state".into()))
        .scheduled_jobs()
        .build()?;
    for job in scheduler.job_names() {
        let schedule = scheduler.schedule(job).map(ToString::to_string).unwrap_or_default();
        println!("job {job} {schedule}");
    }
    println!("ready");
    scheduler.run_until_signal().await?;
    Ok(())
}
