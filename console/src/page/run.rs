//! One run's page (`/jobs/{name}/runs/{id}`): everything its history entry says, its error in
//! full, the other runs of its slot, and a Retry button when it failed and nothing has run or
//! is waiting to run the slot again.

use std::fmt::Write as _;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use lock_scheduler::control;

use crate::Console;
use crate::error::ApiError;
use crate::page::buttons::{Effect, Extras, button_with};
use crate::page::layout::{Base, error_page, layout};
use crate::page::text::{esc, ms, outcome_class, seg, time};
use crate::runs::actions;
use crate::runs::api::{Path2, find_run, two};
use crate::runs::counts::recorded_at;
use crate::view;

/// `GET /jobs/{name}/runs/{id}`
pub(crate) async fn run(State(console): State<Console>, base: Base, path: Path2) -> Response {
    let read = async {
        let (name, id) = two(path)?;
        let job = view::job(console.client(), &name).await?;
        let (run, slot_runs) = find_run(&console, &job.name, &id).await?;
        let pending = control::pending_retries(console.client(), &job.name).await?;
        Ok::<_, ApiError>((job, run, slot_runs, pending))
    };
    let (job, run, slot_runs, pending) = match read.await {
        Ok(read) => read,
        Err(e) => return error_page(&console, &base, e),
    };
    let root = base.root();
    let link = seg(&job.name);
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let mut body = format!(
        "<p><a href=\"{root}jobs/{link}\">← {name}</a></p><h1>Run <span id=\"run-id\">{id}</span> of {name}</h1><dl>\
         <dt>Outcome</dt><dd id=\"run-outcome\" class=\"{class}\">{outcome}</dd>\
         <dt>Slot</dt><dd id=\"run-slot\">{slot}</dd><dt>Recorded</dt><dd>{recorded}</dd>\
         <dt>Instance</dt><dd>{instance}</dd><dt>Duration</dt><dd>{duration}</dd>\
         <dt>Attempt</dt><dd>{attempt}</dd><dt>Next attempt was due</dt><dd>{retry_at}</dd>\
         <dt>Gave up</dt><dd>{gave_up}</dd><dt>Backfill</dt><dd>{backfill}</dd>\
         <dt>Asked by</dt><dd>{by}</dd><dt>Run-now request</dt><dd>{request}</dd></dl>",
        name = esc(&job.name),
        id = esc(&run.id),
        class = outcome_class(&run.outcome),
        outcome = esc(&run.outcome),
        slot = time(run.slot),
        recorded = time(recorded_at(&run)),
        instance = esc(&run.instance),
        duration = ms(run.duration),
        attempt = run.attempt.map_or_else(|| "–".into(), |a| a.to_string()),
        retry_at = time(run.retry_at),
        gave_up = yes_no(run.gave_up),
        backfill = yes_no(run.backfill),
        by = esc(run.manual_by.as_deref().unwrap_or("–")),
        request = esc(run.request.as_deref().unwrap_or("–")),
    );
    if let Some(error) = &run.error {
        let _ = write!(body, "<h2>Error</h2><pre id=\"run-error\">{}</pre>", esc(error));
    }
    if view::is_failure(&run.outcome) {
        match actions::retry_refusal(&run, &slot_runs, &pending) {
            None => {
                let question = match run.manual_by {
                    Some(_) => {
                        format!("Retry this run of {}? It runs once more now, on a live replica.", job.name)
                    }
                    None => format!(
                        "Retry {}'s slot {}? It runs once more on a live replica, as if on time.",
                        job.name,
                        time(run.slot)
                    ),
                };
                let url = format!("{}/api/jobs/{link}/runs/{}/retry", base.0, seg(&run.id));
                let extras = Extras { confirm: Some(&question), idempotent: false, form: None };
                let _ = write!(
                    body,
                    "<p id=\"retry\">{}</p>",
                    button_with(
                        &console,
                        "POST",
                        &url,
                        "Retry…",
                        Effect { kind: "retry", name: &job.name },
                        extras
                    )
                );
            }
            Some((_, why)) => {
                let _ = write!(
                    body,
                    "<p id=\"retry-refusal\" class=\"warn\">Not retried from here: {}</p>",
                    esc(&why)
                );
            }
        }
    }
    if run.manual_by.is_none() {
        body.push_str("<h2>Runs of this slot</h2>");
        body.push_str(
            "<div class=\"scroll\"><table id=\"slot-runs\"><thead><tr><th>Run</th><th>Recorded</th><th>Instance</th>\
             <th>Outcome</th><th>Attempt</th><th>Backfill</th></tr></thead><tbody>",
        );
        for other in &slot_runs {
            let this = if other.id == run.id { " class=\"this\"" } else { "" };
            let _ = write!(
                body,
                "<tr{this}><td><a href=\"{root}jobs/{link}/runs/{}\">{}</a></td><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td></tr>",
                seg(&other.id),
                esc(&other.id),
                time(recorded_at(other)),
                esc(&other.instance),
                outcome_class(&other.outcome),
                esc(&other.outcome),
                other.attempt.map_or_else(|| "–".into(), |a| a.to_string()),
                yes_no(other.backfill),
            );
        }
        body.push_str("</tbody></table></div>");
    }
    layout(&console, &base, &format!("Run {} of {}", run.id, job.name), "Jobs", &body).into_response()
}
