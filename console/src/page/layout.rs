//! What every page shares: where the console is mounted ([`Base`]), the frame around a page's
//! body (head, navigation, token box, status line, footer), an error as a page, and the note
//! saying what the shared snapshot left out.

use std::fmt::Write as _;

use axum::extract::{FromRequestParts, OriginalUri};
use axum::http::request::Parts;
use axum::response::{Html, IntoResponse, Response};
use chrono::Utc;

use crate::Console;
use crate::error::ApiError;
use crate::page::text::esc;
use crate::snapshot::Snapshot;

/// How often the page's script fetches the page anew in the background, seconds.
pub(crate) const REFRESH_SECS: u32 = 5;

/// Where the console is mounted (`""` at the root, `/admin` when nested there), from the
/// request: every link and request of the page is built on it.
pub(crate) struct Base(pub(crate) String);

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
    pub(crate) fn root(&self) -> String {
        format!("{}/", esc(&self.0))
    }
}

/// The page around `body`: head, navigation, token box, status line.
pub(crate) fn layout(console: &Console, base: &Base, title: &str, active: &str, body: &str) -> Html<String> {
    let root = base.root();
    let mut nav = String::new();
    for (href, name) in [
        ("", "Overview"),
        ("locks", "Locks"),
        ("jobs", "Jobs"),
        ("replicas", "Replicas"),
        ("elections", "Elections"),
    ] {
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
         <dialog id=\"confirm\" aria-labelledby=\"confirm-question\"><p id=\"confirm-question\"></p>\
         <p class=\"choices\"><button type=\"button\" class=\"cancel\" value=\"cancel\">Cancel</button> \
         <button type=\"button\" class=\"confirm\" value=\"confirm\">Confirm</button></p></dialog>\
         <footer>Updates every {REFRESH_SECS} s in the background (paused while you type or select text) · read at <span id=\"read-at\">{now}</span></footer></body></html>\n",
        refresh_ms = REFRESH_SECS * 1000,
        title = esc(title),
        now = Utc::now().format("%H:%M:%S UTC"),
    ))
}

/// An error as a page (its status kept).
pub(crate) fn error_page(console: &Console, base: &Base, e: ApiError) -> Response {
    let body = format!("<h1>{}</h1><p class=\"error\">{}</p>", e.status, esc(&e.message));
    (e.status, layout(console, base, "Error", "", &body)).into_response()
}

/// A note saying what the shared snapshot left out when its budget ran out (empty when whole).
pub(crate) fn partial_note(snapshot: &Snapshot) -> String {
    if snapshot.partial.is_empty() {
        return String::new();
    }
    let missing = if snapshot.missing_jobs.is_empty() {
        String::new()
    } else {
        format!(
            " The state of {} job(s) was not read in time (listed without it): {}.",
            snapshot.missing_jobs.len(),
            esc(&snapshot.missing_jobs.join(", "))
        )
    };
    format!(
        "<p class=\"warn\" id=\"partial\">Partial view: the console's read budget (its time, or the \
         holds it may check) ran out while reading {}; what is shown is what was read.{missing}</p>",
        snapshot.partial.join(", ")
    )
}
