//! S2, contended: 8 tasks on one key, each looping acquire (wait up to 10 s) -> hold 1 ms ->
//! release, through lock-core (all tasks on one client, and one client per task as replicas
//! would be) and through a raw client that spins on `SET NX`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use lock_core::{LockClient, LockOptions};

use crate::Bench;
use crate::raw;
use crate::report::{Json, Latency, Ratios, Report, Table, fmt, nanos, percentile, ratio, us};
use crate::server::CmdDelta;

const TASKS: usize = 8;
const HOLD: Duration = Duration::from_millis(1);
const WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// All tasks share one `LockClient` (one process).
    OneClient,
    /// Each task has its own `LockClient` (8 replicas).
    ClientPerTask,
    /// Raw `SET NX` retried at once; release by compare-and-delete.
    Spin,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::OneClient => "lock-core, 1 client",
            Mode::ClientPerTask => "lock-core, 8 clients",
            Mode::Spin => "raw spin",
        }
    }

    fn id(self) -> &'static str {
        match self {
            Mode::OneClient => "lock_one_client",
            Mode::ClientPerTask => "lock_client_per_task",
            Mode::Spin => "raw_spin",
        }
    }
}

/// What the holders record, shared by the tasks.
#[derive(Default)]
struct Shared {
    /// 1 + the task holding the lock, 0 when free. Two holders at once is a violation.
    holder: AtomicUsize,
    violations: AtomicU64,
    /// When the last holder started its release, and who it was.
    last_release: Mutex<Option<(Instant, usize)>>,
    gaps: Mutex<Vec<u64>>,
    to_other: AtomicU64,
    handoffs: AtomicU64,
}

