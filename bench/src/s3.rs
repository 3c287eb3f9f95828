//! S3, scale: 10,000 locks held at once under the watchdog for at least 3 lease periods:
//! renewal traffic against the ideal, client memory per held lock, renewal lag, lost locks.

use std::time::Duration;

use tokio::time::Instant;

use anyhow::{Context, Result, bail};
use futures_util::{StreamExt, TryStreamExt, stream};
use lock_core::redis;
use lock_core::{LockGuard, LockOptions};

use crate::Bench;
use crate::report::{Json, Latency, Report, Table, fmt, nanos, ratio};

/// Acquisitions and releases in flight at once.
const CONCURRENCY: usize = 64;
/// How often the monitor looks at every guard's local deadline and the renewal counter.
const SAMPLE_EVERY: Duration = Duration::from_millis(20);
/// A quiet spell this long separates two renewal passes.
const PASS_GAP: Duration = Duration::from_millis(200);

/// VmRSS of this process, in KiB.
fn rss_kib() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS line in /proc/self/status")
}

pub(crate) async fn run(b: &Bench, report: &mut Report, locks: usize, lease: Duration) -> Result<()> {
    let interval = lease / 3;
    let periods = 3;
    let hold = lease * periods + interval / 2;
    let client = b
        .client_builder("lockbench-s3")
        .watchdog_lease(lease)
        .command_timeout((lease / 6).max(Duration::from_millis(100)))
        .build()
        .context("building the S3 client")?;
    let prefix = b.key("s3");
    // Warm-up: connect, load the acquire and release scripts, start the watchdog task.
    client.try_lock(&format!("{prefix}:warm"), LockOptions::new()).await?.release().await?;

    let rss_before = rss_kib()?;
    eprintln!("  S3: acquiring {locks} watchdog locks (lease {lease:?})");
    let t_acquire = Instant::now();
    let mut guards: Vec<LockGuard> = stream::iter(0..locks)
        .map(|i| {
            let client = client.clone();
            let key = format!("{prefix}:{i}");
            async move {
                client
                    .try_lock(&key, LockOptions::new())
                    .await
                    .with_context(|| format!("S3: try_lock `{key}`"))
            }
        })
        .buffered(CONCURRENCY)
        .try_collect()
        .await?;
    let acquire_time = t_acquire.elapsed();
    let rss_acquired = rss_kib()?;
    if client.stats().renewing != locks {
        bail!("the watchdog renews {} locks, expected {locks}", client.stats().renewing);
    }

    eprintln!("  S3: holding them for {hold:?} ({periods} lease periods)");
    let before = b.stats().await?;
    let renewals_before = client.stats().renewals_sent;
    let start = Instant::now();
    let end = start + hold;
    let mut last: Vec<Instant> = guards.iter().map(LockGuard::valid_until).collect();
    let mut renewed_once = vec![false; locks];
    // Time between consecutive renewals of one lock, minus the nominal interval.
    let mut lags: Vec<u64> = Vec::new();
    let mut early: u64 = 0;
    let mut min_margin = Duration::MAX;
    // (time, counter) at the start of each renewal pass.
    let mut passes: Vec<(Instant, u64)> = Vec::new();
    let mut counter = renewals_before;
    let mut last_change: Option<Instant> = None;
    let mut lost_during = 0usize;
    while Instant::now() < end {
        tokio::time::sleep(SAMPLE_EVERY).await;
        let now = Instant::now();
        let c = client.stats().renewals_sent;
        if c != counter {
            if last_change.is_none_or(|t| now - t > PASS_GAP) {
                passes.push((now, counter));
            }
            counter = c;
            last_change = Some(now);
        }
        for (i, g) in guards.iter().enumerate() {
            let deadline = g.valid_until();
            if deadline > last[i] {
                // Deadline = renewal send time + lease - drift, so the difference of two is the
                // time between the two renewals' sends.
                let between = deadline - last[i];
                if renewed_once[i] {
                    match between.checked_sub(interval) {
                        Some(lag) => lags.push(nanos(lag)),
                        None => early += 1,
                    }
                }
                renewed_once[i] = true;
                last[i] = deadline;
            }
            min_margin = min_margin.min(deadline.saturating_duration_since(now));
        }
        lost_during = guards.iter().filter(|g| !g.is_held()).count();
        if lost_during > 0 {
            break;
        }
    }
    let elapsed = start.elapsed();
    let renewals = client.stats().renewals_sent - renewals_before;
    let cmds = b.stats().await?.since(&before);
    let rss_held = rss_kib()?;

    // Every key must still hold its token.
    let mut conn = b.conn().await?;
    let mut lost = 0usize;
    for chunk in guards.chunks(1000) {
        let keys: Vec<&str> = chunk.iter().map(LockGuard::key).collect();
        let values: Vec<Option<String>> = redis::cmd("MGET")
            .arg(&keys)
            .query_async(&mut conn)
            .await
            .context("S3: MGET of the held keys")?;
        lost +=
            chunk.iter().zip(values).filter(|(g, v)| !g.is_held() || v.as_deref() != Some(g.token())).count();
    }

    eprintln!("  S3: releasing");
    let released: Vec<bool> = stream::iter(guards.drain(..))
        .map(|g| async move { g.release().await.context("S3: release") })
        .buffered(CONCURRENCY)
        .try_collect()
        .await?;
    let released_owned = released.iter().filter(|r| **r).count();

    // Rate over whole passes: from the first pass start seen to the last one.
    let counted_rate = match (passes.first(), passes.last()) {
        (Some((t0, c0)), Some((t1, c1))) if passes.len() >= 2 => (c1 - c0) as f64 / (*t1 - *t0).as_secs_f64(),
        _ => f64::NAN,
    };
    let ideal = locks as f64 / interval.as_secs_f64();
    let server_rate = cmds.by_command.get("evalsha").copied().unwrap_or(0) as f64 / elapsed.as_secs_f64();
    let steady = lags.len() as u64;
    let lag = Latency::of(&mut lags);
    let per_lock_bytes = |kib: u64| (kib.saturating_sub(rss_before) * 1024) as f64 / locks as f64;

    let mut table = Table::new(
        format!("S3 scale: {locks} watchdog locks held, lease {lease:?}, renewed every {interval:?}"),
        &["metric", "value", "note"],
    );
    let rows: Vec<(&str, String, String)> = vec![
        ("acquire all", format!("{:.2} s", acquire_time.as_secs_f64()), format!("{CONCURRENCY} in flight")),
        (
            "held for",
            format!("{:.1} s", elapsed.as_secs_f64()),
            format!("{} renewal passes seen", passes.len()),
        ),
        (
            "renewal calls/s",
            fmt(counted_rate, 0),
            format!("client counter over whole passes; ideal {ideal:.0}/s"),
        ),
        (
            "renewal calls, x ideal",
            fmt(ratio(counted_rate, ideal), 3),
            "ideal = held / renewal interval".into(),
        ),
        ("EVALSHA calls/s at Redis", fmt(server_rate, 0), format!("{renewals} renewals sent in the window")),
        (
            "renewal lag p50 / p99 / max",
            format!(
                "{} / {} / {} ms",
                fmt(lag.p50 as f64 / 1e6, 1),
                fmt(lag.p99 as f64 / 1e6, 1),
                fmt(lag.max as f64 / 1e6, 1)
            ),
            format!("{steady} renewals: time since previous renewal - {interval:?}"),
        ),
        (
            "min validity left",
            format!("{} ms", fmt(min_margin.as_secs_f64() * 1000.0, 0)),
            "lowest valid_until - now seen (lease - drift = safe)".into(),
        ),
        (
            "RSS growth per lock, held",
            format!("{} B", fmt(per_lock_bytes(rss_held), 0)),
            format!("VmRSS {rss_before} -> {rss_acquired} -> {rss_held} KiB"),
        ),
        (
            "RSS growth per lock, just acquired",
            format!("{} B", fmt(per_lock_bytes(rss_acquired), 0)),
            String::new(),
        ),
        (
            "lost",
            lost.to_string(),
            format!("key without its token or guard not held; {released_owned}/{locks} releases owned"),
        ),
    ];
    for (metric, value, note) in rows {
        table.row(vec![metric.to_owned(), value, note]);
    }
    table.note(format!(
        "Renewal passes run at a fixed rate (every `interval`, however long a pass takes); a pass skips locks \
         renewed or acquired less than half an interval before it. RSS is measured in this process (the benchmark's `Vec<LockGuard>` included). {early} renewal(s) \
         came earlier than the interval."
    ));
    report.tables.push(table);
    report.json.push(
        Json::new("s3")
            .int("locks", locks as u64)
            .num("lease_s", lease.as_secs_f64())
            .num("renewal_interval_s", interval.as_secs_f64())
            .num("acquire_all_s", acquire_time.as_secs_f64())
            .num("held_s", elapsed.as_secs_f64())
            .int("renewal_passes", passes.len() as u64)
            .num("renewal_calls_per_s", counted_rate)
            .num("renewal_calls_ideal_per_s", ideal)
            .num("renewal_ratio_to_ideal", ratio(counted_rate, ideal))
            .num("redis_evalsha_per_s", server_rate)
            .latency("lag", lag)
            .num("min_validity_left_ms", min_margin.as_secs_f64() * 1000.0)
            .int("rss_before_kib", rss_before)
            .int("rss_acquired_kib", rss_acquired)
            .int("rss_held_kib", rss_held)
            .num("rss_bytes_per_lock", per_lock_bytes(rss_held))
            .int("lost", lost as u64)
            .int("lost_during_hold", lost_during as u64)
            .int("released_owned", released_owned as u64),
    );
    report.target("S3 renewal calls, x ideal (at most)", ratio(counted_rate, ideal), false, 1.03, "x");
    report.target("S3 renewal calls, x ideal (at least)", ratio(counted_rate, ideal), true, 0.97, "x");
    report.target("S3 RSS growth per held lock", per_lock_bytes(rss_held) / 1024.0, false, 1.0, " KiB");
    report.target("S3 locks lost", lost as f64, false, 0.0, "");
    Ok(())
}
