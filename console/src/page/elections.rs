//! The elections (`/elections`): each leader election of the index, its leader, term, since
//! when, lease left and candidates, read when the page is asked for (not from the shared
//! snapshot: one read of the index, then three round trips per election, bounded by a
//! timeout and a count).

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};

use crate::Console;
use crate::error::ApiError;
use crate::page::layout::{Base, error_page, layout};
use crate::page::text::{esc, ms, time};

/// The most elections shown.
const MAX_ELECTIONS: usize = 100;

/// How long the page waits for Redis.
const READ_TIMEOUT: Duration = Duration::from_secs(3);

/// `GET /elections`.
pub(crate) async fn elections(State(console): State<Console>, base: Base) -> Response {
    let read = tokio::time::timeout(READ_TIMEOUT, console.client().elections(MAX_ELECTIONS)).await;
    let elections = match read {
        Ok(Ok(elections)) => elections,
        Ok(Err(e)) => return error_page(&console, &base, ApiError::from(e)),
        Err(_) => {
            let e = ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                format!("reading the elections took longer than {READ_TIMEOUT:?}"),
            );
            return error_page(&console, &base, e);
        }
    };
    let at = |t: Option<SystemTime>| time(t.map(DateTime::<Utc>::from));
    let mut body = String::from("<h1>Elections</h1>");
    if elections.is_empty() {
        body.push_str("<p class=\"empty\">No election has had a leader in the last hour.</p>");
    } else {
        body.push_str(
            "<div class=\"scroll\"><table id=\"elections\"><thead><tr><th>Election</th><th>Leader</th><th>Term</th>\
             <th>Since</th><th>Lease left</th><th>Candidates (next first)</th></tr></thead><tbody>",
        );
        for e in &elections {
            let leader = e.leader.as_ref();
            let (class, who) = match leader {
                Some(l) => ("ok", esc(&l.instance)),
                None => ("bad", "nobody".to_owned()),
            };
            let candidates: Vec<String> = e.candidates.iter().map(|c| esc(c)).collect();
            let _ = write!(
                body,
                "<tr data-election=\"{}\"><td class=\"key\">{}</td><td class=\"{class}\">{who}</td><td class=\"term\">{}</td><td>{}</td><td>{}</td><td class=\"candidates\">{}</td></tr>",
                esc(&e.name),
                esc(&e.name),
                leader.and_then(|l| l.term).map_or_else(|| "–".to_owned(), |t| t.to_string()),
                at(leader.and_then(|l| l.since)),
                e.lease_remaining.map_or_else(|| "–".to_owned(), ms),
                if candidates.is_empty() { "–".to_owned() } else { candidates.join("<br>") },
            );
        }
        body.push_str("</tbody></table></div>");
    }
    layout(&console, &base, "Elections", "Elections", &body).into_response()
}
