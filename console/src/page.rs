//! The web page: server-rendered HTML (no build step, no Node), one small script for the
//! action buttons and the token box, one stylesheet. Every value from Redis goes through
//! [`esc`]; links into the console are relative, so the router can be mounted anywhere.

use std::fmt::Write as _;
use std::time::Duration;

use axum::extract::{FromRequestParts, OriginalUri, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, Utc};
use lock_core::inspect::LockKind;
use lock_scheduler::control::{self, HistoryEntry};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

use crate::Console;
use crate::api::{Params, Segment, lock_query, segment};
use crate::error::ApiError;
use crate::snapshot::Snapshot;
use crate::view::{self, JobView};

/// How often the page reloads itself, seconds.
const REFRESH_SECS: u32 = 5;
/// Runs shown on a job's page (and in its chart).
const JOB_PAGE_RUNS: usize = 100;

const SCRIPT: &str = include_str!("../assets/console.js");
const STYLE: &str = include_str!("../assets/console.css");

/// Escapes text for HTML content and attribute values. Control characters and the invisible
/// format characters of bidirectional and zero-width text are shown as `\u{..}`: from Redis,
/// they could reorder a key on the page or hide part of it.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if invisible(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// Characters a page must not pass through as they are: controls, and bidirectional and
/// zero-width format characters.
fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// Percent-encodes one path segment (a job name or key may hold `/`, `?`, `#`).
fn seg(text: &str) -> String {
    utf8_percent_encode(text, NON_ALPHANUMERIC).to_string()
}

/// Where the console is mounted (`""` at the root, `/admin` when nested there), from the
/// request: every link and request of the page is built on it.
pub(crate) struct Base(String);

impl<S: Send + Sync> FromRequestParts<S> for Base {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let inner = parts.uri.path();
        let full = parts.extensions.get::<OriginalUri>().map_or(inner, |o| o.0.path());
        let prefix =
            if inner == "/" { full.trim_end_matches('/') } else { full.strip_suffix(inner).unwrap_or("") };
        Ok(Base(prefix.to_owned()))
    }
}

impl Base {
    /// The console's root, escaped for an attribute: `/` or `/admin/`.
    fn root(&self) -> String {
        format!("{}/", esc(&self.0))
    }
}

/// The page around `body`: head, navigation, token box, status line.
fn layout(console: &Console, base: &Base, title: &str, active: &str, body: &str) -> Html<String> {
    let root = base.root();
    let mut nav = String::new();
    for (href, name) in [("", "Overview"), ("locks", "Locks"), ("jobs", "Jobs"), ("replicas", "Replicas")] {
        let class = if name == active { " class=\"active\"" } else { "" };
        let _ = write!(nav, "<a href=\"{root}{href}\"{class}>{name}</a>");
    }
    let actions = if console.actions_enabled() {
        "<label class=\"token\">Admin token <input type=\"password\" id=\"token\" autocomplete=\"off\" placeholder=\"for actions\"></label>"
            .to_owned()
    } else if console.inner.read_only {
        "<span class=\"mode\">read-only</span>".to_owned()
    } else {
        "<span class=\"mode\">actions disabled: no admin token configured</span>".to_owned()
    };
    Html(format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\">\
         <title>{title} · lock console</title>\
         <link rel=\"stylesheet\" href=\"{root}console.css\"><script src=\"{root}console.js\" defer></script></head>\
         <body data-root=\"{root}\"><header><strong>lock console</strong><nav>{nav}</nav>{actions}</header>\
         <p id=\"status\" role=\"status\"></p><main>{body}</main>\
         <footer>Refreshes every {REFRESH_SECS} s · read at {now}</footer></body></html>\n",
        title = esc(title),
        now = Utc::now().format("%H:%M:%S UTC"),
    ))
}

/// An error as a page (its status kept).
fn error_page(console: &Console, base: &Base, e: ApiError) -> Response {
    let body = format!("<h1>{}</h1><p class=\"error\">{}</p>", e.status, esc(&e.message));
    (e.status, layout(console, base, "Error", "", &body)).into_response()
}

/// A note saying what the shared snapshot left out when its budget ran out (empty when whole).
fn partial_note(snapshot: &Snapshot) -> String {
    if snapshot.partial.is_empty() {
        return String::new();
    }
    format!(
        "<p class=\"warn\" id=\"partial\">Partial view: reading {} took longer than the console's budget; \
         what is shown may be incomplete.</p>",
        snapshot.partial.join(", ")
    )
}

