//! Uncontended acquire -> release cycles, shared by S1 and S4: each task loops on its own key
//! for a fixed time, through lock-core or through the raw two-command baseline.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use lock_core::{LockClient, LockError, LockOptions};

use crate::conn::RawConn;
use crate::raw;
use crate::report::{nanos, percentile};

/// How one cycle takes and frees the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Variant {
    /// `SET key token NX PX` + EVALSHA compare-and-delete on one multiplexed connection.
    Raw,
    /// `client.try_lock(key, LockOptions::new())` + `guard.release()`.
    Guard,
    /// Raw client, lock-core's acquire script + raw compare-and-delete (`--explain`).
    RawLcAcquire,
    /// Raw client, `SET NX PX` + lock-core's release script (`--explain`).
    RawLcRelease,
    /// Raw client, both of lock-core's scripts: lock-core's server-side work without its
    /// client-side code (`--explain`).
    RawLcBoth,
    /// `client.with_lock(key, LockOptions::new(), body)`.
    Scoped,
    /// An annotated fn: `#[distributed_lock(key = "{key}", client = client)]`.
    Annotated,
}

impl Variant {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Variant::Raw => "raw",
            Variant::Guard => "guard",
            Variant::RawLcAcquire => "raw+lc-acquire",
            Variant::RawLcRelease => "raw+lc-release",
            Variant::RawLcBoth => "raw+lc-scripts",
            Variant::Scoped => "scoped",
            Variant::Annotated => "annotated",
        }
    }

    /// Every variant, in the order `--help` lists them.
    pub(crate) const ALL: [Variant; 7] = [
        Variant::Raw,
        Variant::Guard,
        Variant::Scoped,
        Variant::Annotated,
        Variant::RawLcAcquire,
        Variant::RawLcRelease,
        Variant::RawLcBoth,
    ];

    pub(crate) fn parse(s: &str) -> Option<Self> {
        Variant::ALL.into_iter().find(|v| v.name() == s)
    }
}

/// What the cycle loops measured.
#[derive(Debug, Default)]
pub(crate) struct Samples {
    pub(crate) cycles: u64,
    /// Wall time of the runs (summed over rounds).
    pub(crate) elapsed: Duration,
    /// Per-cycle acquire latency (raw and guard only), ns.
    pub(crate) acquire: Vec<u64>,
    /// Per-cycle release latency (raw and guard only), ns.
    pub(crate) release: Vec<u64>,
    /// Whole cycle latency, ns.
    pub(crate) cycle: Vec<u64>,
    /// Throughput of each round, cycles/s.
    pub(crate) rounds: Vec<f64>,
    /// Median cycle latency of each round, ns.
    pub(crate) round_p50: Vec<f64>,
}

impl Samples {
    pub(crate) fn merge(&mut self, other: Samples) {
        self.cycles += other.cycles;
        self.elapsed += other.elapsed;
        self.acquire.extend(other.acquire);
        self.release.extend(other.release);
        self.cycle.extend(other.cycle);
        self.rounds.extend(other.rounds);
        self.round_p50.extend(other.round_p50);
    }

    pub(crate) fn per_sec(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Handles a cycle task needs.
#[derive(Clone)]
pub(crate) struct Conns {
    pub(crate) client: LockClient,
    pub(crate) conn: RawConn,
}

/// Runs `tasks` tasks, task `i` on key `<prefix>:<i>`, each looping for `duration`.
pub(crate) async fn run_cycles(
    conns: &Conns,
    variant: Variant,
    tasks: usize,
    prefix: &str,
    duration: Duration,
) -> Result<Samples> {
    let start = Instant::now();
    let deadline = start + duration;
    let mut handles = Vec::with_capacity(tasks);
    for i in 0..tasks {
        let conns = conns.clone();
        let key = format!("{prefix}:{i}");
        handles.push(tokio::spawn(async move { task(conns, variant, key, Some(deadline), u64::MAX).await }));
    }
    let mut total = Samples::default();
    for handle in handles {
        total.merge(handle.await.context("cycle task panicked")??);
    }
    total.elapsed = start.elapsed();
    total.rounds = vec![total.per_sec()];
    let mut cycle = total.cycle.clone();
    cycle.sort_unstable();
    total.round_p50 = vec![percentile(&cycle, 50.0) as f64];
    Ok(total)
}

/// One task's loop: until `deadline` or `max_cycles`.
pub(crate) async fn task(
    conns: Conns,
    variant: Variant,
    key: String,
    deadline: Option<Instant>,
    max_cycles: u64,
) -> Result<Samples> {
    let Conns { client, mut conn } = conns;
    let mut s = Samples::default();
    let timed = deadline.is_some();
    let mut n: u64 = 0;
    while n < max_cycles && deadline.is_none_or(|d| Instant::now() < d) {
        n += 1;
        let t0 = Instant::now();
        match variant {
            Variant::Raw | Variant::RawLcAcquire | Variant::RawLcRelease | Variant::RawLcBoth => {
                let token = raw::token(n);
                let taken = match variant {
                    Variant::RawLcAcquire | Variant::RawLcBoth => {
                        raw::lc_acquire(&mut conn, &key, &token, raw::LEASE_MS).await?
                    }
                    _ => raw::acquire(&mut conn, &key, &token, raw::LEASE_MS).await?,
                };
                if !taken {
                    bail!("raw acquire on uncontended key `{key}` found it taken");
                }
                let t1 = Instant::now();
                let owned = match variant {
                    Variant::RawLcRelease | Variant::RawLcBoth => {
                        raw::lc_release(&mut conn, &key, &token).await?
                    }
                    _ => raw::release(&mut conn, &key, &token).await?,
                };
                if !owned {
                    bail!("raw release of `{key}` found another token");
                }
                if timed {
                    s.acquire.push(nanos(t1 - t0));
                    s.release.push(nanos(t1.elapsed()));
                }
            }
            Variant::Guard => {
                let guard = client
                    .try_lock(&key, LockOptions::new())
                    .await
                    .with_context(|| format!("try_lock on uncontended key `{key}`"))?;
                let t1 = Instant::now();
                if !guard.release().await.with_context(|| format!("releasing `{key}`"))? {
                    bail!("release of `{key}` reported the lock was no longer held");
                }
                if timed {
                    s.acquire.push(nanos(t1 - t0));
                    s.release.push(nanos(t1.elapsed()));
                }
            }
            Variant::Scoped => {
                let out = client
                    .with_lock(&key, LockOptions::new(), async { std::hint::black_box(n) })
                    .await
                    .with_context(|| format!("with_lock on uncontended key `{key}`"))?;
                std::hint::black_box(out);
            }
            Variant::Annotated => {
                let out = annotated(&client, &key, n)
                    .await
                    .with_context(|| format!("annotated fn on uncontended key `{key}`"))?;
                std::hint::black_box(out);
            }
        }
        if timed {
            s.cycle.push(nanos(t0.elapsed()));
        }
        s.cycles += 1;
    }
    Ok(s)
}

/// The annotated fn of S4: fail fast, watchdog lease, the key from a parameter.
#[lock_core::distributed_lock(key = "{key}", client = client)]
pub(crate) async fn annotated(client: &LockClient, key: &str, n: u64) -> Result<u64, LockError> {
    Ok(std::hint::black_box(n))
}
