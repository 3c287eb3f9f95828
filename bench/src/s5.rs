//! S5, contended with impatient waiters: one patient task loops acquire (wait up to 5 s) ->
//! hold 1 ms -> release on one key, while a second client's request handlers put a deadline of
//! 0-3 ms around their own waiting acquire of the same key (so most give up while queued) and
//! also start and drop a `try_lock` of their own. Reports the key's acquisitions per second
//! (all callers) as a ratio to the same round without impatient tasks, and the CPU the round
//! took (redis-server's and this process's, as a share of one core): the 64-task variant
//! keeps both cores of a 2-core machine busy, and its ratio measures the CPU left to the
//! patient task, not the protocol (`tests/tests/impatient.rs` asserts the protocol's
//! mechanism instead: no reservation lapses, the patient task's longest wait stays below a
//! hand-off time).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use lock_core::LockOptions;

use crate::Bench;
use crate::report::{Json, Ratios, Report, Table, fmt};

const HOLD: Duration = Duration::from_millis(1);
const WAIT: Duration = Duration::from_secs(5);
/// (impatient tasks, lock clients they are spread over) per variant; the first is the
/// baseline. The same mix as `tests/tests/impatient.rs` (whose 4 × 16 are processes, here
/// clients in this process).
const VARIANTS: [(usize, usize); 5] = [(0, 1), (1, 1), (4, 1), (64, 1), (16, 4)];

/// What one round of one variant measured.
#[derive(Default)]
struct Outcome {
    acquisitions: u64,
    /// The patient task's share of `acquisitions`.
    patient: u64,
    gave_up: u64,
    elapsed: Duration,
    longest_wait: Duration,
    longest_queue: u64,
    /// Per round: acquisitions per second.
    round_rate: Vec<f64>,
    /// Redis: commands run (scripts' included), CPU time; this process's CPU time.
    redis_cmds: u64,
    redis_cpu_us: u64,
    client_cpu_us: u64,
}

/// A small xorshift generator: the deadlines only need to be spread.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

async fn round(b: &Bench, (impatient, clients): (usize, usize), duration: Duration) -> Result<Outcome> {
    let key = b.key(&format!("s5:{impatient}x{clients}"));
    let patient = b.client("lockbench-s5-patient")?;
    let mut others = Vec::with_capacity(clients);
    for c in 0..clients {
        others.push(b.client(&format!("lockbench-s5-impatient-{c}"))?);
    }
    for (i, client) in std::iter::once(&patient).chain(&others).enumerate() {
        let guard =
            client.try_lock(&format!("{key}:warm:{i}"), LockOptions::new()).await.context("S5 warm-up")?;
        guard.release().await.context("S5 warm-up release")?;
    }
    let acquired = Arc::new(AtomicU64::new(0));
    let gave_up = Arc::new(AtomicU64::new(0));
    let before = b.stats().await?;
    let start = Instant::now();
    let stop = start + duration;
    let mut tasks = Vec::with_capacity(impatient);
    for i in 0..impatient {
        let (client, key, acquired, gave_up) =
            (others[i % clients].clone(), key.clone(), acquired.clone(), gave_up.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let own = format!("{key}:own:{i}");
            while Instant::now() < stop {
                let deadline = Duration::from_micros(next(&mut rng) % 3000);
                match tokio::time::timeout(deadline, client.acquire(&key, LockOptions::new().wait(WAIT)))
                    .await
                {
                    Ok(Ok(guard)) => {
                        acquired.fetch_add(1, Ordering::Relaxed);
                        let _ = guard.release().await;
                    }
                    Ok(Err(_)) => {}
                    Err(_) => {
                        gave_up.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let deadline = Duration::from_micros(next(&mut rng) % 1000);
                let _ = tokio::time::timeout(deadline, client.try_lock(&own, LockOptions::new())).await;
            }
        }));
    }
    let queue = lock_core::schema::queue_key(&key);
    let mut admin = b.conn().await?;
    let mut longest_wait = Duration::ZERO;
    let mut longest_queue = 0;
    let mut patient_count = 0;
    while Instant::now() < stop {
        let asked = Instant::now();
        let guard = patient.acquire(&key, LockOptions::new().wait(WAIT)).await.context("S5 patient lock")?;
        longest_wait = longest_wait.max(asked.elapsed());
        acquired.fetch_add(1, Ordering::Relaxed);
        patient_count += 1;
        tokio::time::sleep(HOLD).await;
        guard.release().await.context("S5 patient release")?;
        let len: u64 = lock_core::redis::cmd("LLEN").arg(&queue).query_async(&mut admin).await.unwrap_or(0);
        longest_queue = longest_queue.max(len);
    }
    for task in tasks {
        task.await.context("S5 task panicked")?;
    }
    let elapsed = start.elapsed();
    let used = b.stats().await?.since(&before);
    for client in &others {
        client.flush_releases(Duration::from_secs(5)).await;
    }
    Ok(Outcome {
        acquisitions: acquired.load(Ordering::Relaxed),
        patient: patient_count,
        gave_up: gave_up.load(Ordering::Relaxed),
        elapsed,
        longest_wait,
        longest_queue,
        round_rate: Vec::new(),
        redis_cmds: used.calls,
        redis_cpu_us: used.server_cpu_us,
        client_cpu_us: used.client_cpu_us,
    })
}

