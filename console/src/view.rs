//! What the pages and the API show, read from Redis once per request: the jobs with their
//! schedules, pause flags and last runs; the locks a pattern matches; the validated query
//! parameters both take.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use lock_core::LockClient;
use lock_core::inspect::LockSummary;
use lock_scheduler::Schedule;
use lock_scheduler::control::{self, HistoryEntry};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::json;

/// Most locks one listing returns.
pub(crate) const MAX_LIMIT: usize = 1000;
/// Locks listed when no limit is given.
pub(crate) const DEFAULT_LIMIT: usize = 100;
/// Most history entries one request returns (the history keeps about as many).
pub(crate) const MAX_HISTORY: usize = lock_scheduler::HISTORY_LEN;
/// History entries returned when no `n` is given.
pub(crate) const DEFAULT_HISTORY: usize = 100;
/// Longest accepted pattern or key, in bytes.
const MAX_INPUT_LEN: usize = 1024;

/// A job as the console shows it.
pub(crate) struct JobView {
    pub(crate) name: String,
    /// `None`: no running group registers it (it has a history or a pause flag only).
    pub(crate) group: Option<String>,
    pub(crate) cron: Option<String>,
    pub(crate) time_zone: Option<String>,
    /// Where the schedule in force came from: `code`, `config` or `env <VARIABLE>`.
    pub(crate) origin: Option<String>,
    pub(crate) next_slot: Option<DateTime<Utc>>,
    /// Who paused it and when, if it is paused.
    pub(crate) paused: Option<String>,
    pub(crate) last: Option<HistoryEntry>,
    /// Failed and timed-out runs recorded in the last 24 hours.
    pub(crate) failures_24h: usize,
    /// Its soonest retry of a failed run waiting in Redis, if any.
    pub(crate) next_retry: Option<control::PendingRetry>,
}

impl JobView {
    pub(crate) fn to_json(&self) -> Value {
        let last = self.last.as_ref();
        json!({
            "name": self.name,
            "group": self.group,
            "schedule": self.cron,
            "time_zone": self.time_zone,
            "schedule_origin": self.origin,
            "next_slot": self.next_slot.map(|t| t.to_rfc3339()),
            "paused": self.paused.is_some(),
            "paused_info": self.paused,
            "last_slot": last.and_then(|e| e.slot).map(|t| t.to_rfc3339()),
            "last_outcome": last.map(|e| e.outcome.as_str()),
            "last_duration_ms": last.map(|e| e.duration.as_millis() as u64),
            "last_instance": last.map(|e| e.instance.as_str()),
            "last_run": last.map(json::history_entry),
            "failures_24h": self.failures_24h,
            "next_retry": self.next_retry.as_ref().map(json::pending_retry),
        })
    }

    pub(crate) fn failing(&self) -> bool {
        self.last.as_ref().is_some_and(|e| is_failure(&e.outcome))
    }
}

/// Whether a recorded outcome counts as a failure.
pub(crate) fn is_failure(outcome: &str) -> bool {
    matches!(outcome, "failed" | "timed out")
}

/// Every job the scheduler groups register, and those seen only in Redis's histories and
/// pause flags, sorted by name, with the state read before `deadline` (all jobs' reads
/// pipelined: see [`control::job_summaries`]); and the names of the jobs whose state was not
/// read in time (listed, without their state).
pub(crate) async fn jobs(
    client: &LockClient,
    deadline: tokio::time::Instant,
) -> Result<(Vec<JobView>, Vec<String>), ApiError> {
    let mut by_name: BTreeMap<String, JobView> = BTreeMap::new();
    for job in control::registered_jobs(client).await? {
        by_name.entry(job.name.clone()).or_insert_with(|| registered(job));
    }
    let summaries = control::job_summaries(client, deadline).await?;
    for summary in summaries.jobs {
        let view = by_name.entry(summary.job.clone()).or_insert_with(|| unregistered(summary.job));
        view.paused = summary.paused;
        view.failures_24h = usize::try_from(summary.failures_last_day).unwrap_or(usize::MAX);
        view.last = summary.last;
    }
    for name in &summaries.missing {
        by_name.entry(name.clone()).or_insert_with(|| unregistered(name.clone()));
    }
    // Soonest first: the first one seen per job is its next.
    for retry in control::all_pending_retries(client).await? {
        if let Some(view) = by_name.get_mut(&retry.job) {
            view.next_retry.get_or_insert(retry);
        }
    }
    Ok((by_name.into_values().collect(), summaries.missing))
}

