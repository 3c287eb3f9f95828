//! `schedbench`: the scheduler at scale, with real replica processes (BENCHMARKS.md,
//! "Scheduler").
//!
//! ```text
//! cargo run --release -p lockbench --bin schedbench -- [--replicas 3] [--jobs 1000] [--secs 30]
//!     [--idle-jobs 5000] [--idle-secs 20] [--grace-ms 500] [--paths skip,retry,allow,buffer [--rounds 2]]
//! ```
//!
//! Uses the Redis at `REDIS_URL` if set, else starts a private `redis-server`. Two parts:
//!
//! - **Load**: `--replicas` processes (this binary, `--replica` mode), each with the same
//!   `--jobs` jobs on a 1 s cron (`* * * * * *`), each job under its own lock, for `--secs`
//!   seconds once every replica sees the others. Each replica logs every run it starts (job,
//!   tick, start lag = start of the job's body minus its slot); this process counts per
//!   job-tick: double runs (more than one run), missed job-ticks (none), start lag p50/p99/max,
//!   runs per replica against an even share.
//! - **Idle**: one replica with `--idle-jobs` daily jobs (none due): its process CPU time over
//!   `--idle-secs`, per job per second.
//!
//! Over the load window it also reads the server's counters (`INFO commandstats`, `INFO cpu`,
//! `INFO stats`) and reports per job-tick, all replicas together: Redis CPU, Redis commands
//! (script-internal ones included) and script calls, the server's socket reads per replica
//! per slot, and — counted by each replica (`lock_redis_requests_total`) — its requests to
//! Redis per slot: its round trips. The floor — one conditional `SET … NX PX` per job-tick
//! from a raw pipelined client, as many job-ticks as the window had — is measured in the same
//! run, after the load, and is the baseline of the ratios. The server's own idle CPU rate
//! (measured for 3 s before the replicas start) is reported too, and the Redis CPU per
//! job-tick net of it.
//!
//! Prints Markdown tables and the targets of issues 14 and 25 (met or not).
//!
//! **Paths** (`--paths`, issue 43): the load part once per code path, each with replicas of
//! its own, in `--rounds` rounds that rotate the order: `skip` (the default `Overlap::Skip`,
//! the baseline), `retry` (a `RetryPolicy` of 2 attempts, 200 ms apart, and 1% of the
//! job-ticks — chosen by a hash of job and slot, the same on every replica — fail their first
//! attempt), `allow` (`Overlap::Allow`: the slot is claimed without the job's lock) and
//! `buffer` (`Overlap::BufferOne`: a look at the buffer at each run's end). Reports Redis CPU
//! and commands per job-tick of each path as the median over rounds of its ratio to `skip`'s
//! in the same round (the floor is not measured in this mode).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use clap::builder::RangedU64ValueParser;
use lock_core::LockClient;
use lock_core::redis::{self, aio::MultiplexedConnection};
use lock_scheduler::chrono::Utc;
use lock_scheduler::{Job, Overlap, RetryPolicy, RunContext, Scheduler};

#[path = "../server.rs"]
#[allow(dead_code, reason = "shared with lockbench, which uses all of it")]
mod server;

use server::{CmdDelta, CmdStats, process_cpu_us};

/// The run line a replica prints: `run <job> <slot ms> <lag µs> <attempt>`.
const RUN: &str = "run";
/// The line a replica prints per slot it settled without running it: `not-run <tick ms>
/// <outcome>` (skipped as done elsewhere, held, still running; missed; failed).
const NOT_RUN: &str = "not-run";
/// The line a replica prints with the number of reports it could not keep up with.
const LOST: &str = "reports-lost";

/// How long the server's idle CPU rate is measured, before the replicas start.
const IDLE_REDIS: Duration = Duration::from_secs(3);

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--replica") => replica(&args[1..]),
        Some("--idle") => idle(&args[1..]),
        _ => coordinator(&args),
    }
}

// ---------------------------------------------------------------------------------------------
// the coordinator

