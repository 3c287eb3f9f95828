//! Searching a job's history: which runs (an outcome, words in the error, instance or
//! requester), how many, from where (before an entry's id), read page by page from Redis within
//! a bound of entries per request.

use std::collections::HashMap;

use lock_core::LockClient;
use lock_scheduler::control::{self, HistoryEntry};

use crate::error::ApiError;
use crate::view;

/// Entries read from Redis per round trip while filtering.
const CHUNK: usize = 250;
/// Most entries one filtered request examines: past it the answer says where to go on
/// (`next_before`) rather than reading the whole history at once.
pub(crate) const SCAN_LIMIT: usize = 1000;
/// Longest search text, in characters.
const MAX_TEXT: usize = 200;

/// Which outcomes a search keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Every run.
    Any,
    /// `ran`.
    Succeeded,
    /// `failed` and `timed out`.
    Failed,
    /// `skipped: ...`.
    Skipped,
    /// The rest: missed, cancelled, replaced.
    Other,
}

impl Outcome {
    /// The values of the `outcome` parameter, as the page's filter lists them.
    pub(crate) const ALL: [(&'static str, Outcome); 5] = [
        ("any", Outcome::Any),
        ("succeeded", Outcome::Succeeded),
        ("failed", Outcome::Failed),
        ("skipped", Outcome::Skipped),
        ("other", Outcome::Other),
    ];

    pub(crate) fn name(self) -> &'static str {
        Outcome::ALL.iter().find(|(_, o)| *o == self).map_or("any", |(name, _)| name)
    }

    /// Whether a recorded outcome is of this kind.
    pub(crate) fn keeps(self, outcome: &str) -> bool {
        match self {
            Outcome::Any => true,
            Outcome::Succeeded => outcome == "ran",
            Outcome::Failed => view::is_failure(outcome),
            Outcome::Skipped => outcome.starts_with("skipped"),
            Outcome::Other => {
                outcome != "ran" && !view::is_failure(outcome) && !outcome.starts_with("skipped")
            }
        }
    }
}

/// A validated search of a job's history.
#[derive(Debug, Clone)]
pub(crate) struct HistoryQuery {
    pub(crate) n: usize,
    /// Runs recorded before this entry (its id); `None`: from the newest.
    pub(crate) before: Option<String>,
    pub(crate) outcome: Outcome,
    /// Words the run's error, instance, requester, request or outcome holds (any case).
    pub(crate) text: Option<String>,
}

impl HistoryQuery {
    /// From the query string's `n`, `before`, `outcome` and `q`.
    pub(crate) fn parse(params: &HashMap<String, String>) -> Result<Self, ApiError> {
        let n = view::history_len(params.get("n").map(String::as_str))?;
        let before = params.get("before").filter(|b| !b.is_empty()).cloned();
        if let Some(before) = &before {
            check_id(before)?;
        }
        let outcome = match params.get("outcome").map(String::as_str).filter(|o| !o.is_empty()) {
            None => Outcome::Any,
            Some(name) => {
                Outcome::ALL.iter().find(|(n, _)| *n == name).map(|(_, o)| *o).ok_or_else(|| {
                    ApiError::bad_request(
                        "invalid_outcome",
                        format!(
                            "outcome must be one of any, succeeded, failed, skipped, other; not `{name}`"
                        ),
                    )
                })?
            }
        };
        let text = params.get("q").map(|q| q.trim()).filter(|q| !q.is_empty()).map(str::to_owned);
        if let Some(text) = &text
            && (text.chars().count() > MAX_TEXT || text.chars().any(char::is_control))
        {
            return Err(ApiError::bad_request(
                "invalid_input",
                format!("the search text must be at most {MAX_TEXT} characters, without control characters"),
            ));
        }
        Ok(HistoryQuery { n, before, outcome, text })
    }

    fn filtering(&self) -> bool {
        self.outcome != Outcome::Any || self.text.is_some()
    }

    /// Whether `run` is one this search keeps.
    pub(crate) fn keeps(&self, run: &HistoryEntry) -> bool {
        if !self.outcome.keeps(&run.outcome) {
            return false;
        }
        let Some(text) = &self.text else { return true };
        let text = text.to_lowercase();
        [
            Some(&run.outcome),
            run.error.as_ref(),
            Some(&run.instance),
            run.manual_by.as_ref(),
            run.request.as_ref(),
        ]
        .into_iter()
        .flatten()
        .any(|field| field.to_lowercase().contains(&text))
    }
}