/// A job a scheduler group registers, before its state is read.
fn registered(job: lock_scheduler::control::RegisteredJob) -> JobView {
    let next_slot = Schedule::new(&job.cron, Some(&job.time_zone))
        .ok()
        .and_then(|s| s.next_after(Utc::now()))
        .map(|t| t.with_timezone(&Utc));
    JobView {
        name: job.name,
        group: Some(job.group),
        cron: Some(job.cron),
        time_zone: Some(job.time_zone),
        origin: Some(job.origin.to_string()),
        next_slot,
        paused: None,
        last: None,
        failures_24h: 0,
        next_retry: None,
    }
}

/// A job seen only by its history or pause flag.
fn unregistered(name: String) -> JobView {
    JobView {
        name,
        group: None,
        cron: None,
        time_zone: None,
        origin: None,
        next_slot: None,
        paused: None,
        last: None,
        failures_24h: 0,
        next_retry: None,
    }
}

/// Reads a job's pause flag, last run and failures of about the last day: three small reads,
/// whatever the length of its history (the failures are counters written with the history).
async fn fill(client: &LockClient, view: &mut JobView) -> Result<(), ApiError> {
    view.paused = control::pause_state(client, &view.name).await?.paused;
    view.failures_24h =
        usize::try_from(control::failures_last_day(client, &view.name).await?).unwrap_or(usize::MAX);
    view.last = control::history(client, &view.name, 1).await?.into_iter().next();
    Ok(())
}

/// The job named `name`, or 404 `unknown_job` (400 for a name no job can have). Reads that
/// job's state only.
pub(crate) async fn job(client: &LockClient, name: &str) -> Result<JobView, ApiError> {
    if let Some(problem) = lock_scheduler::schema::job_name_problem(name) {
        return Err(ApiError::bad_request("invalid_job", format!("invalid job name: {problem}")));
    }
    let mut view = match control::registered_jobs(client).await?.into_iter().find(|j| j.name == name) {
        Some(job) => registered(job),
        // Its own keys, not the job index: one command, and exact for any history.
        None if control::has_history_or_pause_flag(client, name).await? => unregistered(name.to_owned()),
        None => return Err(unknown_job(name)),
    };
    fill(client, &mut view).await?;
    view.next_retry = control::pending_retries(client, name).await?.into_iter().next();
    Ok(view)
}

pub(crate) fn unknown_job(name: &str) -> ApiError {
    ApiError::not_found(
        "unknown_job",
        format!("no job `{name}`: no running scheduler registers it and it has no history or pause flag"),
    )
}

/// A validated `pattern` and `limit` for listing locks.
pub(crate) struct LockQuery {
    pub(crate) pattern: String,
    pub(crate) limit: usize,
}

impl LockQuery {
    /// Checks the caller's `pattern` (or `default`) and `limit`. A pattern with no literal
    /// prefix (`*`, `?x`, `[ab]*`) matches every lock's name: it needs an explicit
    /// `limit`. Limits run from 1 to [`MAX_LIMIT`].
    pub(crate) fn parse(
        pattern: Option<&str>,
        limit: Option<&str>,
        default: &str,
    ) -> Result<LockQuery, ApiError> {
        let given = pattern.filter(|p| !p.is_empty());
        let pattern = given.unwrap_or(default);
        check_text("pattern", pattern)?;
        let limit = match limit {
            None => None,
            Some(text) => match text.parse::<usize>() {
                Ok(n @ 1..=MAX_LIMIT) => Some(n),
                _ => {
                    return Err(ApiError::bad_request(
                        "invalid_limit",
                        format!("limit must be a whole number from 1 to {MAX_LIMIT}, not `{text}`"),
                    ));
                }
            },
        };
        let unbounded = pattern.starts_with(['*', '?', '[']);
        if unbounded && limit.is_none() && given.is_some() {
            return Err(ApiError::bad_request(
                "unbounded_pattern",
                format!(
                    "pattern `{pattern}` has no literal prefix, so it matches every lock: give a prefix (e.g. lock:*) or an explicit limit (at most {MAX_LIMIT})"
                ),
            ));
        }
        Ok(LockQuery { pattern: pattern.to_owned(), limit: limit.unwrap_or(DEFAULT_LIMIT) })
    }
}

/// The held locks `query` matches, checking at most `scan_budget` recorded holds, and
/// whether every one was checked.
pub(crate) async fn locks(
    client: &LockClient,
    query: &LockQuery,
    scan_budget: usize,
) -> Result<(Vec<LockSummary>, bool), ApiError> {
    let listing = client.list_locks_within(&query.pattern, query.limit, scan_budget).await?;
    Ok((listing.locks, listing.complete))
}

