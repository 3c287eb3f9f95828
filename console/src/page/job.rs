//! One job's page (`/jobs/{name}`): its state and buttons, its runs per hour or day, a
//! backfill form, and its history searched, filtered and paged (`?outcome=&q=&n=&before=`),
//! each run linking to its own page.

use std::fmt::Write as _;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chrono::Utc;

use crate::Console;
use crate::api::{Params, Segment, params, segment};
use crate::error::ApiError;
use crate::page::buttons::{Effect, Extras, button_with, job_buttons};
use crate::page::chart::chart;
use crate::page::counts::counts_chart;
use crate::page::layout::{Base, error_page, layout};
use crate::page::text::{esc, ms, outcome_class, seg, time};
use crate::runs::counts;
use crate::runs::query::{self, HistoryPage, HistoryQuery, Outcome};
use crate::view::{self, JobView};

/// `GET /jobs/{name}?outcome=failed&q=timeout&n=100&before=<id>`
pub(crate) async fn job(
    State(console): State<Console>,
    base: Base,
    name: Segment,
    params_: Params,
) -> Response {
    let read = async {
        let name = segment(name)?;
        let query = HistoryQuery::parse(&params(params_)?)?;
        let job = view::job(console.client(), &name).await?;
        let page = query::search(console.client(), &job.name, &query).await?;
        let whole = console.inner.retained.get(console.client(), &job.name).await?;
        let counts = counts::count(&whole.runs, Utc::now());
        Ok::<_, ApiError>((job, query, page, counts))
    };
    let (job, query, page, counts) = match read.await {
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
    let _ = write!(body, "<h2>Runs per {}</h2>{}", counts.width.name(), counts_chart(&counts));
    body.push_str(&backfill_form(&console, &job, &base));
    body.push_str(&history(&console, &job, &base, &query, &page));
    layout(&console, &base, &format!("Job {}", job.name), "Jobs", &body).into_response()
}

/// The backfill form, for a job a running group registers, when actions are enabled.
fn backfill_form(console: &Console, job: &JobView, base: &Base) -> String {
    if !console.actions_enabled() || job.group.is_none() {
        return String::new();
    }
    let question = format!(
        "Backfill {}: run every slot of its schedule between the two times (UTC) once, on a live replica, as if on \
         time? Slots its history shows already ran are left out unless you ticked the box.",
        job.name
    );
    let extras = Extras { confirm: Some(&question), idempotent: false, form: Some("backfill") };
    let url = format!("{}/api/jobs/{}/backfill", base.0, seg(&job.name));
    let button =
        button_with(console, "POST", &url, "Backfill…", Effect { kind: "backfill", name: &job.name }, extras);
    format!(
        "<h2>Backfill</h2><form id=\"backfill\" class=\"filter\">\
         <label>From <input type=\"datetime-local\" name=\"from\" step=\"1\" required></label> \
         <label>to <input type=\"datetime-local\" name=\"to\" step=\"1\" required></label> (UTC) \
         <label><input type=\"checkbox\" name=\"force\" value=\"1\"> also slots that already ran</label> {button}</form>"
    )
}

/// The history: its filter, the chart of the runs listed, the table, the links to other pages.
fn history(
    console: &Console,
    job: &JobView,
    base: &Base,
    query: &HistoryQuery,
    page: &HistoryPage,
) -> String {
    let root = base.root();
    let link = seg(&job.name);
    let mut options = String::new();
    for (name, outcome) in Outcome::ALL {
        let selected = if outcome == query.outcome { " selected" } else { "" };
        let _ = write!(options, "<option value=\"{name}\"{selected}>{name}</option>");
    }
    let mut out = format!(
        "<h2>History</h2><form method=\"get\" action=\"{root}jobs/{link}\" class=\"filter\" id=\"history-filter\">\
         <label>Outcome <select name=\"outcome\">{options}</select></label> \
         <label>Search <input name=\"q\" value=\"{}\" placeholder=\"error, instance, who asked\" aria-label=\"search\"></label> \
         <label>Runs <input name=\"n\" value=\"{}\" size=\"4\" aria-label=\"runs per page\"></label> \
         <button>Filter</button></form>",
        esc(query.text.as_deref().unwrap_or("")),
        query.n,
    );
    if page.runs.is_empty() {
        out.push_str("<p class=\"empty\" id=\"no-runs\">No run matches.</p>");
    } else {
        let shown = &page.runs[..page.runs.len().min(100)];
        out.push_str(&chart(shown));
        out.push_str(
            "<div class=\"scroll\"><table id=\"history\"><thead><tr><th>Slot</th><th>Instance</th><th>Outcome</th>\
             <th>Duration</th><th>Attempt</th><th>Error</th><th>Asked by</th><th></th></tr></thead><tbody>",
        );
        for run in &page.runs {
            let retry = if view::is_failure(&run.outcome) {
                let question = format!(
                    "Retry {}'s run of {}? Its slot runs once more on a live replica.",
                    job.name,
                    time(run.slot)
                );
                let url = format!("{}/api/jobs/{link}/runs/{}/retry", base.0, seg(&run.id));
                let extras = Extras { confirm: Some(&question), idempotent: false, form: None };
                button_with(
                    console,
                    "POST",
                    &url,
                    "Retry…",
                    Effect { kind: "retry", name: &job.name },
                    extras,
                )
            } else {
                String::new()
            };
            let kind = match (run.backfill, &run.manual_by) {
                (true, _) => " <span class=\"origin\">(backfill)</span>",
                (false, Some(_)) => " <span class=\"origin\">(run now)</span>",
                _ => "",
            };
            let _ = write!(
                out,
                "<tr data-run=\"{id}\"><td><a href=\"{root}jobs/{link}/runs/{id_link}\">{slot}</a>{kind}</td><td>{}</td><td class=\"{}\">{}</td>\
                 <td>{}</td><td>{}</td><td class=\"error-text\">{}</td><td>{}</td><td>{retry}</td></tr>",
                esc(&run.instance),
                outcome_class(&run.outcome),
                esc(&run.outcome),
                ms(run.duration),
                run.attempt.map_or_else(|| "–".into(), |a| a.to_string()),
                esc(run.error.as_deref().unwrap_or("")),
                esc(run.manual_by.as_deref().unwrap_or("")),
                id = esc(&run.id),
                id_link = seg(&run.id),
                slot = time(run.slot),
            );
        }
        out.push_str("</tbody></table></div>");
    }
    // Paging keeps the filter.
    let mut filter = format!("outcome={}&amp;n={}", query.outcome.name(), query.n);
    if let Some(text) = &query.text {
        let _ = write!(filter, "&amp;q={}", seg(text));
    }
    let mut pages = Vec::new();
    if query.before.is_some() {
        pages.push(format!("<a id=\"newest\" href=\"{root}jobs/{link}?{filter}\">← Newest runs</a>"));
    }
    if let Some(next) = &page.next_before {
        pages.push(format!(
            "<a id=\"older\" href=\"{root}jobs/{link}?{filter}&amp;before={}\">Older runs →</a>",
            seg(next)
        ));
    }
    let searched = if page.cut {
        format!(
            " Searched {} runs of the history without finding {} that match; older ones may.",
            page.scanned, query.n
        )
    } else {
        String::new()
    };
    let _ = write!(
        out,
        "<p class=\"pages\" id=\"pages\">{} run(s) shown.{searched} {}</p>",
        page.runs.len(),
        pages.join(" · ")
    );
    out
}
