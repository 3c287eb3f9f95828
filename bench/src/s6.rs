//! S6, semaphores: (a) uncontended, one task takes and gives back a permit of a 4-permit
//! semaphore as fast as it can, against a raw script semaphore (one EVALSHA to take, one ZREM to
//! give back) in the same run; (b) contended, 8 clients with one task each loop take (wait) ->
//! hold 1 ms -> give back on a 1-permit semaphore and, alternating, on a lock: the hand-off gap
//! (a release to the next acquisition) of the semaphore as a ratio to the lock's.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use lock_core::LockOptions;
use lock_core::redis::{self, Script};

use crate::Bench;
use crate::conn::RawConn;
use crate::raw;
use crate::report::{Json, Ratios, Report, Table, fmt, percentile};

const PERMITS: u32 = 4;
const CLIENTS: usize = 8;
const HOLD: Duration = Duration::from_millis(1);

/// The raw floor: drop lapsed holders, count, add if there is room (score = lapse time).
static RAW_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/raw_semaphore.lua")));

async fn raw_acquire(conn: &mut RawConn, name: &str, token: &str) -> Result<bool> {
    let taken: i64 = RAW_ACQUIRE
        .key(name)
        .arg(token)
        .arg(PERMITS)
        .arg(raw::LEASE_MS)
        .invoke_async(conn)
        .await
        .with_context(|| format!("raw semaphore acquire on `{name}`"))?;
    Ok(taken == 1)
}

async fn raw_release(conn: &mut RawConn, name: &str, token: &str) -> Result<bool> {
    let removed: i64 = redis::cmd("ZREM")
        .arg(name)
        .arg(token)
        .query_async(conn)
        .await
        .with_context(|| format!("raw semaphore release on `{name}`"))?;
    Ok(removed == 1)
}

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Raw,
    LockCore,
}

/// Cycles of `v` for `duration`, and the commands the server ran meanwhile.
async fn cycles(
    client: &lock_core::LockClient,
    conn: &mut RawConn,
    v: Variant,
    name: &str,
    duration: Duration,
) -> Result<(u64, f64)> {
    let semaphore = client.semaphore(name, PERMITS)?;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < duration {
        match v {
            Variant::Raw => {
                let token = raw::token(n);
                anyhow::ensure!(
                    raw_acquire(conn, name, &token).await?,
                    "raw semaphore refused a free permit"
                );
                anyhow::ensure!(raw_release(conn, name, &token).await?, "raw semaphore lost a permit");
            }
            Variant::LockCore => {
                let permit = semaphore.acquire(LockOptions::new()).await.context("S6 permit")?;
                anyhow::ensure!(permit.release().await.context("S6 release")?, "S6 permit lost");
            }
        }
        n += 1;
    }
    Ok((n, n as f64 / start.elapsed().as_secs_f64()))
}