fn ms(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 10_000 { format!("{ms} ms") } else { format!("{:.1} s", d.as_secs_f64()) }
}

fn time(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(|| "–".into(), |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
}

fn outcome_class(outcome: &str) -> &'static str {
    match outcome {
        "ran" => "ok",
        o if view::is_failure(o) => "bad",
        "cancelled" | "missed" => "warn",
        _ => "skip",
    }
}

fn button(console: &Console, method: &str, url: &str, label: &str, confirm: Option<&str>) -> String {
    if !console.actions_enabled() {
        return String::new();
    }
    let confirm = confirm.map(|c| format!(" data-confirm=\"{}\"", esc(c))).unwrap_or_default();
    format!(
        "<button type=\"button\" data-method=\"{method}\" data-url=\"{}\"{confirm}>{label}</button>",
        esc(url)
    )
}

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

/// `GET /locks?pattern=...&limit=...`
pub(crate) async fn locks(State(console): State<Console>, base: Base, query: Params) -> Response {
    let read = async {
        let query = lock_query(&console, query)?;
        let (locks, complete) = view::locks(console.client(), &query, console.inner.budget.keys).await?;
        Ok::<_, ApiError>((query, locks, complete))
    };
    let (query, locks, complete) = match read.await {
        Ok(read) => read,
        Err(e) => return error_page(&console, &base, e),
    };
    let mut body = if complete {
        String::new()
    } else {
        "<p class=\"warn\" id=\"partial\">Partial list: the console's budget of keys to scan ran out before \
         the whole database was looked at, so more locks may match than are shown.</p>"
            .to_owned()
    };
    let _ = write!(
        body,
        "<h1>Locks</h1><form method=\"get\" action=\"{}locks\" class=\"filter\">\
         <input name=\"pattern\" value=\"{}\" aria-label=\"pattern\"> <input name=\"limit\" value=\"{}\" size=\"5\" aria-label=\"limit\"> \
         <button>Filter</button></form>",
        base.root(),
        esc(&query.pattern),
        query.limit
    );
    if locks.is_empty() {
        body.push_str("<p class=\"empty\">No held lock matches.</p>");
    } else {
        body.push_str(
            "<table id=\"locks\"><thead><tr><th>Key</th><th>Kind</th><th>Holders</th><th>Instance</th><th>TTL</th><th>Holder token</th><th></th></tr></thead><tbody>",
        );
        for lock in &locks {
            // A semaphore's permit or a reader is released by naming its token (the listing
            // shows one holder, so only a single hold has a button); a lock by its key.
            let by_token = !matches!(lock.kind, LockKind::Lock);
            let unlock = if lock.holders > 1 {
                String::new()
            } else {
                let token =
                    if by_token { format!("?token={}", seg(&lock.holder.token)) } else { String::new() };
                button(
                    &console,
                    "DELETE",
                    &format!("{}/api/locks/{}{token}", base.0, seg(&lock.key)),
                    "Unlock",
                    Some(&format!("Force-release {}? Its holder is not told and may still write.", lock.key)),
                )
            };
            let _ = write!(
                body,
                "<tr><td class=\"key\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"token\">{}</td><td>{unlock}</td></tr>",
                esc(&lock.key),
                crate::json::kind_name(lock.kind),
                lock.holders,
                esc(lock.holder.instance.as_deref().unwrap_or("?")),
                lock.ttl.map_or_else(|| "none".into(), ms),
                esc(&lock.holder.token),
            );
        }
        body.push_str("</tbody></table>");
    }
    layout(&console, &base, "Locks", "Locks", &body).into_response()
}

/// The job's pause-or-resume and run-now buttons; `prefix` is [`Base`]'s.
fn job_buttons(console: &Console, job: &JobView, prefix: &str) -> String {
    let url = |action: &str| format!("{prefix}/api/jobs/{}/{action}", seg(&job.name));
    let toggle = if job.paused.is_some() {
        button(console, "POST", &url("resume"), "Resume", None)
    } else {
        button(console, "POST", &url("pause"), "Pause", None)
    };
    let run = if job.group.is_some() {
        button(console, "POST", &url("run"), "Run now", None)
    } else {
        String::new()
    };
    format!("{toggle}{run}")
}

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
            "<table id=\"jobs\"><thead><tr><th>Job</th><th>Group</th><th>Schedule</th><th>Next slot</th><th>Paused</th>\
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
        body.push_str("</tbody></table>");
    }
    layout(&console, &base, "Jobs", "Jobs", &body).into_response()
}

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
        "<table id=\"history\"><thead><tr><th>Slot</th><th>Instance</th><th>Outcome</th><th>Duration</th><th>Error</th><th>Asked by</th></tr></thead><tbody>",
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
    body.push_str("</tbody></table>");
    layout(&console, &base, &format!("Job {}", job.name), "Jobs", &body).into_response()
}

