//! The overview (`/`): locks held, jobs, failing jobs, live replicas, from the shared snapshot.

use std::fmt::Write as _;

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use crate::Console;
use crate::page::layout::{Base, error_page, layout, partial_note};
use crate::page::text::{esc, seg};
use crate::view::{self, JobView};

/// `GET /`
pub(crate) async fn overview(State(console): State<Console>, base: Base) -> Response {
    let snapshot = match console.inner.snapshot.get(&console).await {
        Ok(snapshot) => snapshot,
        Err(e) => return error_page(&console, &base, e),
    };
    let (locks, jobs, replicas) = (&snapshot.locks, &snapshot.jobs, &snapshot.replicas);
    let failing: Vec<&JobView> = jobs.iter().filter(|j| j.failing()).collect();
    let paused = jobs.iter().filter(|j| j.paused.is_some()).count();
    let live = replicas.iter().filter(|r| r.is_live()).count();
    let more = if locks.len() >= view::MAX_LIMIT { "+" } else { "" };
    let root = base.root();
    let mut body = partial_note(&snapshot);
    let _ = write!(
        body,
        "<h1>Overview</h1><div class=\"cards\">\
         <a class=\"card\" href=\"{root}locks\"><b id=\"locks-held\">{}{more}</b>locks held</a>\
         <a class=\"card\" href=\"{root}jobs\"><b id=\"jobs-count\">{}</b>jobs ({paused} paused)</a>\
         <a class=\"card{}\" href=\"{root}jobs\"><b id=\"jobs-failing\">{}</b>failing jobs</a>\
         <a class=\"card\" href=\"{root}replicas\"><b id=\"replicas-live\">{live}</b>live replicas</a></div>",
        locks.len(),
        jobs.len(),
        if failing.is_empty() { "" } else { " bad" },
        failing.len(),
    );
    if !failing.is_empty() {
        body.push_str("<h2>Failing jobs</h2><ul>");
        for job in failing {
            let error = job.last.as_ref().and_then(|e| e.error.as_deref()).unwrap_or("");
            let _ = write!(
                body,
                "<li><a href=\"{root}jobs/{}\">{}</a>: <span class=\"bad\">{}</span></li>",
                seg(&job.name),
                esc(&job.name),
                esc(error)
            );
        }
        body.push_str("</ul>");
    }
    layout(&console, &base, "Overview", "Overview", &body).into_response()
}
