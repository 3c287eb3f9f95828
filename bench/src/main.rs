//! `lockbench`: measures lock-core against the raw Redis floor, in one run.
//!
//! ```text
//! cargo run --release -p lockbench -- [--quick] [--explain] [--only s1,s2,s3,s4,s5,s6,peers] [--json FILE]
//! cargo run --release -p lockbench -- --cluster [--quick]   # S1 on a 3-master cluster
//! ```
//!
//! Uses the Redis at `REDIS_URL` if set, else starts a private `redis-server` from `PATH` on a
//! free loopback port (no persistence) and stops it on exit. Scenarios (see BENCHMARKS.md):
//!
//! - **S1 uncontended**: 1 and 32 tasks, each on its own key, acquire -> release for a few
//!   seconds, next to the raw baseline (`SET key token NX PX` + EVALSHA compare-and-delete on
//!   one multiplexed connection) measured in the same run.
//! - **S2 contended**: 8 tasks on one key, acquire (wait <= 10 s) -> hold 1 ms -> release:
//!   hand-off gap, fairness, Redis commands per acquisition, mutual-exclusion violations, next
//!   to a raw client that spins on `SET NX`.
//! - **S3 scale**: 10,000 watchdog locks held for 3 lease periods: renewal traffic against the
//!   ideal, RSS per held lock, renewal lag, lost locks.
//! - **S4 overhead**: annotated fn vs `with_lock` vs the guard calls vs raw, one task.
//! - **S5 impatient waiters**: S2's contended key with request handlers that give up waiting
//!   after 0-3 ms (1, 4 and 64 on one client, 16 over 4 clients: the mix of
//!   `tests/tests/impatient.rs`), as a ratio to the same round without them, with the CPU
//!   Redis and this process took.
//! - **S6 semaphores**: an uncontended permit cycle against a raw script semaphore, and the
//!   contended hand-off gap of a 1-permit semaphore against a lock's, 8 clients.
//!
//! Every ratio compares rounds run back to back in the same run (median over rounds), since
//! wall time on a small shared machine drifts by more than the differences measured.
//!
//! Results are printed as Markdown tables, a targets table, and JSON lines (one
//! object per row, each starting with `{"scenario":`); `--json FILE` also writes the JSON
//! lines to FILE. `--quick` shortens S1, S2 and S4 (S3 always holds for 3 lease periods).
//! `--explain` adds S1 rows in which the raw client sends lock-core's own scripts, splitting
//! lock-core's cost into its server-side and client-side parts.
//!
//! For instruction counts (stable, unlike wall time) run one API variant for a fixed number of
//! cycles under callgrind, twice with different counts, and divide the difference:
//!
//! ```text
//! valgrind --tool=callgrind target/release/lockbench --callgrind guard --iters 1000
//! valgrind --tool=callgrind target/release/lockbench --callgrind guard --iters 3000
//! ```
//!
//! Variants: `raw`, `guard`, `scoped`, `annotated`, and the `--explain` ones: `raw+lc-acquire`,
//! `raw+lc-release`, `raw+lc-scripts`. With `--tasks T` (T > 1) the variant
//! runs in T tasks on the multi-thread runtime, as in S1's C = 32, for a sampling profiler:
//! `perf record -g target/release/lockbench --callgrind guard --iters 20000 --tasks 32`.

mod conn;
mod cycles;
mod peers;
mod raw;
mod report;
mod s1;
mod s2;
mod s3;
mod s4;
mod s5;
mod s6;
mod server;

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::builder::{PossibleValuesParser, RangedU64ValueParser, TypedValueParser as _};
use clap::error::ErrorKind;
use clap::{CommandFactory as _, Parser};
use lock_core::redis::{self, aio::MultiplexedConnection};
use lock_core::{LockClient, LockClientBuilder};

use crate::cycles::{Conns, Variant};
use crate::report::Report;
use crate::server::CmdStats;

