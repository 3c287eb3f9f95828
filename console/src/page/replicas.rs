//! The replicas (`/replicas`): each announced replica, what it runs and holds, from the shared
//! snapshot.

use std::fmt::Write as _;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chrono::Utc;

use crate::Console;
use crate::page::layout::{Base, error_page, layout, partial_note};
use crate::page::text::{esc, ms, outcome_class, seg, time, uptime};

/// `GET /replicas`: each announced replica with, from the same snapshot (no further Redis
/// reads), the locks it holds now (a job's lock while the job runs) and the jobs whose last
/// run it made. Replicas announce only their group and instance, so version, host and uptime
/// are not known to show.
pub(crate) async fn replicas(State(console): State<Console>, base: Base) -> Response {
    let snapshot = match console.inner.snapshot.get(&console).await {
        Ok(snapshot) => snapshot,
        Err(e) => return error_page(&console, &base, e),
    };
    let replicas = &snapshot.replicas;
    let root = base.root();
    let mut body = partial_note(&snapshot);
    body.push_str("<h1>Replicas</h1>");
    if replicas.is_empty() {
        body.push_str("<p class=\"empty\">No scheduler replica is announced.</p>");
    } else {
        body.push_str(
            "<div class=\"scroll\"><table id=\"replicas\"><thead><tr><th>Group</th><th>Instance</th><th>Live</th><th>Version</th><th>Host</th><th>Up for</th>\
             <th>Running</th><th>Holding now</th><th>Last run of</th><th>Announcement lapses in</th></tr></thead><tbody>",
        );
        for r in replicas {
            let (class, live) = if r.is_live() { ("ok", "yes") } else { ("bad", "no (lapsed)") };
            let holding: Vec<String> = snapshot
                .locks
                .iter()
                .filter(|l| l.holder.instance.as_deref() == Some(r.instance.as_str()))
                .map(|l| format!("<a class=\"key\" href=\"{root}locks/{}\">{}</a>", seg(&l.key), esc(&l.key)))
                .collect();
            let last_runs: Vec<String> = snapshot
                .jobs
                .iter()
                .filter(|j| j.group.as_deref() == Some(r.group.as_str()))
                .filter_map(|j| {
                    let last = j.last.as_ref().filter(|e| e.instance == r.instance)?;
                    Some(format!(
                        "<a href=\"{root}jobs/{}\">{}</a> (<span class=\"{}\">{}</span>, {})",
                        seg(&j.name),
                        esc(&j.name),
                        outcome_class(&last.outcome),
                        esc(&last.outcome),
                        time(last.slot),
                    ))
                })
                .collect();
            let about = r.about.as_ref();
            let text = |t: Option<&str>| t.filter(|t| !t.is_empty()).map_or_else(|| "–".to_owned(), esc);
            let running: Vec<String> = about
                .map(|a| {
                    a.running
                        .iter()
                        .map(|job| format!("<a href=\"{root}jobs/{}\">{}</a>", seg(job), esc(job)))
                        .collect()
                })
                .unwrap_or_default();
            let _ = write!(
                body,
                "<tr data-instance=\"{}\"><td>{}</td><td>{}</td><td class=\"{class}\">{live}</td><td class=\"version\">{}</td><td class=\"host\">{}</td><td class=\"uptime\">{}</td><td class=\"running\">{}</td><td class=\"holding\">{}</td><td class=\"last-runs\">{}</td><td>{}</td></tr>",
                esc(&r.instance),
                esc(&r.group),
                esc(&r.instance),
                text(about.map(|a| a.version.as_str())),
                text(about.map(|a| a.host.as_str())),
                about.map_or_else(|| "–".into(), |a| uptime(a.started_at, Utc::now())),
                if running.is_empty() { "–".into() } else { running.join("<br>") },
                if holding.is_empty() { "–".into() } else { holding.join("<br>") },
                if last_runs.is_empty() { "–".into() } else { last_runs.join("<br>") },
                ms(r.lapses_in),
            );
        }
        body.push_str("</tbody></table></div>");
    }
    layout(&console, &base, "Replicas", "Replicas", &body).into_response()
}
