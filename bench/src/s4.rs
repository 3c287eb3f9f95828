//! S4, overhead of the API layers, uncontended, one task: an annotated fn vs the scoped API
//! (`with_lock`) vs the guard calls vs the raw two commands.

use std::time::Duration;

use anyhow::Result;

use crate::Bench;
use crate::cycles::{Conns, Samples, Variant, run_cycles};
use crate::report::{Json, Latency, Ratios, Report, Table, fmt, us};
use crate::server::process_cpu_us;

/// The resolution of a per-call median on this kind of machine: two API paths that differ by
/// about as many instructions as the annotated fn and `with_lock` (`try_lock` + `release` vs
/// `with_lock`) came out 0.98-1.04x of each other across runs.
const NOISE_FLOOR: f64 = 0.02;

const VARIANTS: [Variant; 4] = [Variant::Raw, Variant::Guard, Variant::Scoped, Variant::Annotated];

/// Runs S4 on a current-thread runtime (see [`Bench::on_local_runtime`]).
pub(crate) async fn run(b: &Bench, report: &mut Report) -> Result<()> {
    let local = b
        .on_local_runtime(|b| async move {
            let mut report = Report::default();
            run_here(&b, &mut report).await?;
            Ok(report)
        })
        .await?;
    report.merge(local);
    Ok(())
}

async fn run_here(b: &Bench, report: &mut Report) -> Result<()> {
    let (rounds, per_round) =
        if b.quick { (4, Duration::from_millis(250)) } else { (12, Duration::from_millis(500)) };
    let conns = Conns { client: b.client("lockbench-s4")?, conn: b.conn().await? };
    for v in VARIANTS {
        run_cycles(&conns, v, 1, &b.key(&format!("s4:warm:{}", v.name())), Duration::from_millis(200))
            .await?;
    }
    let mut acc: [Samples; 4] = Default::default();
    let mut cpu_us = [0u64; 4];
    for round in 0..rounds {
        eprintln!("  S4 round {}/{rounds}", round + 1);
        // Rotate the order so no variant always runs first or last.
        for k in 0..VARIANTS.len() {
            let i = (round + k) % VARIANTS.len();
            let v = VARIANTS[i];
            let cpu0 = process_cpu_us();
            let s = run_cycles(&conns, v, 1, &b.key(&format!("s4:{}", v.name())), per_round).await?;
            cpu_us[i] += process_cpu_us() - cpu0;
            acc[i].merge(s);
        }
    }
    let scoped_rounds = acc[2].rounds.clone();
    let scoped_round_p50 = acc[2].round_p50.clone();
    let mut table = Table::new(
        "S4 API overhead: one task, uncontended, one lock cycle per call",
        &[
            "API",
            "calls/s",
            "x scoped",
            "x scoped p25..p75",
            "call p50 µs",
            "call p99 µs",
            "p50 x scoped",
            "p50 x scoped p25..p75",
            "client CPU µs/call",
        ],
    );
    for ((v, s), cpu) in VARIANTS.into_iter().zip(acc.iter_mut()).zip(cpu_us) {
        let cpu_per = cpu as f64 / s.cycles.max(1) as f64;
        let rate = s.per_sec();
        let lat = Latency::of(&mut s.cycle);
        let vs_scoped = Ratios::of(&s.rounds, &scoped_rounds);
        let p50_vs_scoped = Ratios::of(&s.round_p50, &scoped_round_p50);
        let label = match v {
            Variant::Raw => "raw SET NX + EVALSHA",
            Variant::Guard => "try_lock + release",
            Variant::Scoped => "with_lock (scoped)",
            Variant::Annotated => "annotated fn",
            other => other.name(),
        };
        table.row(vec![
            label.to_owned(),
            fmt(rate, 0),
            fmt(vs_scoped.median, 3),
            vs_scoped.iqr(3),
            fmt(us(lat.p50), 1),
            fmt(us(lat.p99), 1),
            fmt(p50_vs_scoped.median, 3),
            p50_vs_scoped.iqr(3),
            fmt(cpu_per, 1),
        ]);
        report.json.push(
            Json::new("s4")
                .str("variant", v.name())
                .int("calls", s.cycles)
                .num("calls_per_s", rate)
                .num("ratio_to_scoped", vs_scoped.median)
                .num("ratio_to_scoped_p25", vs_scoped.p25)
                .num("ratio_to_scoped_p75", vs_scoped.p75)
                .latency("cycle", lat)
                .num("cycle_p50_ratio_to_scoped", p50_vs_scoped.median)
                .num("cycle_p50_ratio_to_scoped_p25", p50_vs_scoped.p25)
                .num("cycle_p50_ratio_to_scoped_p75", p50_vs_scoped.p75)
                .num("client_cpu_usec_per_call", cpu_per),
        );
        if v == Variant::Annotated {
            // Per-call overhead: the median call time, compared round by round (stalls caused
            // by other processes move throughput much more than the median). Within noise: no
            // further from 1 than NOISE_FLOOR or half the rounds' interquartile range.
            let deviation = (p50_vs_scoped.median - 1.0).abs();
            let noise = ((p50_vs_scoped.p75 - p50_vs_scoped.p25) / 2.0).max(NOISE_FLOOR);
            report.json.push(
                Json::new("s4_noise")
                    .num("annotated_p50_vs_scoped", p50_vs_scoped.median)
                    .num("noise", noise)
                    .bool("within_noise", deviation <= noise),
            );
            report.target(
                "S4 annotated fn vs scoped, call p50 deviation",
                deviation * 100.0,
                false,
                noise * 100.0,
                "%",
            );
        }
    }
    table.note(format!(
        "{rounds} rounds of {per_round:?} per API, order rotated each round, on a current-thread runtime. x scoped \
         and p50 x scoped = medians over rounds of the ratio to with_lock's value in the same round. The \
         annotated fn is `#[distributed_lock(key = \"{{key}}\", client = client)] async fn(client: &LockClient, \
         key: &str, ..)`. Its target compares call p50; the limit is half the rounds' interquartile range, at \
         least 2%."
    ));
    report.tables.push(table);
    Ok(())
}
