//! The web page: server-rendered HTML (no build step, no Node), one small script for the
//! action buttons, the token box and the background updates (it fetches the page it shows and
//! swaps in the new `<main>`, so the HTML rendered here is the only markup the page ever
//! shows), one stylesheet. Every value from Redis goes through [`esc`]; links into the
//! console are relative, so the router can be mounted anywhere.

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

/// How often the page's script fetches the page anew in the background, seconds.
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
         <title>{title} · lock console</title>\
         <link rel=\"stylesheet\" href=\"{root}console.css\"><script src=\"{root}console.js\" defer></script></head>\
         <body data-root=\"{root}\" data-refresh-ms=\"{refresh_ms}\"><header><strong>lock console</strong><nav>{nav}</nav>{actions}</header>\
         <p id=\"status\" role=\"status\"></p><p id=\"stale\" class=\"stale\" role=\"alert\" hidden></p><main>{body}</main>\
         <footer>Updates every {REFRESH_SECS} s in the background (paused while you type) · read at <span id=\"read-at\">{now}</span></footer></body></html>\n",
        refresh_ms = REFRESH_SECS * 1000,
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
        "<p class=\"warn\" id=\"partial\">Partial view: the console's read budget (its time, or the keys \
         it may scan) ran out while reading {}; what is shown may be incomplete.</p>",
        snapshot.partial.join(", ")
    )
}

fn ms(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 10_000 { format!("{ms} ms") } else { format!("{:.1} s", d.as_secs_f64()) }
}

/// How long ago `since` was, coarsely: `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h`.
fn uptime(since: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let s = (now - since).num_seconds().max(0);
    let (d, h, m) = (s / 86_400, s / 3_600 % 24, s / 60 % 60);
    match s {
        0..60 => format!("{s} s"),
        60..3_600 => format!("{m} min"),
        3_600..86_400 => format!("{h} h {m} min"),
        _ => format!("{d} d {h} h"),
    }
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

/// What an action button does, for the script's sentence about its result: the kind of
/// action and the job or key it acts on.
struct Action<'a> {
    kind: &'static str,
    name: &'a str,
}

fn button(
    console: &Console,
    method: &str,
    url: &str,
    label: &str,
    action: Action<'_>,
    confirm: Option<&str>,
) -> String {
    if !console.actions_enabled() {
        return String::new();
    }
    let confirm = confirm.map(|c| format!(" data-confirm=\"{}\"", esc(c))).unwrap_or_default();
    format!(
        "<button type=\"button\" data-method=\"{method}\" data-url=\"{}\" data-action=\"{}\" data-name=\"{}\"{confirm}>{label}</button>",
        esc(url),
        action.kind,
        esc(action.name),
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
            "<div class=\"scroll\"><table id=\"locks\"><thead><tr><th>Key</th><th>Kind</th><th>Holders</th><th>Instance</th><th>TTL</th><th>Holder token</th><th></th></tr></thead><tbody>",
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
                    Action { kind: "unlock", name: &lock.key },
                    Some(&format!("Force-release {}? Its holder is not told and may still write.", lock.key)),
                )
            };
            let _ = write!(
                body,
                "<tr><td class=\"key\"><a href=\"{}locks/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"token\">{}</td><td>{unlock}</td></tr>",
                base.root(),
                seg(&lock.key),
                esc(&lock.key),
                crate::json::kind_name(lock.kind),
                lock.holders,
                esc(lock.holder.instance.as_deref().unwrap_or("?")),
                lock.ttl.map_or_else(|| "none".into(), ms),
                esc(&lock.holder.token),
            );
        }
        body.push_str("</tbody></table></div>");
    }
    layout(&console, &base, "Locks", "Locks", &body).into_response()
}

