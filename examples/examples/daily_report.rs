//! A daily report that several replicas schedule and exactly one generates per tick.
//!
//! ```sh
//! cargo run --example daily_report                      # 3 replica processes, 5 ticks, one Redis
//! cargo run --example daily_report -- --replicas 4 --cron "*/3 * * * * *" --ticks 3
//! cargo run --example daily_report -- --instance pod-1  # one replica, the way a deployment runs it
//! ```
//!
//! Every replica runs the same scheduler with the same job. Each tick, the replica that claims
//! it prints `[pod-N] Starting daily report generation`, and every other replica prints
//! `[pod-M] Another instance is generating the report, skipping`. Without `--instance`, this
//! program starts the replicas as child processes of itself against one Redis (`REDIS_URL`, or
//! a private `redis-server`), relays their output and ends with a per-tick summary; it exits
//! with an error if any tick ran other than exactly once.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use lock_core::{LockClient, distributed_lock};
use redis_fixture::Redis;
use scheduler::chrono::Utc;
use scheduler::{Job, Schedule, Scheduler};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Notify;

const STARTING: &str = "Starting daily report generation";
const SKIPPING: &str = "Another instance is generating the report, skipping";
/// The production schedule: 02:00 every day.
const DEPLOYMENT_CRON: &str = "0 0 2 * * *";
/// The demo schedule: every two seconds.
const DEMO_CRON: &str = "*/2 * * * * *";
/// How long generating the report takes in this demo.
const REPORT_WORK: Duration = Duration::from_millis(300);