/// Refuses an empty, overlong or control-character-holding `what` (a key or pattern).
pub(crate) fn check_text(what: &str, text: &str) -> Result<(), ApiError> {
    if text.is_empty() {
        return Err(ApiError::bad_request("invalid_input", format!("the {what} is empty")));
    }
    if text.len() > MAX_INPUT_LEN {
        return Err(ApiError::bad_request(
            "invalid_input",
            format!("the {what} is longer than {MAX_INPUT_LEN} bytes"),
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(ApiError::bad_request(
            "invalid_input",
            format!("the {what} contains control characters"),
        ));
    }
    Ok(())
}

/// A validated history length `n` (1 to [`MAX_HISTORY`], default [`DEFAULT_HISTORY`]).
pub(crate) fn history_len(n: Option<&str>) -> Result<usize, ApiError> {
    match n {
        None => Ok(DEFAULT_HISTORY),
        Some(text) => match text.parse::<usize>() {
            Ok(n @ 1..=MAX_HISTORY) => Ok(n),
            _ => Err(ApiError::bad_request(
                "invalid_n",
                format!("n must be a whole number from 1 to {MAX_HISTORY}, not `{text}`"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_and_limits_are_checked() {
        let ok = LockQuery::parse(Some("lock:*"), None, "*").ok().map(|q| (q.pattern, q.limit));
        assert_eq!(ok, Some(("lock:*".into(), DEFAULT_LIMIT)));
        assert_eq!(LockQuery::parse(Some("*"), None, "*").err().map(|e| e.code), Some("unbounded_pattern"));
        assert!(LockQuery::parse(Some("*"), Some("50"), "*").is_ok(), "an explicit limit bounds it");
        assert!(LockQuery::parse(None, None, "*").is_ok(), "the console's own default is bounded");
        for limit in ["0", "1001", "-1", "x", "99999999999999999999999"] {
            assert_eq!(
                LockQuery::parse(Some("lock:*"), Some(limit), "*").err().map(|e| e.code),
                Some("invalid_limit"),
                "{limit}"
            );
        }
        assert_eq!(LockQuery::parse(Some("a\nb"), None, "*").err().map(|e| e.code), Some("invalid_input"));
        assert_eq!(history_len(Some("1000000")).err().map(|e| e.code), Some("invalid_n"));
        assert_eq!(history_len(None).ok(), Some(DEFAULT_HISTORY));
    }

    /// Glob-ish text: pattern characters, key characters, control characters, non-ASCII.
    fn pattern_like() -> impl proptest::strategy::Strategy<Value = String> {
        proptest::string::string_regex("[*?\\[\\]^a-z:{}\\-\\\\é\n\t\u{0}]{0,40}").expect("a valid regex")
    }

    fn limit_like() -> impl proptest::strategy::Strategy<Value = Option<String>> {
        proptest::option::of(
            proptest::string::string_regex("-?[0-9]{0,22}|[a-z ]{0,3}").expect("a valid regex"),
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config { cases: 512, ..Default::default() })]

        /// Whatever the pattern and limit (the console's query and `lockctl serve`'s
        /// `--lock-pattern` share this parser): no panic, the same answer in the same words for
        /// the same input, and an accepted query is exactly the pattern given (or the default
        /// when empty) with a limit in range, while a refusal names its rule.
        #[test]
        fn a_lock_query_is_judged_by_its_rules(pattern in pattern_like(), limit in limit_like()) {
            let parse = || LockQuery::parse(Some(&pattern), limit.as_deref(), "lock:*");
            let (first, second) = (parse(), parse());
            match (&first, &second) {
                (Ok(a), Ok(b)) => {
                    proptest::prop_assert_eq!((&a.pattern, a.limit), (&b.pattern, b.limit));
                    let expected = if pattern.is_empty() { "lock:*" } else { pattern.as_str() };
                    proptest::prop_assert_eq!(a.pattern.as_str(), expected);
                    proptest::prop_assert!((1..=MAX_LIMIT).contains(&a.limit));
                    proptest::prop_assert!(!a.pattern.chars().any(char::is_control));
                }
                (Err(a), Err(b)) => {
                    proptest::prop_assert_eq!((a.code, &a.message), (b.code, &b.message));
                    let control = pattern.chars().any(char::is_control);
                    let bad_limit = limit.as_deref().is_some_and(|l| !matches!(l.parse::<usize>(), Ok(1..=MAX_LIMIT)));
                    let unbounded = !pattern.is_empty() && pattern.starts_with(['*', '?', '[']) && limit.is_none();
                    let why = match a.code {
                        "invalid_input" => control,
                        "invalid_limit" => bad_limit && a.message.contains(limit.as_deref().unwrap_or("")),
                        "unbounded_pattern" => unbounded,
                        _ => false,
                    };
                    proptest::prop_assert!(why, "{}: {}", a.code, a.message);
                }
                _ => proptest::prop_assert!(false, "two answers for one input"),
            }
        }
    }
}