/// The scheduler at scale, with real replica processes (BENCHMARKS.md, "Scheduler").
///
/// (Internal modes, started by this program: `schedbench --replica URL INSTANCE JOBS REPLICAS
/// GRACE_MS` and `schedbench --idle URL JOBS SECS`.)
#[derive(Debug, Parser)]
#[command(
    name = "schedbench",
    after_help = "Uses REDIS_URL if set, else starts a private redis-server from PATH."
)]
struct Args {
    /// replica processes in the load part
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = RangedU64ValueParser::<usize>::new().range(1..=64))]
    replicas: usize,
    /// jobs on a 1 s cron, each under its own lock, on every replica
    #[arg(long, value_name = "J", default_value_t = 1000, value_parser = RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    jobs: usize,
    /// seconds of load once every replica sees the others
    #[arg(long, value_name = "T", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    secs: u64,
    /// daily jobs (none due) on the idle replica; 0 skips the idle part
    #[arg(long, value_name = "K", default_value_t = 5000, value_parser = RangedU64ValueParser::<usize>::new().range(0..=1_000_000))]
    idle_jobs: usize,
    /// seconds the idle replica's CPU time is measured over
    #[arg(long, value_name = "S", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    idle_secs: u64,
    /// the replicas' scheduling grace, ms
    #[arg(long, value_name = "MS", default_value_t = 500, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    grace_ms: u64,
    /// compare these code paths, each with replicas of its own (the first is the baseline of
    /// the ratios), instead of one load part
    #[arg(long, value_name = "PATHS", value_delimiter = ',')]
    paths: Vec<Path>,
    /// --paths: rounds (the paths' order rotates from one round to the next)
    #[arg(long, value_name = "R", default_value_t = 2, value_parser = RangedU64ValueParser::<usize>::new().range(1..=100))]
    rounds: usize,
}

/// A code path of the scheduler the replicas' jobs take (`--paths`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Path {
    /// `Overlap::Skip`, no retry policy: the default path.
    Skip,
    /// A retry policy (2 attempts, 200 ms apart); 1% of the job-ticks fail their first attempt.
    Retry,
    /// `Overlap::Allow`: the slot's tick is claimed without the job's lock.
    Allow,
    /// `Overlap::BufferOne`: each run's end looks at the buffer.
    Buffer,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Skip => "skip",
            Path::Retry => "retry",
            Path::Allow => "allow",
            Path::Buffer => "buffer",
        }
    }

    fn parse(name: &str) -> Option<Path> {
        [Path::Skip, Path::Retry, Path::Allow, Path::Buffer].into_iter().find(|p| p.name() == name)
    }
}

/// Whether the `retry` path fails the first attempt at `job`'s `slot`: 1% of job-ticks, the
/// same on every replica (FNV-1a of job and slot).
fn fails_first(job: u32, slot: i64) -> bool {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in job.to_le_bytes().into_iter().chain(slot.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h.is_multiple_of(100)
}

fn coordinator(args: &[String]) -> Result<()> {
    // Bad usage (and --help): clap's message, exit code 2 (0 for --help).
    let args = Args::parse_from(std::iter::once("schedbench".to_owned()).chain(args.iter().cloned()));
    let redis = redis_fixture::Redis::start_quiet()?;
    println!("Redis: {redis}");
    let exe = std::env::current_exe().context("locating schedbench")?;

    if args.idle_jobs > 0 {
        let out = Command::new(&exe)
            .args(["--idle", redis.url(), &args.idle_jobs.to_string(), &args.idle_secs.to_string()])
            .stderr(Stdio::inherit())
            .output()
            .context("running the idle replica")?;
        let text = String::from_utf8_lossy(&out.stdout);
        let cpu_us: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("idle_cpu_us "))
            .and_then(|v| v.trim().parse().ok())
            .with_context(|| format!("the idle replica printed no CPU time: {text}"))?;
        let per_job_s = cpu_us / (args.idle_jobs as f64 * args.idle_secs as f64);
        println!("\n## Idle: {} daily jobs on one replica, {} s\n", args.idle_jobs, args.idle_secs);
        println!("| CPU time | per second | per job per second | target |");
        println!("|---|---|---|---|");
        println!(
            "| {:.1} ms | {:.3} ms | {:.4} µs | ≤ 1 µs: {} |",
            cpu_us / 1000.0,
            cpu_us / 1000.0 / args.idle_secs as f64,
            per_job_s,
            met(per_job_s <= 1.0)
        );
    }

    // The server's CPU rate with nothing to do (its own timers: a cost per second, not per
    // job-tick).
    let rt = runtime()?;
    let mut conn = rt
        .block_on(redis::Client::open(redis.url())?.get_multiplexed_async_connection())
        .context("connecting to Redis for its counters")?;
    let idle_redis = rt.block_on(async {
        let before = CmdStats::read(&mut conn).await?;
        tokio::time::sleep(IDLE_REDIS).await;
        anyhow::Ok(CmdStats::read(&mut conn).await?.since(&before))
    })?;
    let idle_redis_us_per_s = idle_redis.server_cpu_us as f64 / IDLE_REDIS.as_secs_f64();

    if args.paths.is_empty() {
        let mut children = spawn_replicas(&exe, redis.url(), &args, Path::Skip, "")?;
        let result = measure(&args, &mut children, &rt, &mut conn, idle_redis_us_per_s, Path::Skip, true);
        stop(&mut children);
        return result.map(|_| ());
    }
    compare_paths(&args, &exe, redis.url(), &rt, &mut conn, idle_redis_us_per_s)
}