const USAGE: &str = "\
usage: daily_report [--replicas N] [--cron EXPR] [--ticks N] [--time-zone TZ]
       daily_report --instance NAME [--cron EXPR] [--ticks N] [--time-zone TZ]

  --replicas N     replica processes to start (default 3)
  --cron EXPR      6-field cron with seconds (demo default \"*/2 * * * * *\";
                   with --instance the default is \"0 0 2 * * *\", 02:00 daily)
  --ticks N        stop after N ticks (demo default 5; with --instance: run until SIGTERM)
  --time-zone TZ   IANA time zone of the cron expression (default UTC)
  --instance NAME  run one replica named NAME, as a deployment would

Redis: REDIS_URL if set, else a private redis-server from PATH.";

#[derive(Debug, Default)]
struct Args {
    replicas: Option<usize>,
    cron: Option<String>,
    ticks: Option<u32>,
    time_zone: Option<String>,
    instance: Option<String>,
    /// Internal: the first tick (epoch ms) the demo's replicas count, so they all count the
    /// same ticks.
    from: Option<i64>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args::default();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let mut value = || it.next().with_context(|| format!("{flag} needs a value\n\n{USAGE}"));
        match flag.as_str() {
            "--replicas" => args.replicas = Some(value()?.parse().context("--replicas takes a number")?),
            "--cron" => args.cron = Some(value()?),
            "--ticks" => args.ticks = Some(value()?.parse().context("--ticks takes a number")?),
            "--time-zone" => args.time_zone = Some(value()?),
            "--instance" => args.instance = Some(value()?),
            "--from" => args.from = Some(value()?.parse().context("--from takes epoch milliseconds")?),
            other => bail!("unknown argument {other:?}\n\n{USAGE}"),
        }
    }
    if args.replicas == Some(0) || args.ticks == Some(0) {
        bail!("--replicas and --ticks must be at least 1");
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let args = parse_args()?;
    match args.instance.clone() {
        Some(instance) => replica(instance, args).await,
        None => demo(args).await,
    }
}

/// The report job. Every replica calls it each tick; the lock lets one through.
#[distributed_lock(key = "lock:daily-report", skip_if_held)]
async fn generate_daily_report(pod: &str, tick: &str) -> anyhow::Result<Option<()>> {
    println!("[{pod}] {STARTING} (tick {tick})");
    tokio::time::sleep(REPORT_WORK).await;
    Ok(Some(()))
}

/// One replica: a scheduler with the daily-report job, until `--ticks` ticks or SIGTERM.
async fn replica(instance: String, args: Args) -> anyhow::Result<()> {
    // A replica started by the demo gets REDIS_URL; one started by hand may start its own.
    let redis = if std::env::var_os("REDIS_URL").is_some() { Redis::start_quiet()? } else { Redis::start()? };
    let client = LockClient::builder().url(redis.url()).instance_id(instance.as_str()).build()?;
    // The annotated fn has no `client = ...`: it uses the installed default.
    client.install_default();

    let cron = args.cron.unwrap_or_else(|| DEPLOYMENT_CRON.to_owned());
    let counted = Arc::new(AtomicU32::new(0));
    let done = Arc::new(Notify::new());
    let ticks = args.ticks;
    let mut job = Job::with_context("daily-report", cron.as_str(), {
        let (counted, done) = (counted.clone(), done.clone());
        move |ctx| {
            let (counted, done) = (counted.clone(), done.clone());
            async move {
                let tick = ctx.local_slot().format("%H:%M:%S").to_string();
                let pod = ctx.instance().to_owned();
                let outcome = generate_daily_report(&pod, &tick).await;
                if let Ok(None) = outcome {
                    println!("[{pod}] {SKIPPING} (tick {tick})");
                }
                if ticks.is_some_and(|n| counted.fetch_add(1, Ordering::SeqCst) + 1 >= n) {
                    done.notify_one();
                }
                outcome.map(drop)
            }
        }
    });
    if let Some(tz) = &args.time_zone {
        job = job.time_zone(tz.as_str());
    }
    let scheduler = Scheduler::builder().client(client).job(job).build()?;
    if let Some(from) = args.from.and_then(scheduler::chrono::DateTime::from_timestamp_millis) {
        // Started by the demo: begin just before the agreed first tick, so that every replica
        // counts the same ticks (a scheduler never runs slots from before its start).
        let until_start =
            (from - Utc::now()).to_std().unwrap_or_default().saturating_sub(Duration::from_millis(300));
        tokio::time::sleep(until_start).await;
    }
    if args.from.is_none() {
        let next = scheduler.schedule("daily-report").and_then(|s| s.next_after(Utc::now()));
        println!("[{instance}] scheduling the daily report on \"{cron}\"; next run at {next:?}");
    }
    let report = match ticks {
        Some(_) => scheduler.run_until(done.notified()).await?,
        None => scheduler.run_until_signal().await?,
    };
    if args.from.is_none() {
        println!("[{instance}] stopped ({} running job(s) finished)", report.finished.len());
    }
    Ok(())
}

/// The demo: N replica processes of this program against one Redis, then a summary.
async fn demo(args: Args) -> anyhow::Result<()> {
    let replicas = args.replicas.unwrap_or(3);
    let ticks = args.ticks.unwrap_or(5);
    let cron = args.cron.clone().unwrap_or_else(|| DEMO_CRON.to_owned());
    let schedule = Schedule::new(&cron, args.time_zone.as_deref())?;
    let redis = Redis::start()?;

    // Count ticks from the first slot at least 1.5 s away, so that every replica is up.
    let start = Utc::now() + Duration::from_millis(1500);
    let first = schedule.next_after(start).context("the cron expression never fires")?;
    let last = schedule.upcoming(start, ticks as usize).last().cloned().context("no upcoming slots")?;
    let from = first.timestamp_millis();
    println!(
        "Starting {replicas} replicas of the daily report on \"{cron}\" for {ticks} ticks ({} .. {})",
        first.format("%H:%M:%S"),
        last.format("%H:%M:%S")
    );

    let exe = std::env::current_exe().context("locating this program")?;
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut children = Vec::new();
    for i in 1..=replicas {
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.args(["--instance", &format!("pod-{i}"), "--cron", &cron, "--ticks", &ticks.to_string()])
            .args(["--from", &from.to_string()])
            .env("REDIS_URL", redis.url())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        if let Some(tz) = &args.time_zone {
            cmd.args(["--time-zone", tz]);
        }
        let mut child = cmd.spawn().context("starting a replica")?;
        let stdout = child.stdout.take().context("replica stdout")?;
        let tx = lines_tx.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        children.push(child);
    }
    drop(lines_tx);

    // Relay every line and remember who did what on which tick.
    let mut per_tick: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
    let deadline =
        (last.with_timezone(&Utc) - Utc::now()).to_std().unwrap_or_default() + Duration::from_secs(30);
    let relay = async {
        while let Some(line) = lines.recv().await {
            println!("{line}");
            if let Some((pod, tick, ran)) = parse_line(&line) {
                let entry = per_tick.entry(tick).or_default();
                if ran { entry.0.push(pod) } else { entry.1.push(pod) }
            }
        }
    };
    tokio::time::timeout(deadline, relay).await.context("the replicas did not finish in time")?;
    for mut child in children {
        let status = child.wait().await?;
        if !status.success() {
            bail!("a replica exited with {status}");
        }
    }

    println!("\nSummary ({replicas} replicas, {ticks} ticks):");
    let mut ok = per_tick.len() == ticks as usize;
    for (tick, (ran, skipped)) in &per_tick {
        let good = ran.len() == 1 && skipped.len() == replicas - 1;
        ok &= good;
        println!(
            "  tick {tick}: generated by {:<7} skipped by {:<20} {}",
            ran.join(", "),
            skipped.join(", "),
            if good { "ok" } else { "WRONG" }
        );
    }
    if !ok {
        bail!("expected exactly one report per tick over {ticks} ticks");
    }
    println!("Each of the {ticks} ticks generated exactly one report.");
    Ok(())
}

/// `[pod-2] Starting daily report generation (tick 10:00:04)` -> ("pod-2", "10:00:04", true).
fn parse_line(line: &str) -> Option<(String, String, bool)> {
    let rest = line.strip_prefix('[')?;
    let (pod, rest) = rest.split_once("] ")?;
    let ran = rest.starts_with(STARTING);
    if !ran && !rest.starts_with(SKIPPING) {
        return None;
    }
    let tick = rest.rsplit_once("(tick ")?.1.strip_suffix(')')?;
    Some((pod.to_owned(), tick.to_owned(), ran))
}
