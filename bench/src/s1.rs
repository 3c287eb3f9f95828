//! S1, uncontended: C = 1 and C = 32 tasks, each on its own key, acquire -> release as fast
//! as they can, against the raw two-command baseline measured in the same run.

use std::time::Duration;

use anyhow::Result;

use crate::Bench;
use crate::cycles::{Conns, Samples, Variant, run_cycles};
use crate::report::{Json, Latency, Ratios, Report, Table, fmt, ratio, us};
use crate::server::CmdDelta;

const TASKS: [usize; 2] = [1, 32];
const VARIANTS: [Variant; 2] = [Variant::Raw, Variant::Guard];
/// `--explain`: the raw client running lock-core's scripts, to split lock-core's cost into its
/// server-side and client-side parts.
const EXPLAIN: [Variant; 3] = [Variant::RawLcAcquire, Variant::RawLcRelease, Variant::RawLcBoth];

fn label(v: Variant) -> &'static str {
    match v {
        Variant::Raw => "raw",
        Variant::Guard => "lock-core",
        Variant::RawLcAcquire => "raw, lc acquire script",
        Variant::RawLcRelease => "raw, lc release script",
        Variant::RawLcBoth => "raw, both lc scripts",
        Variant::Scoped => "lock-core with_lock",
        Variant::Annotated => "lock-core annotated",
    }
}

