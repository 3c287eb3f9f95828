//! One job's page (`/jobs/{name}`): its state, the chart of its runs and its history.

use std::fmt::Write as _;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use lock_scheduler::control;

use crate::Console;
use crate::api::{Segment, segment};
use crate::error::ApiError;
use crate::page::buttons::job_buttons;
use crate::page::chart::chart;
use crate::page::layout::{Base, error_page, layout};
use crate::page::text::{esc, ms, outcome_class, time};
use crate::view;

/// Runs shown on a job's page (and in its chart).
const JOB_PAGE_RUNS: usize = 100;

/// `GET /jobs/{name}`
pub(crate) async fn job(State(console): State<Console>, base: Base, name: Segment) -> Response {
    let read = async {
        let name = segment(name)?;
        let job = view::job(console.client(), &name).await?;
        let runs = control::history(console.client(), &job.name, JOB_PAGE_RUNS).await?;
        Ok::<_, ApiError>((job, runs))
    };
    let (job, runs) = match read.await {
        Ok(read) => read,
        Err(e) => return error_page(&console, &base, e),
    };
    let mut body = format!(
        "<h1>Job <span id=\"job-name\">{}</span></h1><p>{}</p><dl>\
         <dt>Group</dt><dd>{}</dd><dt>Schedule</dt><dd>{}</dd><dt>Next slot</dt><dd>{}</dd>\
         <dt>Paused</dt><dd id=\"paused\">{}</dd><dt>Failures in 24 h</dt><dd>{}</dd>\
         <dt>Next retry</dt><dd id=\"next-retry\">{}</dd></dl>",
        esc(&job.name),
        job_buttons(&console, &job, &base.0),
        esc(job.group.as_deref().unwrap_or("– (no running replica registers it)")),
        esc(&match (&job.cron, &job.time_zone) {
            (Some(cron), Some(tz)) =>
                format!("{cron} ({tz}), from {}", job.origin.as_deref().unwrap_or("code")),
            _ => "–".into(),
        }),
        time(job.next_slot),
        esc(job.paused.as_deref().unwrap_or("no")),
        job.failures_24h,
        job.next_retry.as_ref().map_or_else(
            || "–".into(),
            |retry| format!("attempt {} at {}", retry.attempt, time(Some(retry.due)))
        ),
    );
    body.push_str(&chart(&runs));
    body.push_str(
        "<div class=\"scroll\"><table id=\"history\"><thead><tr><th>Slot</th><th>Instance</th><th>Outcome</th><th>Duration</th><th>Error</th><th>Asked by</th></tr></thead><tbody>",
    );
    for run in &runs {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            time(run.slot),
            esc(&run.instance),
            outcome_class(&run.outcome),
            esc(&run.outcome),
            ms(run.duration),
            esc(run.error.as_deref().unwrap_or("")),
            esc(run.manual_by.as_deref().unwrap_or("")),
        );
    }
    body.push_str("</tbody></table></div>");
    layout(&console, &base, &format!("Job {}", job.name), "Jobs", &body).into_response()
}