/// Starts `args.replicas` replica processes whose jobs take `path`; each says `ready` once it
/// sees all the others. `tag` keeps each phase's group, instances and lock keys apart (a
/// replica of an earlier phase stays live in its group for a liveness TTL).
fn spawn_replicas(
    exe: &std::path::Path,
    url: &str,
    args: &Args,
    path: Path,
    tag: &str,
) -> Result<Vec<Replica>> {
    let mut children = Vec::new();
    for i in 0..args.replicas {
        let instance = format!("replica{tag}-{i}");
        let mut child = Command::new(exe)
            .args(["--replica", url, &instance])
            .args([args.jobs.to_string(), args.replicas.to_string(), args.grace_ms.to_string()])
            .args([path.name(), tag])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("spawning a replica")?;
        let stdin = child.stdin.take().context("replica stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("replica stdout")?);
        children.push(Replica { instance, child, stdin, stdout });
    }
    Ok(children)
}

fn stop(children: &mut [Replica]) {
    for replica in children {
        let _ = replica.child.kill();
        let _ = replica.child.wait();
    }
}

/// `--paths`: the load part once per path per round, the order rotated, and the ratios of each
/// path's Redis cost per job-tick to the first path's in the same round.
fn compare_paths(
    args: &Args,
    exe: &std::path::Path,
    url: &str,
    rt: &tokio::runtime::Runtime,
    conn: &mut MultiplexedConnection,
    idle_redis_us_per_s: f64,
) -> Result<()> {
    let paths = &args.paths;
    let mut results: Vec<Vec<Summary>> = paths.iter().map(|_| Vec::new()).collect();
    for round in 0..args.rounds {
        for k in 0..paths.len() {
            let i = (round + k) % paths.len();
            let tag = format!("-{}{round}", paths[i].name());
            let mut children = spawn_replicas(exe, url, args, paths[i], &tag)?;
            let result = measure(args, &mut children, rt, conn, idle_redis_us_per_s, paths[i], false);
            stop(&mut children);
            results[i].push(result?);
        }
    }
    let base = &results[0];
    let ratio = |of: &[Summary], f: fn(&Summary) -> f64| -> (f64, f64, f64) {
        let mut r: Vec<f64> = of.iter().zip(base).map(|(a, b)| f(a) / f(b).max(f64::MIN_POSITIVE)).collect();
        r.sort_by(f64::total_cmp);
        (median(&r), r[0], r[r.len() - 1])
    };
    let med = |of: &[Summary], f: fn(&Summary) -> f64| {
        let mut v: Vec<f64> = of.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        median(&v)
    };
    println!(
        "\n## Paths: {} replicas × {} jobs on a 1 s cron, {} s per path, {} rounds, medians [min-max] over rounds\n",
        args.replicas, args.jobs, args.secs, args.rounds
    );
    println!(
        "| path | Redis CPU per job-tick | × {base_name} | Redis commands per job-tick | × {base_name} | script calls per job-tick | start lag p50 / p99 | double runs / missed | retries run / due (not chosen / run twice) |",
        base_name = paths[0].name()
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (path, of) in paths.iter().zip(&results) {
        let (cpu, cpu_lo, cpu_hi) = ratio(of, |s| s.cpu_us);
        let (cmds, cmds_lo, cmds_hi) = ratio(of, |s| s.cmds);
        println!(
            "| {} | {:.1} µs | {cpu:.2} [{cpu_lo:.2}-{cpu_hi:.2}] | {:.2} | {cmds:.3} [{cmds_lo:.3}-{cmds_hi:.3}] | {:.2} | {:.1} / {:.1} ms | {} / {} | {} / {} ({} / {}) |",
            path.name(),
            med(of, |s| s.cpu_us),
            med(of, |s| s.cmds),
            med(of, |s| s.scripts),
            med(of, |s| s.p50_ms),
            med(of, |s| s.p99_ms),
            of.iter().map(|s| s.doubles).sum::<u64>(),
            of.iter().map(|s| s.missed).sum::<u64>(),
            of.iter().map(|s| s.retries).sum::<u64>(),
            of.iter().map(|s| s.retries_due).sum::<u64>(),
            of.iter().map(|s| s.retried_unchosen).sum::<u64>(),
            of.iter().map(|s| s.retry_doubles).sum::<u64>(),
        );
        println!(
            "{{\"scenario\":\"sched-paths\",\"path\":\"{}\",\"replicas\":{},\"jobs\":{},\"secs\":{},\"rounds\":{},\"redis_cpu_us\":{:.2},\"redis_cpu_ratio\":{cpu:.3},\"redis_cmds\":{:.3},\"redis_cmds_ratio\":{cmds:.3},\"scripts\":{:.3}}}",
            path.name(),
            args.replicas,
            args.jobs,
            args.secs,
            args.rounds,
            med(of, |s| s.cpu_us),
            med(of, |s| s.cmds),
            med(of, |s| s.scripts),
        );
    }
    println!(
        "\nPer job-tick = per (job, slot) of the window, all replicas together; a retry is part of its slot's \
         job-tick. retries run / due: job-ticks of the window with a second attempt / chosen to fail their first \
         attempt; not chosen: retried although not chosen (the first attempt failed for another reason); run twice: \
         second attempts run more than once."
    );
    Ok(())
}

fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// One load part's figures per job-tick (all replicas), for `--paths`.
struct Summary {
    cpu_us: f64,
    cmds: f64,
    scripts: f64,
    p50_ms: f64,
    p99_ms: f64,
    doubles: u64,
    missed: u64,
    /// Job-ticks of the window that had a second attempt.
    retries: u64,
    /// Job-ticks of the window whose first attempt the `retry` path fails.
    retries_due: u64,
    /// Job-ticks whose second attempt ran more than once (extra runs).
    retry_doubles: u64,
    /// Job-ticks retried that were not chosen to fail.
    retried_unchosen: u64,
}

struct Replica {
    instance: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

/// The load part with `children` (whose jobs take `path`): prints its tables and returns its
/// figures; `with_floor` also measures the floor and prints the targets.
fn measure(
    args: &Args,
    children: &mut [Replica],
    rt: &tokio::runtime::Runtime,
    conn: &mut MultiplexedConnection,
    idle_redis_us_per_s: f64,
    path: Path,
    with_floor: bool,
) -> Result<Summary> {
    for replica in children.iter_mut() {
        let mut line = String::new();
        loop {
            line.clear();
            if replica.stdout.read_line(&mut line)? == 0 {
                bail!("{} exited before it was ready", replica.instance);
            }
            if line.trim() == "ready" {
                break;
            }
        }
    }
    // The window: whole seconds, starting 2 s after every replica is ready.
    let start_ms = (Utc::now().timestamp_millis() / 1000 + 2) * 1000;
    let end_ms = start_ms + args.secs as i64 * 1000;
    println!(
        "\n## Load: {} replicas × {} jobs on a 1 s cron, {} s (claim grace {} ms), path {}\n",
        args.replicas,
        args.jobs,
        args.secs,
        args.grace_ms,
        path.name()
    );
    // The server's counters over the window (the replicas then keep running for 2.5 s, so
    // that the window's last slots are run, and looked at by every replica, before they stop).
    sleep_until_ms(start_ms);
    let before = rt.block_on(CmdStats::read(conn))?;
    tell(children, "start");
    sleep_until_ms(end_ms);
    let load = rt.block_on(CmdStats::read(conn))?.since(&before);
    tell(children, "end");
    sleep_until_ms(end_ms + 2500);
    // Stop them: each then prints its runs and exits.
    tell(children, "stop");
    let mut per_tick: HashMap<(u32, i64), u32> = HashMap::new();
    let mut lags: Vec<u64> = Vec::new();
    let mut per_replica = Vec::new();
    // CPU time and requests to Redis of all replicas over the window.
    let (mut cpu_us, mut requests) = (0u64, 0u64);
    // Slots of the window settled without a run, by outcome, all replicas together.
    let mut not_run: std::collections::BTreeMap<String, u64> = Default::default();
    // Reports a replica could not keep up with (so not in `not_run`).
    let mut lost = 0u64;
    // Attempts after the first (the `retry` path's), at slots of the window.
    let mut retried: HashMap<(u32, i64), u32> = HashMap::new();
    for replica in children.iter_mut() {
        let mut runs = 0u64;
        let mut line = String::new();
        loop {
            line.clear();
            if replica.stdout.read_line(&mut line)? == 0 {
                break;
            }
            let mut parts = line.split_whitespace();
            match parts.next() {
                Some(RUN) => {}
                Some("cpu_us") => {
                    cpu_us += parts.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                    continue;
                }
                Some(NOT_RUN) => {
                    if let (Some(tick), Some(outcome)) =
                        (parts.next().and_then(|t| t.parse::<i64>().ok()), parts.next())
                        && (start_ms..end_ms).contains(&tick)
                    {
                        *not_run.entry(outcome.to_owned()).or_default() += 1;
                    }
                    continue;
                }
                Some(LOST) => {
                    lost += parts.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                    continue;
                }
                Some("requests") => {
                    requests += parts.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                    continue;
                }
                _ => continue,
            }
            let (Some(job), Some(tick), Some(lag), Some(attempt)) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let (job, tick, lag, attempt): (u32, i64, u64, u32) =
                (job.parse()?, tick.parse()?, lag.parse()?, attempt.parse()?);
            if tick < start_ms || tick >= end_ms {
                continue;
            }
            if attempt > 1 {
                // A retry: part of its slot's job-tick, late by its backoff by design.
                *retried.entry((job, tick)).or_default() += 1;
                continue;
            }
            runs += 1;
            *per_tick.entry((job, tick)).or_default() += 1;
            lags.push(lag);
        }
        per_replica.push((replica.instance.clone(), runs));
    }
    let expected = args.jobs as u64 * args.secs;
    let doubles: u64 = per_tick.values().filter(|&&n| n > 1).map(|&n| u64::from(n) - 1).sum();
    let missed = expected.saturating_sub(per_tick.len() as u64);
    lags.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lags.is_empty() {
            return f64::NAN;
        }
        let i = ((lags.len() as f64 * p).ceil() as usize).clamp(1, lags.len()) - 1;
        lags[i] as f64 / 1000.0
    };
    let (p50, p99, max) = (pct(0.50), pct(0.99), pct(1.0));
    let even = expected as f64 / args.replicas as f64;
    let worst = per_replica.iter().map(|(_, n)| (*n as f64 - even).abs() / even).fold(0.0, f64::max);
    let missed_share = missed as f64 / expected as f64;

    println!("| job-ticks expected | runs | double runs | missed | start lag p50 | p99 | max |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {expected} | {} | {doubles} | {missed} ({:.3}%) | {p50:.1} ms | {p99:.1} ms | {max:.1} ms |",
        lags.len(),
        missed_share * 100.0
    );
    if missed > 0 {
        // Which slots lost runs, and what the replicas said of them.
        let mut by_slot: std::collections::BTreeMap<i64, u64> = Default::default();
        for tick in (start_ms..end_ms).step_by(1000) {
            let ran = (0..args.jobs as u32).filter(|j| per_tick.contains_key(&(*j, tick))).count() as u64;
            if ran < args.jobs as u64 {
                by_slot.insert(tick, args.jobs as u64 - ran);
            }
        }
        println!(
            "\nMissed job-ticks by slot (s into the window: missed): {}",
            by_slot
                .iter()
                .map(|(t, n)| format!("{}: {n}", (t - start_ms) / 1000))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    println!(
        "\nSlots settled without a run, all replicas (outcome: count): {}{}",
        not_run.iter().map(|(o, n)| format!("{o}: {n}")).collect::<Vec<_>>().join(", "),
        if lost > 0 {
            format!(" (and {lost} reports the replicas' subscriptions fell behind on, over the whole run)")
        } else {
            String::new()
        }
    );
    println!("\n| replica | runs | vs even ({even:.0}) |");
    println!("|---|---|---|");
    for (instance, runs) in &per_replica {
        println!("| {instance} | {runs} | {:+.1}% |", (*runs as f64 - even) / even * 100.0);
    }

    let per = |v: u64| v as f64 / expected.max(1) as f64;
    // The script calls' count and execution time.
    let scripts = |of: &std::collections::BTreeMap<String, u64>| {
        ["evalsha", "eval", "fcall"].iter().filter_map(|c| of.get(*c)).sum::<u64>()
    };
    // Second attempts: job-ticks retried, those retried more than once (a double run of a
    // retry), those retried without being chosen to fail (their first attempt failed for
    // another reason: a claim or a lock that failed).
    let retries = retried.len() as u64;
    let retry_doubles: u64 = retried.values().map(|&n| u64::from(n) - 1).sum();
    let retried_unchosen = retried.keys().filter(|(job, slot)| !fails_first(*job, *slot)).count() as u64;
    let retries_due = if path == Path::Retry {
        (start_ms..end_ms)
            .step_by(1000)
            .map(|slot| (0..args.jobs as u32).filter(|j| fails_first(*j, slot)).count() as u64)
            .sum()
    } else {
        0
    };
    let summary = Summary {
        cpu_us: per(load.server_cpu_us),
        cmds: per(load.calls),
        scripts: per(scripts(&load.by_command)),
        p50_ms: p50,
        p99_ms: p99,
        doubles,
        missed,
        retries,
        retries_due,
        retry_doubles,
        retried_unchosen,
    };
    if !with_floor {
        println!(
            "\nRedis per job-tick: CPU {:.1} µs, {:.2} commands ({}), {:.2} script calls; retries run {retries} of {retries_due} due ({retried_unchosen} not chosen to fail, {retry_doubles} run twice).",
            summary.cpu_us,
            summary.cmds,
            load.breakdown(expected),
            summary.scripts
        );
        return Ok(summary);
    }
    // The floor, as many job-ticks as the window had.
    let floor = rt.block_on(floor(conn, args.jobs, args.secs))?;
    let cpu = (per(load.server_cpu_us), per(floor.server_cpu_us));
    let cmds = (per(load.calls), per(floor.calls));
    let cpu_ratio = cpu.0 / cpu.1.max(f64::MIN_POSITIVE);
    let slots = args.replicas as f64 * args.secs as f64;
    let reads_per_replica_slot = load.reads as f64 / slots;
    let requests_per_replica_slot = requests as f64 / slots;
    // Net of what the server spends per second doing nothing.
    let idle_share = idle_redis_us_per_s * args.secs as f64;
    let net_cpu = per((load.server_cpu_us as f64 - idle_share).max(0.0) as u64);
    let net_ratio = net_cpu / cpu.1.max(f64::MIN_POSITIVE);
    // Each replica's CPU time over the window, per 1,000 job-ticks (of all replicas).
    let replica_cpu_per_k = cpu_us as f64 / 1000.0 / args.replicas as f64 / (expected.max(1) as f64 / 1000.0);
    println!("\n| per job-tick, all replicas | scheduler | floor | × floor |");
    println!("|---|---|---|---|");
    println!("| Redis CPU (INFO cpu) | {:.1} µs | {:.1} µs | {:.1} |", cpu.0, cpu.1, cpu_ratio);
    println!(
        "| Redis CPU net of the server's idle rate ({:.2} ms/s) | {net_cpu:.1} µs | {:.1} µs | {net_ratio:.1} |",
        idle_redis_us_per_s / 1000.0,
        cpu.1
    );
    println!(
        "| Redis commands (script-internal included) | {:.2} | {:.2} | {:.1} |",
        cmds.0,
        cmds.1,
        cmds.0 / cmds.1.max(f64::MIN_POSITIVE)
    );
    println!("| script calls | {:.2} | 0 | |", per(scripts(&load.by_command)));
    println!(
        "| keys read (keyspace hits + misses; a script's included) | {:.2} | {:.2} | |",
        per(load.key_reads),
        per(floor.key_reads)
    );
    println!(
        "| requests to Redis (round trips) per replica per slot | {requests_per_replica_slot:.1} | {:.1} | |",
        // The floor's client: one pipeline per slot.
        1.0
    );
    println!(
        "\nRedis commands per job-tick: {}.\n\nExecution µs per call (INFO commandstats; a script's \
         includes the commands it runs): {}; scripts take {:.1} µs per job-tick of it.\n\nServer socket reads per replica per slot (a client \
         round trip is at least one read; pipelined and concurrent requests share reads): {:.1} \
         ({:.2} per job). Replica CPU over the window: {:.1} ms per 1,000 job-ticks per replica. The floor: {} × {} \
         `SET … NX PX` in pipelines of {}, back to back, after the load.",
        load.breakdown(expected),
        load.usec_per_call(),
        per(scripts(&load.usec_by_command)),
        reads_per_replica_slot,
        reads_per_replica_slot / args.jobs as f64,
        replica_cpu_per_k,
        args.secs,
        args.jobs,
        args.jobs,
    );
    let lag_limit = if args.jobs >= 10_000 { 250.0 } else { 25.0 };
    println!("\n| target | measured | met |");
    println!("|---|---|---|");
    println!("| start lag p99 ≤ {lag_limit:.0} ms | {p99:.1} ms | {} |", met(p99 <= lag_limit));
    println!("| Redis CPU per job-tick ≤ 10 µs | {:.1} µs | {} |", cpu.0, met(cpu.0 <= 10.0));
    println!(
        "| Redis CPU per job-tick within 3× the floor | {:.1}× | {} |",
        cpu_ratio,
        met(cpu_ratio <= 3.0)
    );
    println!(
        "| Redis CPU per job-tick net of idle within 3× the floor | {net_ratio:.1}× | {} |",
        met(net_ratio <= 3.0)
    );
    println!(
        "| runs per replica within ±25% of even | worst {:.1}% | {} |",
        worst * 100.0,
        met(worst <= 0.25)
    );
    println!("| no double run | {doubles} | {} |", met(doubles == 0));
    println!("| ≤ 0.1% missed job-ticks | {:.3}% | {} |", missed_share * 100.0, met(missed_share <= 0.001));
    println!(
        "{{\"scenario\":\"sched\",\"replicas\":{},\"jobs\":{},\"secs\":{},\"expected\":{expected},\"doubles\":{doubles},\"missed\":{missed},\"p50_ms\":{p50:.2},\"p99_ms\":{p99:.2},\"max_ms\":{max:.2},\"worst_spread\":{worst:.3},\"redis_cpu_us\":{:.2},\"floor_cpu_us\":{:.2},\"redis_cmds\":{:.2},\"floor_cmds\":{:.2},\"reads_per_replica_slot\":{reads_per_replica_slot:.1},\"requests_per_replica_slot\":{requests_per_replica_slot:.1},\"redis_cpu_net_us\":{net_cpu:.2},\"key_reads\":{:.2}}}",
        args.replicas,
        args.jobs,
        args.secs,
        cpu.0,
        cpu.1,
        cmds.0,
        cmds.1,
        per(load.key_reads)
    );
    Ok(summary)
}

/// Writes `line` to every replica's stdin (`start`, `end`: the window; `stop`).
fn tell(children: &mut [Replica], line: &str) {
    for replica in children.iter_mut() {
        let _ = writeln!(replica.stdin, "{line}");
        let _ = replica.stdin.flush();
    }
}

/// Sleeps until the wall clock reads `ms` (epoch ms).
fn sleep_until_ms(ms: i64) {
    let left = ms - Utc::now().timestamp_millis();
    if left > 0 {
        std::thread::sleep(Duration::from_millis(left as u64));
    }
}

/// The floor: `slots` × `jobs` conditional writes (`SET … NX PX`, one key per job-tick), each
/// slot's in one pipeline, with the server's counters around them.
async fn floor(conn: &mut MultiplexedConnection, jobs: usize, slots: u64) -> Result<CmdDelta> {
    let before = CmdStats::read(conn).await?;
    for slot in 0..slots {
        let mut pipe = redis::pipe();
        for job in 0..jobs {
            pipe.cmd("SET")
                .arg(format!("schedbench-floor:{job}:{slot}"))
                .arg("replica-0")
                .arg("NX")
                .arg("PX")
                .arg(60_000)
                .ignore();
        }
        pipe.query_async::<()>(conn).await.context("the floor's SET NX PX")?;
    }
    Ok(CmdStats::read(conn).await?.since(&before))
}

fn met(ok: bool) -> &'static str {
    if ok { "yes" } else { "**no**" }
}

// ---------------------------------------------------------------------------------------------
// a replica

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

fn client(url: &str, instance: &str) -> Result<LockClient> {
    Ok(LockClient::builder().url(url).instance_id(instance).build()?)
}

/// A run a replica started: (job, slot ms, start lag µs, attempt).
type Run = (u32, i64, u64, u32);

/// `--replica URL INSTANCE JOBS REPLICAS GRACE_MS PATH TAG`: runs `JOBS` jobs on a 1 s cron,
/// taking `PATH`, until `stop` on stdin, then prints its CPU time between `start` and `end` on
/// stdin (`cpu_us`) and one `run` line per run it started. `TAG` (may be empty) suffixes its
/// group and lock keys.
fn replica(args: &[String]) -> Result<()> {
    let [url, instance, jobs, replicas, grace_ms, path, tag] = args else {
        bail!("internal: schedbench --replica URL INSTANCE JOBS REPLICAS GRACE_MS PATH TAG")
    };
    let (jobs, replicas, grace_ms): (usize, usize, u64) =
        (jobs.parse()?, replicas.parse()?, grace_ms.parse()?);
    let path = Path::parse(path).with_context(|| format!("internal: no path {path}"))?;
    let runs: Arc<Mutex<Vec<Run>>> = Arc::new(Mutex::new(Vec::with_capacity(jobs * 64)));
    let not_run: Arc<Mutex<Vec<(i64, &'static str)>>> = Arc::default();
    let lost = Arc::new(AtomicU64::new(0));
    // Warnings (failed claims, releases, history writes) on stderr, tagged with the instance.
    // The `retry` path's failures are the point: their per-run error lines are left out
    // (what ran and what did not is counted from the run lines).
    let default = if path == Path::Retry { "warn,lock_scheduler::run=off" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    let requests = Arc::new(AtomicU64::new(0));
    metrics::set_global_recorder(RequestCounter(requests.clone()))
        .map_err(|_| anyhow::anyhow!("a metrics recorder was already installed"))?;
    let rt = runtime()?;
    rt.block_on(async {
        let client = client(url, instance)?;
        let mut builder = Scheduler::builder()
            .client(client)
            .group(format!("schedbench{tag}"))
            .claim_grace(Duration::from_millis(grace_ms))
            .shutdown_grace(Duration::from_secs(2));
        for i in 0..jobs {
            let runs = runs.clone();
            let job = Job::with_context(format!("{i}"), "* * * * * *", move |ctx: RunContext| {
                let lag = (Utc::now() - ctx.slot()).num_microseconds().unwrap_or(i64::MAX).max(0) as u64;
                // The slot's tick, for every attempt (attempt n claims tick + n - 1 in Redis).
                let slot = ctx.tick();
                if let Ok(mut runs) = runs.lock() {
                    runs.push((i as u32, slot, lag, ctx.attempt()));
                }
                std::future::ready(
                    if path == Path::Retry && ctx.attempt() == 1 && fails_first(i as u32, slot) {
                        Err("schedbench: this job-tick fails its first attempt")
                    } else {
                        Ok(())
                    },
                )
            })
            .lock(format!("schedbench{tag}:{i}"));
            let job = match path {
                Path::Skip => job,
                Path::Retry => {
                    job.retry(RetryPolicy::attempts(2).base_delay(Duration::from_millis(200)).jitter(0.0))
                }
                Path::Allow => job.overlap(Overlap::Allow),
                Path::Buffer => job.overlap(Overlap::BufferOne),
            };
            builder = builder.job(job);
        }
        let scheduler = builder.build()?;
        // Every slot settled here without running (skipped, missed, failed): (tick, outcome).
        let mut reports = scheduler.subscribe();
        let settled = tokio::spawn({
            let (not_run, lost) = (not_run.clone(), lost.clone());
            async move {
                loop {
                    let entry = match reports.recv().await {
                        Ok(report) if !report.outcome.ran_here() => {
                            (report.tick, report.outcome.metric_label())
                        }
                        Ok(_) => continue,
                        // Too many at once for the channel: counted, not lost silently.
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                            lost.fetch_add(n, Ordering::Relaxed);
                            continue;
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    };
                    if let Ok(mut not_run) = not_run.lock() {
                        not_run.push(entry);
                    }
                }
            }
        });
        let handle = scheduler.start().await?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while handle.live_replicas().len() < replicas {
            if Instant::now() > deadline {
                bail!("{instance} sees only {:?} after 20 s", handle.live_replicas());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!("ready");
        // `start` and `end` bound the window this process's CPU time is measured over; `stop`
        // (or the coordinator gone) ends the run.
        let window = tokio::task::spawn_blocking(move || {
            let (mut started, mut used) = (None, (0, 0));
            let now = || (process_cpu_us(), requests.load(Ordering::Relaxed));
            for line in std::io::stdin().lines() {
                match line.as_deref().map(str::trim) {
                    Ok("start") => started = Some(now()),
                    Ok("end") => {
                        let end = now();
                        used = started
                            .map_or((0, 0), |s| (end.0.saturating_sub(s.0), end.1.saturating_sub(s.1)));
                    }
                    _ => break,
                }
            }
            used
        });
        let (cpu_us, requests) = window.await.unwrap_or((0, 0));
        println!("cpu_us {cpu_us}");
        println!("requests {requests}");
        handle.shutdown().await;
        settled.abort();
        anyhow::Ok(())
    })?;
    let runs = runs.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for (job, slot, lag, attempt) in runs.iter() {
        writeln!(out, "{RUN} {job} {slot} {lag} {attempt}")?;
    }
    for (tick, outcome) in not_run.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.iter() {
        writeln!(out, "{NOT_RUN} {tick} {outcome}")?;
    }
    writeln!(out, "{LOST} {}", lost.load(Ordering::Relaxed))?;
    out.flush()?;
    Ok(())
}

/// `--idle URL JOBS SECS`: `JOBS` daily jobs, none due; prints this process's CPU time over
/// `SECS` seconds after a warm-up.
fn idle(args: &[String]) -> Result<()> {
    let [url, jobs, secs] = args else { bail!("internal: schedbench --idle URL JOBS SECS") };
    let (jobs, secs): (usize, u64) = (jobs.parse()?, secs.parse()?);
    let rt = runtime()?;
    rt.block_on(async {
        let mut builder = Scheduler::builder().client(client(url, "idle")?).group("schedbench-idle");
        // Daily, at a time that is not within the next minute: nothing fires while measured.
        let hour = (Utc::now().format("%H").to_string().parse::<u32>().unwrap_or(0) + 12) % 24;
        for i in 0..jobs {
            builder = builder.job(
                Job::new(format!("idle-{i}"), format!("0 {} {hour} * * *", i % 60), || async {})
                    .lock(format!("schedbench-idle:{i}")),
            );
        }
        let handle = builder.build()?.start().await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let before = process_cpu_us();
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let used = process_cpu_us().saturating_sub(before);
        println!("idle_cpu_us {used}");
        handle.shutdown().await;
        Ok(())
    })
}

/// A replica's metrics recorder: counts `lock_redis_requests_total` (its requests to Redis),
/// records nothing else (so the replica's CPU time is what it would be without a recorder).
struct RequestCounter(Arc<AtomicU64>);

impl metrics::Recorder for RequestCounter {
    fn describe_counter(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_gauge(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_histogram(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}

    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        if key.name() == "lock_redis_requests_total" {
            metrics::Counter::from_arc(self.0.clone())
        } else {
            metrics::Counter::noop()
        }
    }

    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }

    fn register_histogram(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}
