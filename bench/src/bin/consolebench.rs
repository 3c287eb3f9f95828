//! `consolebench`: what the admin console's views cost Redis (issues 42 and 50), with and
//! without a large number of unrelated keys, view by view uncached, and for many viewers.
//!
//! ```text
//! cargo run --release -p lockbench --bin consolebench -- \
//!     [--other-keys 500000] [--big-strings 100] [--big-zset 1000000] [--jobs 100] [--runs 1000] \
//!     [--viewers 1,60] [--seconds 10] [--refresh-ms 5000]
//! ```
//!
//! A private redis-server gets `--jobs` job histories of `--runs` entries each (one run in ten
//! failed) and 5 held locks (recorded in their client's holdings record). First every view is
//! loaded once on a console that never reuses its snapshot (uncached): per view, Redis
//! commands (`INFO commandstats`, the benchmark's own `INFO`/`CONFIG` excluded), Redis CPU
//! (`used_cpu_user + used_cpu_sys`), bytes Redis sent (`total_net_output_bytes`, less what the
//! benchmark's own `INFO` replies take), and whether all 5 locks and all jobs were listed. Then,
//! for each viewer count, every viewer loads `/` every `--refresh-ms` for `--seconds` on a
//! console with the default budget (snapshot every 2 s). Then `--other-keys` unrelated keys
//! (of which `--big-strings` strings of 4 MB and one sorted set of `--big-zset` members) are
//! added and everything runs again. A benchmark, not a test: figures depend on the machine.

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
    /// Of those, strings of 4 MB.
    #[arg(long, default_value_t = 100)]
    big_strings: u64,
    /// Members of the one large sorted set among them.
    #[arg(long, default_value_t = 1_000_000)]
    big_zset: u64,
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
    let mut guards = Vec::new();
    for i in 0..5 {
        guards.push(holder.acquire(&format!("lock:bench-{i}"), LockOptions::new()).await?);
    }
    anyhow::ensure!(holder.record_holdings().await, "the holdings record was not written");
    let client = LockClient::builder().url(&url).instance_id("console").build()?;
    let console = lock_console::Console::new(client.clone()).lock_pattern("lock:*");
    let addr = serve(console).await?;
    // Never reuses a snapshot: every view reads Redis.
    let uncached = lock_console::Console::new(client).lock_pattern("lock:*").snapshot_budget(
        Duration::ZERO,
        Duration::from_secs(2),
        100_000,
    )?;
    let uncached = serve(uncached).await?;
    println!("consolebench: {} jobs x {} runs; 5 held locks; console on {addr}", args.jobs, args.runs);
    for other in [0, args.other_keys] {
        if other > 0 {
            let started = Instant::now();
            fill_others(&mut conn, other, args.big_strings, args.big_zset).await?;
            println!(
                "added {other} unrelated keys ({} of 4 MB, a sorted set of {} members) in {:.1} s",
                args.big_strings,
                args.big_zset,
                started.elapsed().as_secs_f64()
            );
        }
        println!(
            "other keys  view (uncached)                         status  commands  redis CPU ms  KiB out  all listed"
        );
        for path in VIEWS {
            view_once(&mut conn, uncached, other, path, args.jobs).await?;
        }
        println!("other keys  viewers  views  not-200  commands/view  redis CPU ms/view  breakdown/view");
        for &viewers in &args.viewers {
            measure(&mut conn, addr, other, viewers, &args).await?;
        }
    }
    drop(guards);
    Ok(())
}

/// Every view, the heaviest of each kind.
const VIEWS: [&str; 10] = [
    "/",
    "/locks",
    "/locks/lock:bench-0",
    "/jobs",
    "/jobs/job-0",
    "/replicas",
    "/api/locks?pattern=*&limit=1000",
    "/api/jobs",
    "/api/jobs/job-0/history?n=1000",
    "/api/jobs/job-0/stats",
];