/// Refuses an entry id that is not `<ms>-<seq>`, as the page's links carry it.
pub(crate) fn check_id(id: &str) -> Result<(), ApiError> {
    let number =
        |part: &str| !part.is_empty() && part.len() <= 20 && part.bytes().all(|b| b.is_ascii_digit());
    match id.split_once('-') {
        Some((ms, seq)) if number(ms) && number(seq) => Ok(()),
        _ => Err(ApiError::bad_request(
            "invalid_id",
            format!(
                "a run's id is `<ms>-<seq>` (e.g. 1764590400000-0), not {:?}",
                id.chars().take(48).collect::<String>()
            ),
        )),
    }
}

/// A history entry id (`<ms>-<seq>`) as numbers, to order entries (`(0, 0)` for one that is
/// not an id).
pub(crate) fn id_order(id: &str) -> (u64, u64) {
    id.split_once('-').and_then(|(ms, seq)| Some((ms.parse().ok()?, seq.parse().ok()?))).unwrap_or((0, 0))
}

/// One page of a search.
pub(crate) struct HistoryPage {
    /// The runs found, newest first, at most the query's `n`.
    pub(crate) runs: Vec<HistoryEntry>,
    /// Where the next page starts (`before=`), if the history may hold more.
    pub(crate) next_before: Option<String>,
    /// History entries examined.
    pub(crate) scanned: usize,
    /// The examination stopped at [`SCAN_LIMIT`] before the end of the history and before
    /// `n` runs were found: more may match from `next_before` on.
    pub(crate) cut: bool,
}

/// Runs `query` on `job`'s history: without a filter, one `XREVRANGE` of `n + 1` entries (the
/// extra one says whether there is a next page); with one, `XREVRANGE`s of [`CHUNK`] entries
/// until `n` runs are found, the history ends or [`SCAN_LIMIT`] entries were examined.
pub(crate) async fn search(
    client: &LockClient,
    job: &str,
    query: &HistoryQuery,
) -> Result<HistoryPage, ApiError> {
    let chunk = if query.filtering() { CHUNK } else { query.n + 1 };
    let mut cursor = query.before.clone();
    let mut runs = Vec::new();
    let mut scanned = 0;
    loop {
        let page = control::history_before(client, job, cursor.as_deref(), chunk).await?;
        let ended = page.len() < chunk;
        for run in page {
            scanned += 1;
            cursor = Some(run.id.clone());
            if query.keeps(&run) {
                runs.push(run);
                if runs.len() > query.n {
                    let next_before = runs.get(query.n - 1).map(|r| r.id.clone());
                    runs.truncate(query.n);
                    return Ok(HistoryPage { runs, next_before, scanned, cut: false });
                }
            }
        }
        if ended {
            return Ok(HistoryPage { runs, next_before: None, scanned, cut: false });
        }
        if scanned >= SCAN_LIMIT {
            // Go on from the last entry examined, not the last found.
            return Ok(HistoryPage { runs, next_before: cursor, scanned, cut: true });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn searches_are_checked() {
        let q = HistoryQuery::parse(&params(&[("outcome", "failed"), ("q", " Boom "), ("n", "20")]))
            .unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!((q.n, q.outcome, q.text.as_deref()), (20, Outcome::Failed, Some("Boom")));
        assert_eq!(
            HistoryQuery::parse(&params(&[("outcome", "bad")])).err().map(|e| e.code),
            Some("invalid_outcome")
        );
        assert_eq!(
            HistoryQuery::parse(&params(&[("before", "12-x")])).err().map(|e| e.code),
            Some("invalid_id")
        );
        assert_eq!(
            HistoryQuery::parse(&params(&[("q", "a\nb")])).err().map(|e| e.code),
            Some("invalid_input")
        );
        assert!(HistoryQuery::parse(&params(&[("before", "1764590400000-3")])).is_ok());
    }

    #[test]
    fn outcomes_are_told_apart() {
        assert!(Outcome::Failed.keeps("failed") && Outcome::Failed.keeps("timed out"));
        assert!(!Outcome::Failed.keeps("ran") && Outcome::Succeeded.keeps("ran"));
        assert!(Outcome::Skipped.keeps("skipped: paused") && Outcome::Other.keeps("missed"));
        assert!(!Outcome::Other.keeps("skipped: still running"));
    }
}
