//! Contends for one key as a replica of a web service would: a patient loop and/or request
//! handlers that put a short deadline around a waiting `acquire`, so most of them give up while
//! queued. The process behind the impatient-waiter tests and the lockbench scenario.
//!
//! Usage: `impatient_waiters <redis-url> <key> <secs> <patient 0|1> <impatient tasks> [<think-max-ms>
//! [<command-timeout-ms> <watchdog-lease-ms>]]`. Each impatient task pauses 0 to `<think-max-ms>`
//! (default 4) between requests.
//! Prints `acquired=<n> patient=<n> max_wait_ms=<ms> gave_up=<n> waiter_left=<n> lapsed=<n>`
//! when done: the last two are this process's `lock_handoffs_unclaimed_total` by `reason` (a
//! reservation passed on because its waiter had given up; one that lapsed untaken).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lock_core::{LockClient, LockOptions};

/// A small xorshift generator: the deadlines only need to be spread, not unpredictable.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Counts `lock_handoffs_unclaimed_total` by `reason` (`waiter_left`, `lapsed`); records
/// nothing else.
#[derive(Default)]
struct Unclaimed {
    waiter_left: Arc<AtomicU64>,
    lapsed: Arc<AtomicU64>,
}

impl metrics::Recorder for Unclaimed {
    fn describe_counter(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_gauge(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_histogram(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}

    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        if key.name() != "lock_handoffs_unclaimed_total" {
            return metrics::Counter::noop();
        }
        match key.labels().find(|l| l.key() == "reason").map(|l| l.value()) {
            Some("waiter_left") => metrics::Counter::from_arc(self.waiter_left.clone()),
            Some("lapsed") => metrics::Counter::from_arc(self.lapsed.clone()),
            _ => metrics::Counter::noop(),
        }
    }

    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }

    fn register_histogram(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let unclaimed = Unclaimed::default();
    let (waiter_left, lapsed) = (unclaimed.waiter_left.clone(), unclaimed.lapsed.clone());
    metrics::set_global_recorder(unclaimed)
        .map_err(|_| anyhow::anyhow!("a metrics recorder is installed"))?;
    let args: Vec<String> = std::env::args().collect();
    let (url, key, secs, patient, impatient, think, timeouts) = match args.as_slice() {
        [_, url, key, secs, patient, impatient] => (url, key, secs, patient, impatient, None, None),
        [_, url, key, secs, patient, impatient, think] => {
            (url, key, secs, patient, impatient, Some(think), None)
        }
        [_, url, key, secs, patient, impatient, think, command, lease] => {
            (url, key, secs, patient, impatient, Some(think), Some((command, lease)))
        }
        _ => anyhow::bail!(
            "usage: impatient_waiters <redis-url> <key> <secs> <patient 0|1> <impatient tasks> [<think-max-ms> [<command-timeout-ms> <watchdog-lease-ms>]]"
        ),
    };
    let think_us: u64 = think.map_or(Ok(4), |t| t.parse())? * 1000;
    let mut builder =
        LockClient::builder().url(url.as_str()).instance_id(format!("impatient-{}", std::process::id()));
    if let Some((command, lease)) = timeouts {
        builder = builder
            .command_timeout(Duration::from_millis(command.parse()?))
            .watchdog_lease(Duration::from_millis(lease.parse()?));
    }
    let client = builder.build()?;
    let run_for = Duration::from_secs_f64(secs.parse()?);
    let end = Instant::now() + run_for;
    let acquired = Arc::new(AtomicU64::new(0));
    let gave_up = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    let seed = u64::from(std::process::id()) | 1;
    for i in 0..impatient.parse::<u64>()? {
        let (client, key, acquired, gave_up) =
            (client.clone(), key.clone(), acquired.clone(), gave_up.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = seed.wrapping_mul(i + 7) | 1;
            let own = format!("{key}:own:{}:{i}", std::process::id());
            while Instant::now() < end {
                let deadline = Duration::from_micros(next(&mut rng) % 3000);
                let wait = LockOptions::new().wait(Duration::from_secs(5));
                match tokio::time::timeout(deadline, client.acquire(&key, wait)).await {
                    Ok(Ok(guard)) => {
                        acquired.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_micros(next(&mut rng) % 1000)).await;
                        let _ = guard.release().await;
                    }
                    Ok(Err(e)) => eprintln!("impatient: {e}"),
                    Err(_) => {
                        gave_up.fetch_add(1, Ordering::Relaxed);
                    }
                }
                // A try_lock of its own, started and dropped half way.
                let deadline = Duration::from_micros(next(&mut rng) % 1000);
                let _ = tokio::time::timeout(deadline, client.try_lock(&own, LockOptions::new())).await;
                // The next request arrives a little later.
                if think_us > 0 {
                    tokio::time::sleep(Duration::from_micros(next(&mut rng) % think_us)).await;
                }
            }
        }));
    }
    let mut patient_count = 0u64;
    let mut max_wait = Duration::ZERO;
    if patient == "1" {
        let mut rng = seed.wrapping_mul(3) | 1;
        while Instant::now() < end {
            let started = Instant::now();
            let guard = client.acquire(key, LockOptions::new().wait(Duration::from_secs(5))).await?;
            max_wait = max_wait.max(started.elapsed());
            patient_count += 1;
            acquired.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_micros(next(&mut rng) % 5000)).await;
            guard.release().await?;
        }
    }
    for task in tasks {
        task.await?;
    }
    client.flush_releases(Duration::from_secs(5)).await;
    println!(
        "acquired={} patient={patient_count} max_wait_ms={} gave_up={} waiter_left={} lapsed={}",
        acquired.load(Ordering::Relaxed),
        max_wait.as_millis(),
        gave_up.load(Ordering::Relaxed),
        waiter_left.load(Ordering::Relaxed),
        lapsed.load(Ordering::Relaxed)
    );
    Ok(())
}
