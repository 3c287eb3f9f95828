//! The action buttons: what each does (method, URL, the sentence the script writes about its
//! result, the question it asks before acting), shown only when actions are enabled. The
//! script asks the question in the page's own dialog; nothing is sent until it is confirmed.

use crate::Console;
use crate::page::text::{esc, seg};
use crate::view::JobView;

/// What an action button does, for the script's sentence about its result: the kind of
/// action and the job or key it acts on.
pub(crate) struct Effect<'a> {
    pub(crate) kind: &'static str,
    pub(crate) name: &'a str,
}

/// A button's extras beyond its request.
#[derive(Default)]
pub(crate) struct Extras<'a> {
    /// The question asked (and confirmed) before the request is sent.
    pub(crate) confirm: Option<&'a str>,
    /// Each press carries a new `Idempotency-Key`: the same press sent twice acts once.
    pub(crate) idempotent: bool,
    /// The form (its id) whose fields are added to the URL's query when pressed.
    pub(crate) form: Option<&'static str>,
}

pub(crate) fn button(
    console: &Console,
    method: &str,
    url: &str,
    label: &str,
    effect: Effect<'_>,
    confirm: Option<&str>,
) -> String {
    button_with(console, method, url, label, effect, Extras { confirm, ..Extras::default() })
}

pub(crate) fn button_with(
    console: &Console,
    method: &str,
    url: &str,
    label: &str,
    effect: Effect<'_>,
    extras: Extras<'_>,
) -> String {
    if !console.actions_enabled() {
        return String::new();
    }
    let confirm = extras.confirm.map(|c| format!(" data-confirm=\"{}\"", esc(c))).unwrap_or_default();
    let idempotent = if extras.idempotent { " data-idempotent=\"yes\"" } else { "" };
    let form = extras.form.map(|f| format!(" data-form=\"{f}\"")).unwrap_or_default();
    format!(
        "<button type=\"button\" data-method=\"{method}\" data-url=\"{}\" data-action=\"{}\" data-name=\"{}\"{confirm}{idempotent}{form}>{label}</button>",
        esc(url),
        effect.kind,
        esc(effect.name),
    )
}

/// The job's pause-or-resume and run-now buttons; `prefix` is [`Base`](crate::page::layout::Base)'s.
/// Pause and Run now ask first; Run now acts once per press.
pub(crate) fn job_buttons(console: &Console, job: &JobView, prefix: &str) -> String {
    let url = |action: &str| format!("{prefix}/api/jobs/{}/{action}", seg(&job.name));
    let name = job.name.as_str();
    let toggle = if job.paused.is_some() {
        button(console, "POST", &url("resume"), "Resume", Effect { kind: "resume", name }, None)
    } else {
        let question = format!("Pause {name}? Every replica skips its slots until it is resumed.");
        button(console, "POST", &url("pause"), "Pause", Effect { kind: "pause", name }, Some(&question))
    };
    let run = if job.group.is_some() {
        let question = format!("Run {name} now, once, on one live replica?");
        let extras = Extras { confirm: Some(&question), idempotent: true, form: None };
        button_with(console, "POST", &url("run"), "Run now", Effect { kind: "run", name }, extras)
    } else {
        String::new()
    };
    format!("{toggle}{run}")
}