pub(crate) async fn run(b: &Bench, report: &mut Report) -> Result<()> {
    let (rounds, per_round, warm) = if b.quick {
        (4, Duration::from_millis(300), Duration::from_millis(200))
    } else {
        (12, Duration::from_millis(500), Duration::from_millis(300))
    };
    let variants: Vec<Variant> =
        VARIANTS.into_iter().chain(EXPLAIN.into_iter().filter(|_| b.explain)).collect();
    let local = variants.clone();
    let one = b
        .on_local_runtime(move |b| async move { phase(&b, 1, &local, rounds, per_round, warm).await })
        .await?;
    let many = phase(b, 32, &variants, rounds, per_round, warm).await?;
    // acc[t][v]: samples and server counters of TASKS[t] tasks with variants[v].
    let mut acc = [one, many];
    let mut table = Table::new(
        "S1 uncontended: acquire -> release loop, one key per task",
        &[
            "tasks",
            "variant",
            "cycles/s",
            "x raw",
            "x raw p25..p75",
            "acq p50 µs",
            "acq p99 µs",
            "rel p50 µs",
            "rel p99 µs",
            "cycle p50 x raw",
            "redis cmds/cycle",
            "redis cmd µs/cycle",
            "redis CPU µs/cycle",
            "client CPU µs/cycle",
            "redis reads/cycle",
        ],
    );
    for (t, tasks) in TASKS.into_iter().enumerate() {
        let raw_rounds = acc[t][0].0.rounds.clone();
        let raw_acq = Latency::of(&mut acc[t][0].0.acquire);
        let raw_rel = Latency::of(&mut acc[t][0].0.release);
        let raw_cycle = Latency::of(&mut acc[t][0].0.cycle);
        for (i, &v) in variants.iter().enumerate() {
            let (s, cmds) = &mut acc[t][i];
            let acq = Latency::of(&mut s.acquire);
            let rel = Latency::of(&mut s.release);
            let cycle = Latency::of(&mut s.cycle);
            let rate = s.per_sec();
            let vs_raw = Ratios::of(&s.rounds, &raw_rounds);
            let cycle_ratio = ratio(cycle.p50 as f64, raw_cycle.p50 as f64);
            let per = |x: u64| x as f64 / s.cycles.max(1) as f64;
            let (cmds_per, usec_per) = (per(cmds.calls), per(cmds.usec));
            let (server_cpu, client_cpu) = (per(cmds.server_cpu_us), per(cmds.client_cpu_us));
            table.row(vec![
                tasks.to_string(),
                label(v).to_owned(),
                fmt(rate, 0),
                fmt(vs_raw.median, 3),
                vs_raw.iqr(2),
                fmt(us(acq.p50), 1),
                fmt(us(acq.p99), 1),
                fmt(us(rel.p50), 1),
                fmt(us(rel.p99), 1),
                fmt(cycle_ratio, 2),
                fmt(cmds_per, 2),
                fmt(usec_per, 1),
                fmt(server_cpu, 1),
                fmt(client_cpu, 1),
                fmt(per(cmds.reads), 2),
            ]);
            report.json.push(
                Json::new("s1")
                    .str("variant", v.name())
                    .int("tasks", tasks as u64)
                    .int("cycles", s.cycles)
                    .num("seconds", s.elapsed.as_secs_f64())
                    .num("cycles_per_s", rate)
                    .num("ratio_to_raw", vs_raw.median)
                    .num("ratio_to_raw_p25", vs_raw.p25)
                    .num("ratio_to_raw_p75", vs_raw.p75)
                    .latency("acquire", acq)
                    .latency("release", rel)
                    .latency("cycle", cycle)
                    .num("acquire_p50_ratio_to_raw", ratio(acq.p50 as f64, raw_acq.p50 as f64))
                    .num("release_p50_ratio_to_raw", ratio(rel.p50 as f64, raw_rel.p50 as f64))
                    .num("cycle_p50_ratio_to_raw", cycle_ratio)
                    .num("redis_cmds_per_cycle", cmds_per)
                    .num("redis_usec_per_cycle", usec_per)
                    .num("redis_cpu_usec_per_cycle", server_cpu)
                    .num("client_cpu_usec_per_cycle", client_cpu)
                    .num("redis_reads_per_cycle", per(cmds.reads))
                    .str("redis_cmds", &cmds.breakdown(s.cycles))
                    .str("redis_usec_per_call", &cmds.usec_per_call()),
            );
            if v == Variant::Guard {
                let label = if tasks == 1 { "S1 C=1 throughput, x raw" } else { "S1 C=32 throughput, x raw" };
                report.target(label, vs_raw.median, true, 0.95, "x");
            }
        }
    }
    table.note(format!(
        "{rounds} rounds of {per_round:?} per row; in each round every variant runs once, back to back, order \
         rotated. x raw = median over rounds of (cycles/s in the round / raw's in the same round), with its \
         quartiles; cycles/s = all cycles / all time. C = 1 on a current-thread runtime, C = 32 on the \
         2-worker runtime. raw = `SET key token NX PX` + EVALSHA compare-and-delete on one multiplexed \
         connection; lock-core = `try_lock(key, LockOptions::new())` (watchdog lease) + `release()`. redis \
         cmds and cmd µs per cycle from INFO commandstats deltas (script-internal commands included); redis \
         CPU from INFO cpu (all server work); client CPU from /proc/self/stat (whole process, 10 ms ticks); redis reads = socket reads \
         the server handled (INFO stats total_reads_processed): fewer per cycle, more commands per read."
    ));
    if b.explain {
        table.note(
            "`raw, ...` rows below lock-core: the raw client sending lock-core's own scripts (the same `.lua` files), \
             i.e. lock-core's server-side work without its client-side code.",
        );
    }
    report.tables.push(table);
    Ok(())
}

/// Runs every variant with `tasks` tasks, `rounds` times, alternating the variants within each
/// round so that drift in machine load hits all alike.
async fn phase(
    b: &Bench,
    tasks: usize,
    variants: &[Variant],
    rounds: usize,
    per_round: Duration,
    warm: Duration,
) -> Result<Vec<(Samples, CmdDelta)>> {
    let conns = Conns { client: b.client("lockbench-s1")?, conn: b.conn().await? };
    for &v in variants {
        run_cycles(&conns, v, tasks, &b.key(&format!("s1:warm:{}:{tasks}", v.name())), warm).await?;
    }
    let mut acc: Vec<(Samples, CmdDelta)> = variants.iter().map(|_| Default::default()).collect();
    for round in 0..rounds {
        for k in 0..variants.len() {
            let i = (round + k) % variants.len();
            let v = variants[i];
            if k == 0 {
                eprintln!("  S1 C={tasks} round {}/{rounds}", round + 1);
            }
            let before = b.stats().await?;
            let s =
                run_cycles(&conns, v, tasks, &b.key(&format!("s1:{}:{tasks}", v.name())), per_round).await?;
            let delta = b.stats().await?.since(&before);
            acc[i].0.merge(s);
            acc[i].1.merge(&delta);
        }
    }
    Ok(acc)
}