impl Shared {
    fn acquired(&self, me: usize) {
        let now = Instant::now();
        if self.holder.swap(me + 1, Ordering::SeqCst) != 0 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        let last = self.last_release.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some((released_at, previous)) = last {
            self.gaps.lock().unwrap_or_else(PoisonError::into_inner).push(nanos(now - released_at));
            self.handoffs.fetch_add(1, Ordering::Relaxed);
            if previous != me {
                self.to_other.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn releasing(&self, me: usize) {
        *self.last_release.lock().unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), me));
        if self.holder.compare_exchange(me + 1, 0, Ordering::SeqCst, Ordering::SeqCst).is_err() {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// What one round of one variant measured.
#[derive(Default)]
struct Outcome {
    acquisitions: u64,
    elapsed: Duration,
    per_task: Vec<u64>,
    gaps: Vec<u64>,
    to_other: u64,
    handoffs: u64,
    violations: u64,
    cmds: CmdDelta,
    /// Per round: hand-off gap p50 (ns) and acquisitions/s.
    round_gap_p50: Vec<f64>,
    round_rate: Vec<f64>,
}

impl Outcome {
    fn merge(&mut self, mut round: Outcome) {
        let mut sorted = round.gaps.clone();
        sorted.sort_unstable();
        self.round_gap_p50.push(percentile(&sorted, 50.0) as f64);
        self.round_rate.push(round.acquisitions as f64 / round.elapsed.as_secs_f64().max(1e-9));
        self.acquisitions += round.acquisitions;
        self.elapsed += round.elapsed;
        if self.per_task.is_empty() {
            self.per_task = vec![0; round.per_task.len()];
        }
        for (total, n) in self.per_task.iter_mut().zip(&round.per_task) {
            *total += n;
        }
        self.gaps.append(&mut round.gaps);
        self.to_other += round.to_other;
        self.handoffs += round.handoffs;
        self.violations += round.violations;
        self.cmds.merge(&round.cmds);
    }
}

async fn run_mode(b: &Bench, mode: Mode, duration: Duration) -> Result<Outcome> {
    let key = b.key(&format!("s2:{}", mode.id()));
    let shared = Arc::new(Shared::default());
    let clients: Vec<LockClient> = match mode {
        Mode::OneClient => vec![b.client("lockbench-s2")?],
        Mode::ClientPerTask => {
            (0..TASKS).map(|i| b.client(&format!("lockbench-s2-{i}"))).collect::<Result<_>>()?
        }
        Mode::Spin => Vec::new(),
    };
    let conn = b.conn().await?;
    // Warm up: connect every client and load the scripts outside the measurement.
    for (i, client) in clients.iter().enumerate() {
        let guard =
            client.try_lock(&format!("{key}:warm:{i}"), LockOptions::new()).await.context("S2 warm-up")?;
        guard.release().await.context("S2 warm-up release")?;
    }
    if mode == Mode::Spin {
        let mut c = conn.clone();
        raw::acquire(&mut c, &format!("{key}:warm"), "warm", 1000).await?;
        raw::release(&mut c, &format!("{key}:warm"), "warm").await?;
    }

    let before = b.stats().await?;
    let start = Instant::now();
    let stop = start + duration;
    let mut handles = Vec::with_capacity(TASKS);
    for me in 0..TASKS {
        let shared = shared.clone();
        let key = key.clone();
        let client = clients.get(me % clients.len().max(1)).cloned();
        let conn = conn.clone();
        handles.push(tokio::spawn(async move {
            match client {
                Some(client) => lock_task(me, client, key, stop, shared).await,
                None => spin_task(me, conn, key, stop, shared).await,
            }
        }));
    }
    let mut per_task = Vec::with_capacity(TASKS);
    for h in handles {
        per_task.push(h.await.context("S2 task panicked")??);
    }
    let elapsed = start.elapsed();
    let cmds = b.stats().await?.since(&before);
    let gaps = std::mem::take(&mut *shared.gaps.lock().unwrap_or_else(PoisonError::into_inner));
    Ok(Outcome {
        acquisitions: per_task.iter().sum(),
        elapsed,
        per_task,
        gaps,
        to_other: shared.to_other.load(Ordering::Relaxed),
        handoffs: shared.handoffs.load(Ordering::Relaxed),
        violations: shared.violations.load(Ordering::SeqCst),
        cmds,
        ..Outcome::default()
    })
}

async fn lock_task(
    me: usize,
    client: LockClient,
    key: String,
    stop: Instant,
    shared: Arc<Shared>,
) -> Result<u64> {
    let mut count = 0;
    while Instant::now() < stop {
        let guard = client
            .acquire(&key, LockOptions::new().wait(WAIT))
            .await
            .with_context(|| format!("S2 task {me}: lock `{key}` with wait {WAIT:?}"))?;
        shared.acquired(me);
        tokio::time::sleep(HOLD).await;
        shared.releasing(me);
        if !guard.release().await.with_context(|| format!("S2 task {me}: release"))? {
            shared.violations.fetch_add(1, Ordering::SeqCst);
        }
        count += 1;
    }
    Ok(count)
}

async fn spin_task(
    me: usize,
    mut conn: crate::conn::RawConn,
    key: String,
    stop: Instant,
    shared: Arc<Shared>,
) -> Result<u64> {
    let mut count = 0;
    let mut n = (me as u64) << 40;
    while Instant::now() < stop {
        n += 1;
        let token = raw::token(n);
        let give_up = Instant::now() + WAIT;
        while !raw::acquire(&mut conn, &key, &token, raw::LEASE_MS).await? {
            anyhow::ensure!(Instant::now() < give_up, "S2 spin task {me}: waited more than {WAIT:?}");
        }
        shared.acquired(me);
        tokio::time::sleep(HOLD).await;
        shared.releasing(me);
        if !raw::release(&mut conn, &key, &token).await? {
            shared.violations.fetch_add(1, Ordering::SeqCst);
        }
        count += 1;
    }
    Ok(count)
}

pub(crate) async fn run(b: &Bench, report: &mut Report) -> Result<()> {
    let (rounds, per_round) =
        if b.quick { (2, Duration::from_millis(750)) } else { (5, Duration::from_secs(1)) };
    let modes = [Mode::Spin, Mode::OneClient, Mode::ClientPerTask];
    let mut outcomes: Vec<(Mode, Outcome)> = modes.iter().map(|m| (*m, Outcome::default())).collect();
    for round in 0..rounds {
        eprintln!("  S2 round {}/{rounds}", round + 1);
        for k in 0..modes.len() {
            let i = (round + k) % modes.len();
            let o = run_mode(b, modes[i], per_round).await?;
            outcomes[i].1.merge(o);
        }
    }
    let spin_rounds_gap = outcomes[0].1.round_gap_p50.clone();
    let spin_rounds_rate = outcomes[0].1.round_rate.clone();
    let mut table = Table::new(
        "S2 contended: 8 tasks, one key, acquire (wait <= 10 s) -> hold 1 ms -> release",
        &[
            "variant",
            "acq/s",
            "x spin",
            "gap p50 µs",
            "gap p99 µs",
            "gap p50 x spin",
            "x spin p25..p75",
            "to other task",
            "per-task min..max",
            "redis cmds/acq",
            "violations",
        ],
    );
    for (mode, o) in &mut outcomes {
        let rate = o.acquisitions as f64 / o.elapsed.as_secs_f64();
        let gap = Latency::of(&mut o.gaps);
        let gap_vs_spin = Ratios::of(&o.round_gap_p50, &spin_rounds_gap);
        let rate_vs_spin = Ratios::of(&o.round_rate, &spin_rounds_rate);
        let to_other = ratio(o.to_other as f64, o.handoffs as f64);
        let cmds_per = o.cmds.calls as f64 / o.acquisitions.max(1) as f64;
        let (min, max) =
            (o.per_task.iter().copied().min().unwrap_or(0), o.per_task.iter().copied().max().unwrap_or(0));
        table.row(vec![
            mode.name().to_owned(),
            fmt(rate, 0),
            fmt(rate_vs_spin.median, 2),
            fmt(us(gap.p50), 0),
            fmt(us(gap.p99), 0),
            fmt(gap_vs_spin.median, 2),
            gap_vs_spin.iqr(2),
            format!("{}%", fmt(to_other * 100.0, 1)),
            format!("{min}..{max}"),
            fmt(cmds_per, 2),
            o.violations.to_string(),
        ]);
        report.json.push(
            Json::new("s2")
                .str("variant", mode.id())
                .int("tasks", TASKS as u64)
                .int("acquisitions", o.acquisitions)
                .num("seconds", o.elapsed.as_secs_f64())
                .num("acquisitions_per_s", rate)
                .num("ratio_to_spin", rate_vs_spin.median)
                .latency("gap", gap)
                .num("gap_p50_ratio_to_spin", gap_vs_spin.median)
                .num("gap_p50_ratio_to_spin_p25", gap_vs_spin.p25)
                .num("gap_p50_ratio_to_spin_p75", gap_vs_spin.p75)
                .int("handoffs", o.handoffs)
                .num("handoffs_to_other_task", to_other)
                .int("per_task_min", min)
                .int("per_task_max", max)
                .num("redis_cmds_per_acquisition", cmds_per)
                .str("redis_cmds", &o.cmds.breakdown(o.acquisitions))
                .int("violations", o.violations),
        );
        // The same targets for one shared client and for one client per task.
        let clients = match mode {
            Mode::OneClient => "1 client",
            Mode::ClientPerTask => "8 clients",
            Mode::Spin => continue,
        };
        report.target(
            format!("S2 hand-off gap p50, x spin ({clients})"),
            gap_vs_spin.median,
            false,
            1.5,
            "x",
        );
        report.target(format!("S2 hand-offs to another task ({clients})"), to_other * 100.0, true, 95.0, "%");
        report.target(format!("S2 Redis commands per acquisition ({clients})"), cmds_per, false, 25.0, "");
        report.target(format!("S2 violations ({clients})"), o.violations as f64, false, 0.0, "");
    }
    table.note(format!(
        "{rounds} rounds of {per_round:?} per variant, order rotated (tasks finish their last cycle after that). \
         gap = release start -> next successful acquire by any task; x spin = median over rounds of the \
         ratio to the spinning baseline's value in the same round. Targets apply to the 1-client row (8 tasks of one process); the \
         8-client row is the same load spread over 8 `LockClient`s, as 8 replicas. redis cmds/acq from \
         INFO commandstats deltas, script-internal commands included."
    ));
    report.tables.push(table);
    Ok(())
}