/// One contended round: the hand-off gaps (µs) of `CLIENTS` clients' tasks on `name`, a
/// 1-permit semaphore (`semaphore`) or a lock. One holder at a time, so each acquisition
/// follows the last release recorded.
async fn contended(b: &Bench, name: &str, semaphore: bool, duration: Duration) -> Result<Vec<u64>> {
    let origin = Instant::now();
    // When the last release was sent, µs since `origin` (0: none yet).
    let released = Arc::new(AtomicU64::new(0));
    let gaps = Arc::new(Mutex::new(Vec::new()));
    let stop = origin + duration;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = b.client(&format!("lockbench-s6-{c}"))?;
        let (name, released, gaps) = (name.to_owned(), released.clone(), gaps.clone());
        tasks.push(tokio::spawn(async move {
            let wait = LockOptions::new().wait(Duration::from_secs(5));
            let sem = client.semaphore(&name, 1)?;
            let now = || origin.elapsed().as_micros() as u64;
            while Instant::now() < stop {
                let (permit, guard) = if semaphore {
                    (Some(sem.acquire(wait.clone()).await?), None)
                } else {
                    (None, Some(client.acquire(&name, wait.clone()).await?))
                };
                let last = released.load(Ordering::SeqCst);
                if last > 0 {
                    gaps.lock()
                        .map_err(|_| anyhow::anyhow!("gaps poisoned"))?
                        .push(now().saturating_sub(last));
                }
                tokio::time::sleep(HOLD).await;
                released.store(now(), Ordering::SeqCst);
                let still_ours = match (permit, guard) {
                    (Some(permit), _) => permit.release().await?,
                    (_, Some(guard)) => guard.release().await?,
                    _ => true,
                };
                anyhow::ensure!(still_ours, "a contended hold was lost");
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await.context("S6 task panicked")??;
    }
    let gaps = gaps.lock().map(|g| g.clone()).unwrap_or_default();
    Ok(gaps)
}

pub(crate) async fn run(b: &Bench, report: &mut Report) -> Result<()> {
    let (rounds, per_round) =
        if b.quick { (4, Duration::from_millis(300)) } else { (10, Duration::from_millis(500)) };
    let mut conn = b.conn().await?;
    let client = b.client("lockbench-s6")?;
    // Warm: the client's liveness key, the scripts loaded.
    cycles(&client, &mut conn, Variant::LockCore, &b.key("s6:warm"), per_round / 2).await?;
    cycles(&client, &mut conn, Variant::Raw, &b.key("s6:warm:raw"), per_round / 2).await?;
    let mut rates = [Vec::new(), Vec::new()];
    let mut cmds = [0f64; 2];
    let mut total = [0u64; 2];
    for round in 0..rounds {
        for k in 0..2 {
            let i = (round + k) % 2;
            let v = if i == 0 { Variant::Raw } else { Variant::LockCore };
            let before = b.stats().await?;
            let (n, rate) = cycles(&client, &mut conn, v, &b.key(&format!("s6:{i}")), per_round).await?;
            let delta = b.stats().await?.since(&before);
            rates[i].push(rate);
            cmds[i] += delta.calls as f64;
            if round == 0 {
                eprintln!("  S6 {}: {}", if i == 0 { "raw" } else { "lock-core" }, delta.breakdown(n));
            }
            total[i] += n;
        }
    }
    let vs_raw = Ratios::of(&rates[1], &rates[0]);
    let mut table = Table::new(
        "S6 semaphores: uncontended permit cycle; contended hand-off",
        &["case", "variant", "x baseline", "x p25..p75", "redis cmds/cycle", "gap p50 µs", "gap p99 µs"],
    );
    for (i, label) in ["raw script semaphore", "lock-core semaphore"].into_iter().enumerate() {
        let per = cmds[i] / total[i].max(1) as f64;
        let ratio = if i == 0 { Ratios::of(&rates[0], &rates[0]) } else { vs_raw };
        table.row(vec![
            "uncontended".into(),
            label.into(),
            fmt(ratio.median, 3),
            ratio.iqr(2),
            fmt(per, 2),
            "-".into(),
            "-".into(),
        ]);
        report.json.push(
            Json::new("s6")
                .str("case", "uncontended")
                .str("variant", label)
                .num("ratio_to_raw", ratio.median)
                .num("redis_cmds_per_cycle", per),
        );
    }
    report.target("S6 uncontended permit cycle, x raw semaphore", vs_raw.median, true, 0.9, "x");

    let mut gaps = [Vec::new(), Vec::new()];
    let contended_rounds = if b.quick { 2 } else { 4 };
    for round in 0..contended_rounds {
        for k in 0..2 {
            let i = (round + k) % 2;
            let name = b.key(&format!("s6:contended:{i}:{round}"));
            gaps[i].extend(contended(b, &name, i == 1, per_round * 2).await?);
        }
    }
    let mut p50 = [0u64; 2];
    for (i, label) in ["lock", "semaphore of 1 permit"].into_iter().enumerate() {
        gaps[i].sort_unstable();
        p50[i] = percentile(&gaps[i], 50.0);
        let p99 = percentile(&gaps[i], 99.0);
        table.row(vec![
            format!("contended, {CLIENTS} clients"),
            label.into(),
            "-".into(),
            "-".into(),
            "-".into(),
            p50[i].to_string(),
            p99.to_string(),
        ]);
        report.json.push(
            Json::new("s6")
                .str("case", "contended")
                .str("variant", label)
                .int("gap_p50_us", p50[i])
                .int("gap_p99_us", p99)
                .int("handoffs", gaps[i].len() as u64),
        );
    }
    let gap_ratio = p50[1] as f64 / p50[0].max(1) as f64;
    report.target("S6 contended hand-off gap p50, x lock's", gap_ratio, false, 1.5, "x");
    table.note(format!(
        "Uncontended: {rounds} rounds of {per_round:?}, the two variants alternating in each round; x baseline = \
         median over rounds of (cycles/s / raw's in the same round). raw = one EVALSHA (ZREMRANGEBYSCORE, ZCARD, \
         ZADD) to take, ZREM to give back; lock-core = `semaphore(name, {PERMITS}).acquire(LockOptions::new())` + \
         `release()`. Contended: {CLIENTS} clients x 1 task, wait up to 5 s, hold {HOLD:?}; gap = the next \
         acquisition's time minus the previous release's (sent) time, across clients."
    ));
    report.tables.push(table);
    Ok(())
}