pub(crate) async fn run(b: &Bench, report: &mut Report) -> Result<()> {
    let (rounds, per_round) =
        if b.quick { (2, Duration::from_millis(750)) } else { (5, Duration::from_secs(1)) };
    let mut outcomes: Vec<Outcome> = VARIANTS.iter().map(|_| Outcome::default()).collect();
    for r in 0..rounds {
        eprintln!("  S5 round {}/{rounds}", r + 1);
        for k in 0..VARIANTS.len() {
            let i = (r + k) % VARIANTS.len();
            let o = round(b, VARIANTS[i], per_round).await?;
            let total = &mut outcomes[i];
            total.round_rate.push(o.acquisitions as f64 / o.elapsed.as_secs_f64().max(1e-9));
            total.acquisitions += o.acquisitions;
            total.patient += o.patient;
            total.gave_up += o.gave_up;
            total.elapsed += o.elapsed;
            total.longest_wait = total.longest_wait.max(o.longest_wait);
            total.longest_queue = total.longest_queue.max(o.longest_queue);
            total.redis_cmds += o.redis_cmds;
            total.redis_cpu_us += o.redis_cpu_us;
            total.client_cpu_us += o.client_cpu_us;
        }
    }
    let calm = outcomes[0].round_rate.clone();
    let mut table = Table::new(
        "S5 contended, with impatient waiters: 1 patient task, N request handlers giving up after 0-3 ms",
        &[
            "impatient tasks",
            "acq/s",
            "x without",
            "x p25..p75",
            "patient acq/s",
            "gave up/s",
            "patient longest wait ms",
            "longest queue",
            "Redis cmds/acq",
            "Redis CPU %",
            "client CPU %",
        ],
    );
    for ((impatient, clients), o) in VARIANTS.iter().zip(&outcomes) {
        let secs = o.elapsed.as_secs_f64().max(1e-9);
        let rate = o.acquisitions as f64 / secs;
        let vs = Ratios::of(&o.round_rate, &calm);
        let cmds_per_acq = o.redis_cmds as f64 / o.acquisitions.max(1) as f64;
        // Share of one core over the rounds' wall time.
        let (redis_cpu, client_cpu) =
            (o.redis_cpu_us as f64 / 1e4 / secs, o.client_cpu_us as f64 / 1e4 / secs);
        table.row(vec![
            if *clients > 1 {
                format!("{clients} × {}", impatient / clients)
            } else {
                impatient.to_string()
            },
            fmt(rate, 0),
            fmt(vs.median, 2),
            vs.iqr(2),
            fmt(o.patient as f64 / o.elapsed.as_secs_f64().max(1e-9), 0),
            fmt(o.gave_up as f64 / o.elapsed.as_secs_f64().max(1e-9), 0),
            o.longest_wait.as_millis().to_string(),
            o.longest_queue.to_string(),
            fmt(cmds_per_acq, 1),
            fmt(redis_cpu, 0),
            fmt(client_cpu, 0),
        ]);
        report.json.push(
            Json::new("s5")
                .int("impatient_tasks", *impatient as u64)
                .int("clients", *clients as u64)
                .int("acquisitions", o.acquisitions)
                .num("seconds", o.elapsed.as_secs_f64())
                .num("acquisitions_per_s", rate)
                .num("ratio_to_without", vs.median)
                .num("ratio_to_without_p25", vs.p25)
                .num("ratio_to_without_p75", vs.p75)
                .int("patient_acquisitions", o.patient)
                .int("gave_up", o.gave_up)
                .int("patient_longest_wait_ms", o.longest_wait.as_millis() as u64)
                .int("longest_queue", o.longest_queue)
                .num("redis_cmds_per_acquisition", cmds_per_acq)
                .num("redis_cpu_pct", redis_cpu)
                .num("client_cpu_pct", client_cpu),
        );
        if *impatient > 0 {
            report.target(
                format!("S5 acquisitions with {impatient} impatient tasks on {clients} client(s), x without"),
                vs.median,
                true,
                0.5,
                "x",
            );
        }
    }
    table.note(format!(
        "{rounds} rounds of {per_round:?} per variant, order rotated. acq/s counts every caller's acquisitions of the \
         key; x without = median over rounds of the ratio to the 0-task variant in the same round. longest queue = \
         the longest queue of waiters (`schema::queue_key`) seen after the patient task's releases. \
         `4 × 4`: 16 tasks over 4 lock clients. Redis cmds/acq counts every command Redis ran (scripts' included, \
         give-ups' and try_locks' too) per acquisition of the key; CPU % = CPU time over wall time, 100 = one core."
    ));
    report.tables.push(table);
    Ok(())
}