async fn serve(console: lock_console::Console) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(lock_console::serve(
        listener,
        console.router(),
        lock_console::ServeOptions::default(),
        std::future::pending(),
    ));
    Ok(addr)
}

/// Bytes Redis has sent to clients (`INFO stats`).
async fn net_out(conn: &mut MultiplexedConnection) -> Result<u64> {
    let info: String = redis::cmd("INFO").arg("stats").query_async(conn).await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("total_net_output_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0))
}

/// One load of `path` on the uncached console: its cost, and whether it lists all 5 locks
/// (lock views) and all `jobs` jobs (job lists).
async fn view_once(
    conn: &mut MultiplexedConnection,
    addr: SocketAddr,
    other: u64,
    path: &str,
    jobs: u64,
) -> Result<()> {
    // What the measuring itself sends (the INFO replies), measured with nothing between.
    let (b0, s0) = (net_out(conn).await?, CmdStats::read(conn).await?);
    let (b1, _) = (net_out(conn).await?, CmdStats::read(conn).await?);
    let own = b1.saturating_sub(b0);
    let (before_bytes, before) = (net_out(conn).await?, CmdStats::read(conn).await?);
    let _ = s0;
    let (status, body) = get_body(addr, path).await;
    let (after_bytes, after) = (net_out(conn).await?, CmdStats::read(conn).await?);
    let delta = after.since(&before);
    let bytes = after_bytes.saturating_sub(before_bytes).saturating_sub(own);
    let listed = if path.contains("locks") && !path.contains("bench-0") || path == "/" {
        let n = (0..5).filter(|i| body.contains(&format!("lock:bench-{i}"))).count();
        if path == "/" {
            format!("{} locks counted", body.contains("<b id=\"locks-held\">5</b>") as u8 * 5)
        } else {
            format!("{n}/5 locks")
        }
    } else if path == "/jobs" || path == "/api/jobs" {
        let n = (0..jobs)
            .filter(|j| body.contains(&format!("job-{j}<")) || body.contains(&format!("\"job-{j}\"")))
            .count();
        format!("{n}/{jobs} jobs")
    } else {
        String::new()
    };
    println!(
        "{other:>10}  {path:<38}  {status:>6}  {:>8}  {:>12.2}  {:>7.1}  {listed}",
        delta.calls,
        delta.server_cpu_us as f64 / 1000.0,
        bytes as f64 / 1024.0
    );
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

/// `n` unrelated keys, in batches: `big` strings of 4 MB, one sorted set of `zset` members,
/// the rest small strings.
async fn fill_others(conn: &mut MultiplexedConnection, n: u64, big: u64, zset: u64) -> Result<()> {
    const BIG_STRING: &str = include_str!("../lua/consolebench_big_string.lua");
    const ZSET: &str = include_str!("../lua/consolebench_zset.lua");
    for i in 0..big {
        let _: () = redis::cmd("EVAL")
            .arg(BIG_STRING)
            .arg(1)
            .arg(format!("other:big:{i}"))
            .query_async(conn)
            .await
            .context("adding a 4 MB string")?;
    }
    let mut from = 0;
    while from < zset {
        let to = (from + 50_000).min(zset);
        let _: () = redis::cmd("EVAL")
            .arg(ZSET)
            .arg(1)
            .arg("other:zset")
            .arg(from)
            .arg(to)
            .query_async(conn)
            .await
            .context("adding to the large sorted set")?;
        from = to;
    }
    let n = n.saturating_sub(big + u64::from(zset > 0));
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

/// `GET path` on a new connection: the status (0 if none came) and the body.
async fn get_body(addr: SocketAddr, path: &str) -> (u16, String) {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let head = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        stream.write_all(head.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let status = text.split(' ').nth(1)?.parse().ok()?;
        Some((status, text))
    };
    tokio::time::timeout(Duration::from_secs(30), exchange).await.ok().flatten().unwrap_or((0, String::new()))
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
