//! `consolebench`: what the admin console's views cost Redis (issue 42), with and without a
//! large number of unrelated keys, for one viewer and for many.
//!
//! ```text
//! cargo run --release -p lockbench --bin consolebench -- \
//!     [--other-keys 500000] [--jobs 100] [--runs 1000] [--viewers 1,60] [--seconds 10] [--refresh-ms 5000]
//! ```
//!
//! A private redis-server (or `REDIS_URL`) gets `--jobs` job histories of `--runs` entries each
//! (one run in ten failed) and one held lock; a console (defaults: snapshot every 2 s, 2 s and
//! 100,000 keys of budget) is served on loopback. For each viewer count, every viewer loads `/`
//! every `--refresh-ms` (the page's refresh) for `--seconds`, starting staggered; the run
//! reports, per view: Redis commands (`INFO commandstats`, the benchmark's own `INFO`/`CONFIG`
//! excluded), Redis CPU (`used_cpu_user + used_cpu_sys`), and how many views were not 200. Then
//! `--other-keys` unrelated keys are added and the viewer counts run again. A benchmark, not a
//! test: figures depend on the machine.

#[path = "../server.rs"]
#[allow(dead_code, reason = "shared with lockbench, which uses all of it")]
mod server;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;
use lock_core::redis::{self, aio::MultiplexedConnection};
use lock_core::{LockClient, LockOptions};
use server::CmdStats;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Parser)]
#[command(name = "consolebench", about = "What the admin console's views cost Redis")]
struct Args {
    /// Unrelated keys added for the second half of the run.
    #[arg(long, default_value_t = 500_000)]
    other_keys: u64,
    /// Jobs with a history.
    #[arg(long, default_value_t = 100)]
    jobs: u64,
    /// History entries per job.
    #[arg(long, default_value_t = 1000)]
    runs: u64,
    /// Viewer counts to measure, comma-separated.
    #[arg(long, default_value = "1,60", value_delimiter = ',')]
    viewers: Vec<u64>,
    /// How long each measurement lasts, seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// How often each viewer loads the page, milliseconds.
    #[arg(long, default_value_t = 5000)]
    refresh_ms: u64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> Result<()> {
    let redis = redis_fixture::Redis::start_quiet()?;
    let url = redis.url().to_owned();
    let mut conn = redis::Client::open(url.as_str())?.get_multiplexed_async_connection().await?;
    // Filling runs scripts of thousands of writes: longer than the default response timeout.
    conn.set_response_timeout(Duration::from_secs(120));
    fill_histories(&mut conn, args.jobs, args.runs).await?;
    let holder = LockClient::builder().url(&url).instance_id("holder").build()?;
    let _guard = holder.acquire("lock:bench", LockOptions::new()).await?;
    let client = LockClient::builder().url(&url).instance_id("console").build()?;
    let console = lock_console::Console::new(client).lock_pattern("lock:*");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(lock_console::serve(
        listener,
        console.router(),
        lock_console::ServeOptions::default(),
        std::future::pending(),
    ));
    println!("consolebench: {} jobs x {} runs; one held lock; console on {addr}", args.jobs, args.runs);
    println!("other keys  viewers  views  not-200  commands/view  redis CPU ms/view  breakdown/view");
    for other in [0, args.other_keys] {
        if other > 0 {
            fill_others(&mut conn, other).await?;
        }
        for &viewers in &args.viewers {
            measure(&mut conn, addr, other, viewers, &args).await?;
        }
    }
    Ok(())
}

/// `jobs` histories of `runs` entries, one in ten failed, with their failure counts and their
/// entries in the job index.
async fn fill_histories(conn: &mut MultiplexedConnection, jobs: u64, runs: u64) -> Result<()> {
    const SCRIPT: &str = include_str!("../lua/consolebench_history.lua");
    let hour = lock_scheduler::schema::failure_hour(lock_scheduler::chrono::Utc::now().timestamp_millis());
    for j in 0..jobs {
        let name = format!("job-{j}");
        let history = lock_scheduler::history_key(&name)?;
        let failures = lock_scheduler::schema::failures_key(&name)?;
        let _: i64 = redis::cmd("EVAL")
            .arg(SCRIPT)
            .arg(3)
            .arg(&history)
            .arg(&failures)
            // The job index, as a replica writes it with the history (so the console finds
            // the job without scanning).
            .arg(lock_scheduler::schema::job_index_key())
            .arg(runs)
            .arg(runs / 10)
            .arg(hour)
            .arg(lock_scheduler::schema::index_score(std::time::Duration::from_secs(86_400)))
            .arg(&name)
            .query_async(conn)
            .await
            .context("filling a history")?;
    }
    Ok(())
}

/// `n` unrelated string keys, in batches.
async fn fill_others(conn: &mut MultiplexedConnection, n: u64) -> Result<()> {
    const SCRIPT: &str = include_str!("../lua/consolebench_others.lua");
    let mut from = 1;
    while from <= n {
        let to = (from + 9_999).min(n);
        let _: i64 = redis::cmd("EVAL")
            .arg(SCRIPT)
            .arg(0)
            .arg(from)
            .arg(to)
            .query_async(conn)
            .await
            .context("adding unrelated keys")?;
        from = to + 1;
    }
    Ok(())
}

/// `viewers` viewers loading `/` every `refresh_ms` for `seconds`; prints the cost per view.
async fn measure(
    conn: &mut MultiplexedConnection,
    addr: SocketAddr,
    other: u64,
    viewers: u64,
    args: &Args,
) -> Result<()> {
    // A fresh start: the snapshot of the previous measurement lapses first.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let before = CmdStats::read(conn).await.context("reading INFO")?;
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let refresh = Duration::from_millis(args.refresh_ms);
    let tasks: Vec<_> = (0..viewers)
        .map(|i| {
            let stagger = refresh.mul_f64(i as f64 / viewers as f64);
            tokio::spawn(async move {
                tokio::time::sleep(stagger).await;
                let (mut views, mut bad) = (0u64, 0u64);
                while Instant::now() < until {
                    views += 1;
                    if get(addr, "/").await != 200 {
                        bad += 1;
                    }
                    tokio::time::sleep(refresh).await;
                }
                (views, bad)
            })
        })
        .collect();
    let (mut views, mut bad) = (0, 0);
    for task in tasks {
        let (v, b) = task.await?;
        views += v;
        bad += b;
    }
    let delta = CmdStats::read(conn).await?.since(&before);
    let per = views.max(1) as f64;
    println!(
        "{other:>10}  {viewers:>7}  {views:>5}  {bad:>7}  {:>13.1}  {:>17.2}  {}",
        delta.calls as f64 / per,
        delta.server_cpu_us as f64 / 1000.0 / per,
        delta.breakdown(views)
    );
    Ok(())
}

/// `GET path` on a new connection; the status (0 if none came).
async fn get(addr: SocketAddr, path: &str) -> u16 {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let head = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        stream.write_all(head.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8_lossy(&raw);
        text.split(' ').nth(1)?.parse().ok()
    };
    tokio::time::timeout(Duration::from_secs(30), exchange).await.ok().flatten().unwrap_or(0)
}