/// Measures lock-core against the raw Redis floor, in one run (scenarios: BENCHMARKS.md).
#[derive(Debug, Parser)]
#[command(
    name = "lockbench",
    override_usage = "lockbench [--quick] [--explain] [--only s1,s2,s3,s4,s5,s6,peers] [--json FILE] [--locks N] [--lease-ms MS]
       lockbench --cluster [--quick] [--explain] [--json FILE]
       lockbench --callgrind VARIANT --iters N [--tasks T]",
    after_help = "Uses REDIS_URL if set, else starts a private redis-server from PATH."
)]
struct Cli {
    /// shorter S1, S2 and S4 rounds (S3 always holds for 3 lease periods)
    #[arg(long)]
    quick: bool,
    /// add S1 rows that split lock-core's cost into server-side and client-side parts
    #[arg(long)]
    explain: bool,
    /// the scenarios to run, comma-separated (default: all)
    #[arg(
        long,
        value_name = "SCENARIOS",
        value_delimiter = ',',
        ignore_case = true,
        value_parser = PossibleValuesParser::new(SCENARIOS)
    )]
    only: Vec<String>,
    /// also write the JSON lines to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// S3: watchdog locks held at once
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    locks: usize,
    /// S3: the locks' lease, ms
    #[arg(long, value_name = "MS", default_value_t = 3_000, value_parser = clap::value_parser!(u64).range(300..=600_000))]
    lease_ms: u64,
    /// S1 only, against a 3-master cluster (with replicas) the fixture starts, or the cluster
    /// REDIS_URL=redis+cluster://h1:p1,h2:p2 names; raw baseline through a redis-rs cluster
    /// connection
    #[arg(long, conflicts_with = "callgrind")]
    cluster: bool,
    /// run one API variant for --iters cycles (for callgrind or perf) instead of the scenarios
    #[arg(
        long,
        value_name = "VARIANT",
        value_parser = PossibleValuesParser::new(Variant::ALL.map(Variant::name))
            .try_map(|name| Variant::parse(&name).ok_or("unknown variant"))
    )]
    callgrind: Option<Variant>,
    /// --callgrind: cycles to run
    #[arg(long, value_name = "N", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    iters: u64,
    /// --callgrind: tasks on the multi-thread runtime (more than 1: as in S1's C = 32, for a
    /// sampling profiler)
    #[arg(long, value_name = "T", default_value_t = 1, value_parser = RangedU64ValueParser::<usize>::new().range(1..=10_000))]
    tasks: usize,
}

/// The scenarios `--only` names.
const SCENARIOS: [&str; 7] = ["s1", "s2", "s3", "s4", "s5", "s6", "peers"];
/// What runs without `--only`: the peers table (rslock, redis-lock) only when asked for.
const DEFAULT_SCENARIOS: [&str; 6] = ["s1", "s2", "s3", "s4", "s5", "s6"];

#[derive(Debug)]
struct Args {
    quick: bool,
    explain: bool,
    only: Vec<String>,
    json: Option<PathBuf>,
    locks: usize,
    lease: Duration,
    callgrind: Option<Variant>,
    iters: u64,
    /// `--callgrind` with more than one task: on the multi-thread runtime, for `perf record`.
    tasks: usize,
    cluster: bool,
}

/// Parses the command line; on bad usage (and for `--help`) prints clap's message and exits
/// (2 for bad usage).
fn parse_args() -> Args {
    let cli = Cli::parse();
    let mut only: Vec<String> = cli.only.iter().map(|s| s.to_lowercase()).collect();
    if cli.cluster {
        if only.iter().any(|s| s != "s1") {
            Cli::command().error(ErrorKind::ArgumentConflict, "--cluster runs S1 (uncontended) only").exit()
        }
        only = vec!["s1".into()];
    }
    if only.is_empty() {
        only = DEFAULT_SCENARIOS.map(String::from).to_vec();
    }
    Args {
        quick: cli.quick,
        explain: cli.explain,
        only,
        json: cli.json,
        locks: cli.locks,
        lease: Duration::from_millis(cli.lease_ms),
        callgrind: cli.callgrind,
        iters: cli.iters,
        tasks: cli.tasks,
        cluster: cli.cluster,
    }
}

/// What every scenario needs: the server, a key prefix unique to this run, admin access.
pub(crate) struct Bench {
    url: String,
    prefix: String,
    redis: conn::Server,
    /// The node, or every master of a cluster (their counters are added up).
    admin: Vec<MultiplexedConnection>,
    quick: bool,
    /// Add S1 rows that split lock-core's cost into server-side and client-side parts.
    explain: bool,
}

impl Bench {
    async fn new(url: String, quick: bool, explain: bool) -> Result<Self> {
        let redis = conn::Server::open(&url)?;
        let admin = conn::admin_connections(&redis, &url).await?;
        let prefix = format!("lockbench:{}", std::process::id());
        Ok(Bench { url, prefix, redis, admin, quick, explain })
    }

