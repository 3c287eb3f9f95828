//! The action buttons: what each does (method, URL, the sentence the script writes about its
//! result, a confirmation), shown only when actions are enabled.

use crate::Console;
use crate::page::text::{esc, seg};
use crate::view::JobView;

/// What an action button does, for the script's sentence about its result: the kind of
/// action and the job or key it acts on.
pub(crate) struct Action<'a> {
    pub(crate) kind: &'static str,
    pub(crate) name: &'a str,
}

pub(crate) fn button(
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

/// The job's pause-or-resume and run-now buttons; `prefix` is [`Base`]'s.
pub(crate) fn job_buttons(console: &Console, job: &JobView, prefix: &str) -> String {
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