/// A bar per run, oldest left: height its duration, colour its outcome.
fn chart(runs: &[HistoryEntry]) -> String {
    if runs.is_empty() {
        return "<p class=\"empty\">No runs recorded yet.</p>".into();
    }
    const WIDTH: usize = 600;
    const HEIGHT: f64 = 80.0;
    let bar = (WIDTH / runs.len().max(1)).clamp(2, 24);
    let longest = runs.iter().map(|r| r.duration.as_secs_f64()).fold(0.0, f64::max).max(0.001);
    let mut svg = format!(
        "<figure><svg id=\"chart\" role=\"img\" aria-label=\"run durations and outcomes\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\">"
    );
    for (i, run) in runs.iter().rev().enumerate() {
        let h = (run.duration.as_secs_f64() / longest * (HEIGHT - 4.0)).max(2.0);
        let _ = write!(
            svg,
            "<rect class=\"{}\" x=\"{}\" y=\"{:.1}\" width=\"{}\" height=\"{h:.1}\"><title>{} · {} · {}</title></rect>",
            outcome_class(&run.outcome),
            i * bar,
            HEIGHT - h,
            bar.saturating_sub(1).max(1),
            time(run.slot),
            esc(&run.outcome),
            ms(run.duration),
        );
    }
    let _ = write!(
        svg,
        "</svg><figcaption>Last {} runs, oldest left; longest {}.</figcaption></figure>",
        runs.len(),
        ms(Duration::from_secs_f64(longest))
    );
    svg
}

/// `GET /replicas`
pub(crate) async fn replicas(State(console): State<Console>, base: Base) -> Response {
    let snapshot = match console.inner.snapshot.get(&console).await {
        Ok(snapshot) => snapshot,
        Err(e) => return error_page(&console, &base, e),
    };
    let replicas = &snapshot.replicas;
    let mut body = partial_note(&snapshot);
    body.push_str("<h1>Replicas</h1>");
    if replicas.is_empty() {
        body.push_str("<p class=\"empty\">No scheduler replica is announced.</p>");
    } else {
        body.push_str(
            "<table id=\"replicas\"><thead><tr><th>Group</th><th>Instance</th><th>Live</th><th>Announcement lapses in</th></tr></thead><tbody>",
        );
        for r in replicas {
            let (class, live) = if r.is_live() { ("ok", "yes") } else { ("bad", "no (lapsed)") };
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td class=\"{class}\">{live}</td><td>{}</td></tr>",
                esc(&r.group),
                esc(&r.instance),
                ms(r.lapses_in),
            );
        }
        body.push_str("</tbody></table>");
    }
    layout(&console, &base, "Replicas", "Replicas", &body).into_response()
}

/// `GET /console.js`
pub(crate) async fn script() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], SCRIPT).into_response()
}

/// `GET /console.css`
pub(crate) async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

/// Any other path.
pub(crate) async fn not_found(base: Base) -> Response {
    // The link goes to the console's root under its mount prefix, not the site's root.
    let page = format!(
        "<!doctype html><title>Not found</title><p>Not found. <a href=\"{}\">Console</a></p>",
        base.root()
    );
    (StatusCode::NOT_FOUND, Html(page)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(esc("<script>alert(1)</script>"), "&lt;script&gt;alert(1)&lt;/script&gt;");
        assert_eq!(esc("a\"b'c&d"), "a&quot;b&#39;c&amp;d");
        assert_eq!(seg("a/b c?#"), "a%2Fb%20c%3F%23");
        assert_eq!(esc("key\u{202e}gpj.exe"), "key\\u{202e}gpj.exe", "bidi controls are made visible");
        assert_eq!(esc("a\u{200b}b\u{1b}[2J"), "a\\u{200b}b\\u{1b}[2J");
        assert_eq!(esc("é ✓"), "é ✓");
    }
}