    /// `lockbench:<pid>:<suffix>`.
    pub(crate) fn key(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.prefix)
    }

    /// A new raw connection (multiplexed, or a cluster connection).
    pub(crate) async fn conn(&self) -> Result<conn::RawConn> {
        self.redis.connect().await
    }

    pub(crate) fn client_builder(&self, instance: &str) -> LockClientBuilder {
        LockClient::builder().url(self.url.as_str()).instance_id(instance)
    }

    /// A lock client with the defaults.
    pub(crate) fn client(&self, instance: &str) -> Result<LockClient> {
        self.client_builder(instance).build().context("building a lock client")
    }

    /// Runs `f` with a `Bench` of its own on a current-thread runtime on another OS thread.
    ///
    /// One-task rows run there: on the 2-worker runtime a single task's round trip depends on
    /// whether it and the connection's driver task share a worker (about 25 µs) or not (about
    /// 50 µs), which made C = 1 rounds bimodal and their ratios noise.
    pub(crate) async fn on_local_runtime<F, Fut, T>(&self, f: F) -> Result<T>
    where
        F: FnOnce(Bench) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T>>,
        T: Send + 'static,
    {
        let (url, quick, explain) = (self.url.clone(), self.quick, self.explain);
        tokio::task::spawn_blocking(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("building a current-thread runtime")?
                .block_on(async move { f(Bench::new(url, quick, explain).await?).await })
        })
        .await
        .context("the current-thread runtime's thread panicked")?
    }

    /// The server's command counters now.
    pub(crate) async fn stats(&self) -> Result<CmdStats> {
        let mut all = Vec::with_capacity(self.admin.len());
        for conn in &self.admin {
            all.push(CmdStats::read(&mut conn.clone()).await?);
        }
        Ok(CmdStats::sum(all))
    }

    async fn server_info(&self) -> Result<String> {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut self.admin.first().context("no Redis master found")?.clone())
            .await
            .context("INFO server")?;
        let field = |name: &str| {
            info.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_owned()).unwrap_or_default()
        };
        Ok(format!("redis {} ({})", field("redis_version:"), field("multiplexing_api:")))
    }
}

fn main() -> Result<()> {
    let args = parse_args();
    // REDIS_URL, else a private redis-server from PATH (no container fallback: the bench
    // measures a local server). Stopped when `redis` is dropped.
    let env_url = std::env::var("REDIS_URL").ok().filter(|u| !u.trim().is_empty());
    let (redis, cluster, url, private) = if args.cluster {
        match env_url {
            Some(url) if url.starts_with("redis+cluster://") => (None, None, url, false),
            Some(_) => bail!("--cluster needs REDIS_URL unset or a redis+cluster:// URL"),
            None => {
                let cluster = redis_fixture::RedisCluster::try_start().context("starting a cluster")?;
                let hosts: Vec<String> = cluster
                    .urls()
                    .iter()
                    .map(|u| u.trim_start_matches("redis://").trim_end_matches('/').to_owned())
                    .collect();
                let url = format!("redis+cluster://{}", hosts.join(","));
                (None, Some(cluster), url, true)
            }
        }
    } else {
        let redis = redis_fixture::Redis::start_quiet()?;
        let url = redis.url().to_owned();
        let private = redis.source() != &redis_fixture::RedisSource::Env;
        (Some(redis), None, url, private)
    };
    let result = if let Some(variant) = args.callgrind {
        // One task on one thread, so instruction counts do not depend on scheduling; several
        // tasks on the worker threads, as S1's C = 32.
        let mut runtime = if args.tasks == 1 {
            tokio::runtime::Builder::new_current_thread()
        } else {
            tokio::runtime::Builder::new_multi_thread()
        };
        runtime
            .enable_all()
            .build()
            .context("building the tokio runtime")?
            .block_on(callgrind(url, variant, args.iters, args.tasks))
    } else {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("building the tokio runtime")?;
        let result = runtime.block_on(async {
            tokio::select! {
                result = bench(url, &args, private) => result,
                signal = interrupted() => signal,
            }
        });
        // Do not wait for a one-task phase still running on its own thread after a signal.
        runtime.shutdown_timeout(Duration::from_millis(500));
        result
    };
    drop(redis);
    drop(cluster);
    result
}

