//! The chart of a job's runs: an inline SVG, a bar per run.

use std::fmt::Write as _;
use std::time::Duration;

use lock_scheduler::control::HistoryEntry;

use crate::page::text::{esc, ms, outcome_class, time};

/// A bar per run, oldest left: height its duration, colour its outcome; a duration axis with
/// three ticks, a time axis with the slots of the oldest, middle and newest runs, and a legend
/// of the outcomes shown. Bars are evenly spaced (one per run, not to a time scale): runs are
/// often seconds apart and then hours, and every run must stay visible.
pub(crate) fn chart(runs: &[HistoryEntry]) -> String {
    if runs.is_empty() {
        return "<p class=\"empty\">No runs recorded yet.</p>".into();
    }
    const WIDTH: f64 = 660.0;
    const HEIGHT: f64 = 190.0;
    // The plot's box inside the picture: room on the left for duration labels, below for times.
    const LEFT: f64 = 64.0;
    const RIGHT: f64 = 12.0;
    const TOP: f64 = 12.0;
    const BOTTOM: f64 = 40.0;
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let n = runs.len();
    #[allow(clippy::cast_precision_loss)] // at most JOB_PAGE_RUNS bars
    let step = plot_w / n as f64;
    let bar = (step - 1.0).clamp(1.0, 24.0);
    let longest = runs.iter().map(|r| r.duration.as_secs_f64()).fold(0.0, f64::max).max(0.001);
    let bottom = TOP + plot_h;
    let mut svg = format!(
        "<figure><svg id=\"chart\" role=\"img\" aria-label=\"run durations and outcomes\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\">"
    );
    // The duration axis: 0, half and the longest run, with grid lines.
    for (i, fraction) in [0.0, 0.5, 1.0].into_iter().enumerate() {
        let y = bottom - fraction * plot_h;
        let _ = write!(
            svg,
            "<line class=\"grid\" x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/>\
             <text class=\"tick\" id=\"y-tick-{i}\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT + plot_w,
            LEFT - 6.0,
            y + 4.0,
            ms(Duration::from_secs_f64(longest * fraction)),
        );
    }
    for (i, run) in runs.iter().rev().enumerate() {
        let h = (run.duration.as_secs_f64() / longest * plot_h).max(2.0);
        #[allow(clippy::cast_precision_loss)]
        let x = LEFT + i as f64 * step;
        let _ = write!(
            svg,
            "<rect class=\"{}\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" height=\"{h:.1}\"><title>{} · {} · {}</title></rect>",
            outcome_class(&run.outcome),
            bottom - h,
            time(run.slot),
            esc(&run.outcome),
            ms(run.duration),
        );
    }
    // The time axis: the slots of the oldest, middle and newest runs under their bars.
    let oldest_first: Vec<&HistoryEntry> = runs.iter().rev().collect();
    let mut marks = vec![(0, "start"), (n - 1, "end")];
    if n > 2 {
        marks.insert(1, (n / 2, "middle"));
    }
    for (i, anchor) in marks {
        #[allow(clippy::cast_precision_loss)]
        let x = LEFT + i as f64 * step + bar / 2.0;
        let label =
            oldest_first[i].slot.map_or_else(|| "–".into(), |t| t.format("%m-%d %H:%M:%S").to_string());
        let _ = write!(
            svg,
            "<line class=\"axis\" x1=\"{x:.1}\" y1=\"{bottom:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\"/>\
             <text class=\"tick\" id=\"x-tick-{i}\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{label}</text>",
            bottom + 4.0,
            bottom + 16.0,
        );
    }
    let _ = write!(
        svg,
        "<line class=\"axis\" x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{bottom:.1}\"/>\
         <line class=\"axis\" x1=\"{LEFT}\" y1=\"{bottom:.1}\" x2=\"{:.1}\" y2=\"{bottom:.1}\"/>\
         <text class=\"label\" x=\"{LEFT}\" y=\"{:.1}\">slot (UTC), one bar per run, oldest left</text>\
         <text class=\"label\" transform=\"translate(12 {:.1}) rotate(-90)\" text-anchor=\"middle\">duration</text></svg>",
        LEFT + plot_w,
        HEIGHT - 4.0,
        TOP + plot_h / 2.0,
    );
    // The legend: each outcome colour that appears, with its outcomes and counts.
    let mut legend: Vec<(&'static str, Vec<(String, usize)>)> = Vec::new();
    for run in runs {
        let class = outcome_class(&run.outcome);
        let entry = match legend.iter_mut().find(|(c, _)| *c == class) {
            Some((_, outcomes)) => outcomes,
            None => {
                legend.push((class, Vec::new()));
                &mut legend.last_mut().expect("just pushed").1
            }
        };
        match entry.iter_mut().find(|(o, _)| *o == run.outcome) {
            Some((_, count)) => *count += 1,
            None => entry.push((run.outcome.clone(), 1)),
        }
    }
    svg.push_str("<ul class=\"legend\" id=\"legend\">");
    for (class, outcomes) in legend {
        let text: Vec<String> = outcomes.iter().map(|(o, count)| format!("{} ({count})", esc(o))).collect();
        let _ = write!(svg, "<li><i class=\"{class}\"></i>{}</li>", text.join(", "));
    }
    let _ = write!(
        svg,
        "</ul><figcaption>Last {n} runs; longest {}.</figcaption></figure>",
        ms(Duration::from_secs_f64(longest))
    );
    svg
}