/// `GET /locks/{key}`: one lock in full, as `GET /api/locks/{key}` reads it: each holder (a
/// semaphore's permits, a read-write lock's writer and readers) with its liveness, the
/// waiters, the fence and the hand-offs; an Unlock button per holder.
pub(crate) async fn lock(State(console): State<Console>, base: Base, key: Segment) -> Response {
    let read = async {
        let key = segment(key)?;
        view::check_text("key", &key)?;
        Ok::<_, ApiError>(console.client().inspect(&key).await?)
    };
    let info = match read.await {
        Ok(info) => info,
        Err(e) => return error_page(&console, &base, e),
    };
    let kind = crate::json::kind_name(info.kind);
    let permits = match info.kind {
        LockKind::Semaphore { permits: Some(permits) } => format!(" of {permits} permits"),
        _ => String::new(),
    };
    let mut body = format!(
        "<h1>Lock <span id=\"lock-key\" class=\"key\">{}</span></h1><dl>\
         <dt>Kind</dt><dd id=\"lock-kind\">{kind}</dd><dt>Held</dt><dd id=\"lock-held\">{}</dd>\
         <dt>TTL</dt><dd>{}</dd><dt>Fence</dt><dd id=\"lock-fence\">{}</dd><dt>Last tick claimed</dt><dd>{}</dd>\
         <dt>Waiters</dt><dd>{} ({} live)</dd></dl>",
        esc(&info.key),
        if info.is_held() {
            format!("yes, {} holder(s){permits}", info.holder.iter().count() + info.holders.len())
        } else {
            "no".into()
        },
        info.ttl.map_or_else(|| "none".into(), ms),
        info.fence.map_or_else(|| "–".into(), |f| f.to_string()),
        info.last_tick
            .and_then(DateTime::from_timestamp_millis)
            .map_or_else(|| "–".into(), |t| time(Some(t))),
        info.waiters.len(),
        info.live_waiters(),
    );
    // The lock's holder is released by its key; a permit, a reader or a writer of a
    // read-write lock by naming its token, so each row has its own button.
    let by_token = !matches!(info.kind, LockKind::Lock);
    let role = |writer: bool| match info.kind {
        LockKind::Lock => "holder",
        LockKind::Semaphore { .. } => "permit",
        _ if writer => "writer",
        _ => "reader",
    };
    let rows: Vec<(&str, &lock_core::inspect::Holder)> = info
        .holder
        .iter()
        .map(|h| (role(true), h))
        .chain(info.holders.iter().map(|h| (role(false), h)))
        .collect();
    body.push_str("<h2>Holders</h2>");
    if rows.is_empty() {
        body.push_str("<p class=\"empty\">Nobody holds it.</p>");
    } else {
        body.push_str(
            "<div class=\"scroll\"><table id=\"holders\"><thead><tr><th>Role</th><th>Instance</th><th>Alive</th><th>Expires in</th>\
             <th>Liveness key</th><th>Token</th><th></th></tr></thead><tbody>",
        );
        for (role, holder) in rows {
            let query = if by_token { format!("?token={}", seg(&holder.token)) } else { String::new() };
            let unlock = button(
                &console,
                "DELETE",
                &format!("{}/api/locks/{}{query}", base.0, seg(&info.key)),
                "Unlock",
                Action { kind: "unlock", name: &info.key },
                Some(&format!(
                    "Force-release this {role} of {}? It is not told and may still write.",
                    info.key
                )),
            );
            let (class, alive) = match (holder.released, holder.alive) {
                (true, _) => ("warn", "released"),
                (false, Some(true)) => ("ok", "yes"),
                (false, Some(false)) => ("bad", "no (liveness lapsed)"),
                (false, None) => ("skip", "unknown"),
            };
            let _ = write!(
                body,
                "<tr><td>{role}</td><td>{}</td><td class=\"{class}\">{alive}</td><td>{}</td><td class=\"key\">{}</td>\
                 <td class=\"token\">{}</td><td>{unlock}</td></tr>",
                esc(holder.instance.as_deref().unwrap_or("?")),
                holder.expires_in.map_or_else(|| "–".into(), ms),
                esc(holder.liveness_key.as_deref().unwrap_or("–")),
                esc(&holder.token),
            );
        }
        body.push_str("</tbody></table></div>");
    }
    body.push_str("<h2>Waiters</h2>");
    if info.waiters.is_empty() {
        body.push_str("<p class=\"empty\">Nobody is queued.</p>");
    } else {
        body.push_str(
            "<div class=\"scroll\"><table id=\"waiters\"><thead><tr><th>#</th><th>Token</th><th>Live</th><th>Ticket lapses in</th></tr></thead><tbody>",
        );
        for (i, waiter) in info.waiters.iter().enumerate() {
            let _ = write!(
                body,
                "<tr><td>{}</td><td class=\"token\">{}</td><td class=\"{}\">{}</td><td>{}</td></tr>",
                i + 1,
                esc(&waiter.token),
                if waiter.live { "ok" } else { "bad" },
                if waiter.live { "yes" } else { "no (lapsed)" },
                waiter.ticket_remaining.map_or_else(|| "–".into(), ms),
            );
        }
        body.push_str("</tbody></table></div>");
    }
    if !info.handoffs.is_empty() {
        body.push_str("<h2>Hand-offs</h2><ul id=\"handoffs\">");
        for handoff in &info.handoffs {
            let _ = write!(
                body,
                "<li><span class=\"key\">{}</span>{}</li>",
                esc(&handoff.client_id),
                if handoff.lapsed { " (lapsed)" } else { "" }
            );
        }
        body.push_str("</ul>");
    }
    layout(&console, &base, &format!("Lock {}", info.key), "Locks", &body).into_response()
}

/// The job's pause-or-resume and run-now buttons; `prefix` is [`Base`]'s.
fn job_buttons(console: &Console, job: &JobView, prefix: &str) -> String {
    let url = |action: &str| format!("{prefix}/api/jobs/{}/{action}", seg(&job.name));
    let toggle = if job.paused.is_some() {
        button(console, "POST", &url("resume"), "Resume", Action { kind: "resume", name: &job.name }, None)
    } else {
        button(console, "POST", &url("pause"), "Pause", Action { kind: "pause", name: &job.name }, None)
    };
    let run = if job.group.is_some() {
        button(console, "POST", &url("run"), "Run now", Action { kind: "run", name: &job.name }, None)
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

/// A bar per run, oldest left: height its duration, colour its outcome; a duration axis with
/// three ticks, a time axis with the slots of the oldest, middle and newest runs, and a legend
/// of the outcomes shown. Bars are evenly spaced (one per run, not to a time scale): runs are
/// often seconds apart and then hours, and every run must stay visible.
fn chart(runs: &[HistoryEntry]) -> String {
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