/// Resolves with an error on Ctrl-C or SIGTERM, so that `main` still stops the private server.
async fn interrupted() -> Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => bail!("interrupted"),
        _ = term.recv() => bail!("terminated"),
    }
}

/// Runs `iters` cycles of one variant in each of `tasks` tasks, for `valgrind
/// --tool=callgrind` (one task) or `perf record` (several).
async fn callgrind(url: String, variant: Variant, iters: u64, tasks: usize) -> Result<()> {
    let b = Bench::new(url, true, false).await?;
    let conns = Conns { client: b.client("lockbench-cg")?, conn: b.conn().await? };
    // Sizes of the futures the API returns: each call builds one and moves it into the caller's
    // state machine (a memcpy of this many bytes).
    let client = &conns.client;
    let key = "lockbench:size";
    let (mut c1, mut c2) = (conns.conn.clone(), conns.conn.clone());
    let guard =
        client.try_lock(key, lock_core::LockOptions::new()).await.context("taking the sizing lock")?;
    let release = guard.release();
    let release_size = std::mem::size_of_val(&release);
    release.await.context("releasing the sizing lock")?;
    println!(
        "future sizes (bytes): try_lock {}, release {}, with_lock {}, annotated fn {}, raw SET {}, raw release {}",
        std::mem::size_of_val(&client.try_lock(key, lock_core::LockOptions::new())),
        release_size,
        std::mem::size_of_val(&client.with_lock(key, lock_core::LockOptions::new(), async {})),
        std::mem::size_of_val(&cycles::annotated(client, key, 1)),
        std::mem::size_of_val(&raw::acquire(&mut c1, key, "t", 1)),
        std::mem::size_of_val(&raw::release(&mut c2, key, "t")),
    );
    let mut handles = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let key = b.key(&format!("cg:{}:{i}", variant.name()));
        handles.push(tokio::spawn(cycles::task(conns.clone(), variant, key, None, iters)));
    }
    let mut cycles = 0;
    for handle in handles {
        cycles += handle.await.context("cycle task panicked")??.cycles;
    }
    println!("{cycles} cycles of {} in {tasks} task(s)", variant.name());
    Ok(())
}

async fn bench(url: String, args: &Args, private: bool) -> Result<()> {
    let b = Bench::new(url, args.quick, args.explain).await?;
    let started = Instant::now();
    let mut report = Report::default();
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let env = format!(
        "{}, {}, {cores} cores, mode {}",
        b.server_info().await?,
        match (private, b.admin.len() > 1) {
            (true, true) => "private 3-master cluster (1 replica each) on loopback",
            (true, false) => "private redis-server on loopback",
            (false, true) => "REDIS_URL cluster",
            (false, false) => "REDIS_URL",
        },
        if args.quick { "--quick" } else { "default" }
    );
    eprintln!("lockbench: {env}");
    let wants = |s: &str| args.only.iter().any(|o| o == s);
    // S3 first: its RSS growth per lock would be hidden by heap that earlier scenarios freed.
    if wants("s3") {
        eprintln!("S3 scale");
        s3::run(&b, &mut report, args.locks, args.lease).await?;
    }
    if wants("s1") {
        eprintln!("S1 uncontended");
        s1::run(&b, &mut report).await?;
    }
    if wants("s2") {
        eprintln!("S2 contended");
        s2::run(&b, &mut report).await?;
    }
    if wants("s4") {
        eprintln!("S4 overhead");
        s4::run(&b, &mut report).await?;
    }
    if wants("s5") {
        eprintln!("S5 impatient waiters");
        s5::run(&b, &mut report).await?;
    }
    if wants("s6") {
        eprintln!("S6 semaphores");
        s6::run(&b, &mut report).await?;
    }
    if wants("peers") {
        eprintln!("Peers: rslock, redis-lock");
        peers::run(&b, &mut report).await?;
    }

    report.sort();
    println!("## lockbench results\n\n{env}; total {:.0} s\n", started.elapsed().as_secs_f64());
    for table in &report.tables {
        println!("{}", table.render());
    }
    println!("{}", report.targets_table().render());
    let mut lines: Vec<String> = report.json.iter().map(|j| j.line()).collect();
    lines.extend(report.target_json().iter().map(|j| j.line()));
    println!("JSON lines:\n");
    for line in &lines {
        println!("{line}");
    }
    if let Some(path) = &args.json {
        std::fs::write(path, lines.join("\n") + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
