//! The chart of a job's runs over time: a stacked bar per hour (or day), succeeded below,
//! failed above them, the rest on top; a count axis, the first, middle and last bucket's start
//! below, a legend with the totals.

use std::fmt::Write as _;

use crate::page::text::time;
use crate::runs::counts::{Counts, Width};

/// The chart, or a sentence when there is nothing to count.
pub(crate) fn counts_chart(counts: &Counts) -> String {
    if counts.buckets.is_empty() {
        return "<p class=\"empty\" id=\"counts\">No runs recorded yet.</p>".into();
    }
    const WIDTH: f64 = 660.0;
    const HEIGHT: f64 = 170.0;
    const LEFT: f64 = 44.0;
    const RIGHT: f64 = 12.0;
    const TOP: f64 = 12.0;
    const BOTTOM: f64 = 36.0;
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let n = counts.buckets.len();
    #[allow(clippy::cast_precision_loss)] // at most a few dozen buckets
    let step = plot_w / n as f64;
    let bar = (step - 2.0).clamp(1.0, 28.0);
    let most = counts.buckets.iter().map(|b| b.succeeded + b.failed + b.other).max().unwrap_or(0).max(1);
    let bottom = TOP + plot_h;
    let unit = counts.width.name();
    let mut svg = format!(
        "<figure><svg id=\"counts\" role=\"img\" aria-label=\"succeeded and failed runs per {unit}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\">"
    );
    for (i, fraction) in [0.0, 0.5, 1.0].into_iter().enumerate() {
        let y = bottom - fraction * plot_h;
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let label = (most as f64 * fraction).round() as usize;
        let _ = write!(
            svg,
            "<line class=\"grid\" x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/>\
             <text class=\"tick\" id=\"count-tick-{i}\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
            LEFT + plot_w,
            LEFT - 6.0,
            y + 4.0,
        );
    }
    let (mut succeeded, mut failed, mut other) = (0, 0, 0);
    for (i, bucket) in counts.buckets.iter().enumerate() {
        #[allow(clippy::cast_precision_loss)]
        let x = LEFT + i as f64 * step;
        let mut y = bottom;
        for (class, count) in [("ok", bucket.succeeded), ("bad", bucket.failed), ("skip", bucket.other)] {
            if count == 0 {
                continue;
            }
            #[allow(clippy::cast_precision_loss)]
            let h = count as f64 / most as f64 * plot_h;
            y -= h;
            let _ = write!(
                svg,
                "<rect class=\"{class}\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{bar:.1}\" height=\"{h:.1}\"><title>{} · {} {}</title></rect>",
                time(Some(bucket.start)),
                count,
                match class {
                    "ok" => "succeeded",
                    "bad" => "failed",
                    _ => "other",
                },
            );
        }
        succeeded += bucket.succeeded;
        failed += bucket.failed;
        other += bucket.other;
    }
    let mut marks = vec![(0, "start"), (n - 1, "end")];
    if n > 2 {
        marks.insert(1, (n / 2, "middle"));
    }
    if n == 1 {
        marks.truncate(1);
    }
    let format = match counts.width {
        Width::Hour => "%m-%d %H:00",
        Width::Day => "%Y-%m-%d",
    };
    for (i, anchor) in marks {
        #[allow(clippy::cast_precision_loss)]
        let x = LEFT + i as f64 * step + bar / 2.0;
        let _ = write!(
            svg,
            "<text class=\"tick\" id=\"count-x-{i}\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{}</text>",
            bottom + 16.0,
            counts.buckets[i].start.format(format),
        );
    }
    let _ = write!(
        svg,
        "<line class=\"axis\" x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{bottom:.1}\"/>\
         <line class=\"axis\" x1=\"{LEFT}\" y1=\"{bottom:.1}\" x2=\"{:.1}\" y2=\"{bottom:.1}\"/>\
         <text class=\"label\" x=\"{LEFT}\" y=\"{:.1}\">runs per {unit} (UTC), by when each was recorded</text></svg>\
         <ul class=\"legend\" id=\"counts-legend\"><li><i class=\"ok\"></i>succeeded ({succeeded})</li>\
         <li><i class=\"bad\"></i>failed ({failed})</li><li><i class=\"skip\"></i>skipped, missed or cancelled ({other})</li></ul>\
         <figcaption>The {} runs the history keeps, since {}.</figcaption></figure>",
        LEFT + plot_w,
        HEIGHT - 4.0,
        counts.runs,
        time(counts.since),
    );
    svg
}
