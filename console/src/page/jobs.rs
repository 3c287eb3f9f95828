//! The jobs (`/jobs`): every job with its schedule, last run and buttons, from the shared
//! snapshot.

use std::fmt::Write as _;

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use crate::Console;
use crate::page::buttons::job_buttons;
use crate::page::layout::{Base, error_page, layout, partial_note};
use crate::page::text::{esc, ms, outcome_class, seg, time};

/// `GET /jobs`
pub(crate) async fn jobs(State(console): State<Console>, base: Base) -> Response {
    let snapshot = match console.inner.snapshot.get(&console).await {
        Ok(snapshot) => snapshot,
        Err(e) => return error_page(&console, &base, e),
    };
    let jobs = &snapshot.jobs;
    let mut body = partial_note(&snapshot);
    body.push_str("<h1>Jobs</h1>");
    if jobs.is_empty() {
        body.push_str("<p class=\"empty\">No job is registered or has a history.</p>");
    } else {
        body.push_str(
            "<div class=\"scroll\"><table id=\"jobs\"><thead><tr><th>Job</th><th>Group</th><th>Schedule</th><th>Next slot</th><th>Paused</th>\
             <th>Last slot</th><th>Outcome</th><th>Duration</th><th>Instance</th><th>Failures 24 h</th><th></th></tr></thead><tbody>",
        );
        for job in jobs {
            let last = job.last.as_ref();
            let outcome = last.map_or("–", |e| e.outcome.as_str());
            let schedule = match (&job.cron, &job.time_zone) {
                (Some(cron), Some(tz)) => format!(
                    "<code>{}</code> {}{}",
                    esc(cron),
                    esc(tz),
                    job.origin.as_deref().filter(|o| *o != "code").map_or_else(String::new, |o| format!(
                        " <span class=\"origin\" title=\"where this schedule came from\">(from {})</span>",
                        esc(o)
                    ))
                ),
                _ => "–".into(),
            };
            let _ = write!(
                body,
                "<tr data-job=\"{name}\"><td><a href=\"{root}jobs/{link}\">{name}</a></td><td>{group}</td><td>{schedule}</td><td>{next}</td>\
                 <td class=\"paused\">{paused}</td><td>{slot}</td><td class=\"{class}\">{outcome}</td><td>{duration}</td>\
                 <td>{instance}</td><td class=\"{fclass}\">{failures}</td><td>{buttons}</td></tr>",
                name = esc(&job.name),
                link = seg(&job.name),
                group = esc(job.group.as_deref().unwrap_or("–")),
                next = time(job.next_slot),
                paused = if job.paused.is_some() { "paused" } else { "no" },
                slot = time(last.and_then(|e| e.slot)),
                class = outcome_class(outcome),
                outcome = esc(outcome),
                duration = last.map_or_else(|| "–".into(), |e| ms(e.duration)),
                instance = esc(last.map_or("–", |e| e.instance.as_str())),
                fclass = if job.failures_24h > 0 { "bad" } else { "" },
                failures = job.failures_24h,
                buttons = job_buttons(&console, job, &base.0),
                root = base.root(),
            );
        }
        body.push_str("</tbody></table></div>");
    }
    layout(&console, &base, "Jobs", "Jobs", &body).into_response()
}
