//! What dashboard users expect of the console's jobs (issue 50, finding 6), against a real
//! redis-server and two real scheduler replicas: the history paged and filtered beyond its last
//! 100 runs, counts per hour, a run's own page, a failed run retried (once: not again once its
//! slot ran), a range backfilled, and "Run now" idempotent per key (three quick posts, one run).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use lock_console::Console;
use lock_scheduler::chrono::{self, Datelike, TimeZone, Utc};
use lock_scheduler::{Job, Scheduler};
use tests::harness::{RedisServer, client, init_tracing, wait_until};
use tests::http::{self, Response};

const TOKEN: &str = "runs-test-token-Xq7mB2vN9kL4";

async fn act(addr: SocketAddr, method: &str, path: &str, extra: &[(&str, &str)]) -> Response {
    let auth = format!("Bearer {TOKEN}");
    let mut headers = vec![("Authorization", auth.as_str())];
    headers.extend_from_slice(extra);
    http::request(addr, method, path, &headers).await
}

/// The ids of a history answer's runs.
fn ids(history: &serde_json::Value) -> Vec<String> {
    history["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["id"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_paging_counts_run_pages_retry_backfill_and_run_now_once() {
    init_tracing();
    let server = RedisServer::start();
    let failing = Arc::new(AtomicBool::new(true));
    let yearly_runs = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for instance in ["pod-a", "pod-b"] {
        let (failing, yearly_runs) = (failing.clone(), yearly_runs.clone());
        let scheduler =
            Scheduler::builder()
                .client(client(&server, instance))
                .job(
                    Job::new("flaky", "*/3 * * * * *", move || {
                        let fail = failing.load(Ordering::SeqCst);
                        async move {
                            if fail { Err(anyhow::anyhow!("upstream refused: disk full")) } else { Ok(()) }
                        }
                    })
                    .lock("lock:flaky"),
                )
                .job(
                    Job::new("yearly", "0 0 0 1 1 *", move || {
                        yearly_runs.fetch_add(1, Ordering::SeqCst);
                        async {}
                    })
                    .lock("lock:yearly"),
                )
                .build()
                .expect("valid scheduler");
        handles.push(scheduler.start().await.expect("scheduler starts"));
    }
    let console = Console::new(client(&server, "console")).token(TOKEN).expect("a strong token");
    let addr = http::serve(console.router()).await;

    // A history of 300 runs, every third failed: paged beyond the last 100, and filtered.
    let key = lock_scheduler::history_key("archive").expect("a job name");
    server.cli(&[
        "EVAL",
        "for i = 1, 300 do \
           if i % 3 == 0 then \
             redis.call('XADD', KEYS[1], '*', 'tick', i * 1000, 'instance', 'pod-x', 'outcome', 'failed', 'duration_ms', 5, 'error', 'disk full ' .. i) \
           else \
             redis.call('XADD', KEYS[1], '*', 'tick', i * 1000, 'instance', 'pod-x', 'outcome', 'ran', 'duration_ms', 5) \
           end \
         end",
        "1",
        &key,
    ]);
    let mut seen = Vec::new();
    let mut before: Option<String> = None;
    for page in 0..3 {
        let path = match &before {
            Some(b) => format!("/api/jobs/archive/history?n=100&before={b}"),
            None => "/api/jobs/archive/history?n=100".to_owned(),
        };
        let history = http::get(addr, &path).await;
        assert_eq!(history.status, 200, "{}", history.body);
        let history = history.json();
        assert_eq!(ids(&history).len(), 100, "page {page}");
        seen.extend(ids(&history));
        before = history["next_before"].as_str().map(str::to_owned);
        assert_eq!(before.is_some(), page < 2, "page {page}: {}", history["next_before"]);
    }
    let distinct: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(distinct.len(), 300, "every run once, across three pages");
    let order: Vec<(u64, u64)> = seen
        .iter()
        .map(|id| {
            id.split_once('-')
                .map(|(a, b)| (a.parse().unwrap_or(0), b.parse().unwrap_or(0)))
                .unwrap_or((0, 0))
        })
        .collect();
    assert!(order.windows(2).all(|w| w[0] > w[1]), "newest first, page after page");
    let failed = http::get(addr, "/api/jobs/archive/history?outcome=failed&n=60").await.json();
    assert_eq!(ids(&failed).len(), 60);
    assert!(failed["runs"].as_array().into_iter().flatten().all(|r| r["outcome"] == "failed"), "{failed}");
    let next = failed["next_before"].as_str().expect("more failed runs");
    let rest =
        http::get(addr, &format!("/api/jobs/archive/history?outcome=failed&n=60&before={next}")).await.json();
    assert_eq!((ids(&rest).len(), rest["next_before"].clone()), (40, serde_json::Value::Null), "{rest}");
    let found = http::get(addr, "/api/jobs/archive/history?q=DISK%20FULL%20150").await.json();
    assert_eq!(found["runs"][0]["error"], "disk full 150", "{found}");
    assert_eq!(ids(&found).len(), 1);
    // The page keeps its filter in the link to the next page.
    let page = http::get(addr, "/jobs/archive?outcome=failed&n=60").await;
    assert!(
        page.body.contains(&format!("?outcome=failed&amp;n=60&amp;before={}", next.replace('-', "%2D"))),
        "{}",
        page.body
    );
    assert_eq!(page.body.matches("<tr data-run=").count(), 60);
    // Counts over time: 300 runs, this hour.
    let stats = http::get(addr, "/api/jobs/archive/stats").await.json();
    assert_eq!((stats["bucket"].clone(), stats["runs"].clone()), ("hour".into(), 300.into()), "{stats}");
    let sum = |field: &str| -> u64 {
        stats["buckets"].as_array().into_iter().flatten().filter_map(|b| b[field].as_u64()).sum()
    };
    assert_eq!((sum("succeeded"), sum("failed"), sum("other")), (200, 100, 0));
    assert!(page.body.contains("<svg id=\"counts\"") && page.body.contains("failed (100)"), "{}", page.body);

    // A failed run's page, its retry, and no second retry once its slot ran.
    assert!(
        wait_until(Duration::from_secs(15), || {
            server
                .cli(&["XLEN", &lock_scheduler::history_key("flaky").expect("key")])
                .parse::<u64>()
                .unwrap_or(0)
                >= 1
        })
        .await,
        "flaky ran"
    );
    failing.store(false, Ordering::SeqCst);
    let last_failed = http::get(addr, "/api/jobs/flaky/history?outcome=failed&n=1").await.json();
    let run_id = last_failed["runs"][0]["id"].as_str().expect("a failed run").to_owned();
    let tick = last_failed["runs"][0]["tick"].as_i64().expect("its slot");
    let detail = http::get(addr, &format!("/api/jobs/flaky/runs/{run_id}")).await.json();
    assert_eq!(
        (detail["run"]["error"].clone(), detail["retry"]["possible"].clone()),
        ("upstream refused: disk full".into(), true.into()),
        "{detail}"
    );
    let retried = act(addr, "POST", &format!("/api/jobs/flaky/runs/{run_id}/retry"), &[]).await;
    assert_eq!(retried.status, 202, "{}", retried.body);
    assert_eq!(retried.json()["via"], "backfill");
    let ran_again = || async {
        let history =
            lock_scheduler::control::history(&client(&server, "probe"), "flaky", 50).await.expect("history");
        history.into_iter().find(|e| e.tick == tick && e.backfill)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let again = loop {
        if let Some(entry) = ran_again().await {
            break entry;
        }
        assert!(tokio::time::Instant::now() < deadline, "the retried slot ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(again.outcome, "ran", "{again:?}");
    let refused = act(addr, "POST", &format!("/api/jobs/flaky/runs/{run_id}/retry"), &[]).await;
    assert_eq!((refused.status, refused.error_code().as_str()), (409, "retried_already"), "{}", refused.body);
    let page = http::get(addr, &format!("/jobs/flaky/runs/{run_id}")).await;
    assert!(page.body.contains("<pre id=\"run-error\">upstream refused: disk full</pre>"), "{}", page.body);
    assert!(page.body.contains("id=\"retry-refusal\""), "{}", page.body);
    let slot_rows = page.body.split("<table id=\"slot-runs\">").nth(1).unwrap_or_default();
    assert_eq!(
        slot_rows.split("</table>").next().unwrap_or_default().matches("<tr").count(),
        3,
        "header, the failed run and its retry"
    );
    let not_failed = act(addr, "POST", &format!("/api/jobs/flaky/runs/{}/retry", again.id), &[]).await;
    assert_eq!(not_failed.error_code(), "not_failed", "{}", not_failed.body);

    // Backfill this year's slot of the yearly job, from the page's form fields (UTC, no zone).
    let slot = Utc.with_ymd_and_hms(Utc::now().year(), 1, 1, 0, 0, 0).single().expect("new year");
    let from = (slot - chrono::TimeDelta::hours(1)).format("%Y-%m-%dT%H:%M").to_string();
    let to = (slot + chrono::TimeDelta::minutes(1)).format("%Y-%m-%dT%H:%M").to_string();
    let filled = act(addr, "POST", &format!("/api/jobs/yearly/backfill?from={from}&to={to}"), &[]).await;
    assert_eq!(filled.status, 202, "{}", filled.body);
    assert_eq!(filled.json()["queued"], serde_json::json!([slot.to_rfc3339()]), "{}", filled.body);
    assert!(
        wait_until(Duration::from_secs(15), || yearly_runs.load(Ordering::SeqCst) == 1).await,
        "the slot ran"
    );
    let recorded = || async {
        lock_scheduler::control::history(&client(&server, "probe"), "yearly", 10)
            .await
            .expect("history")
            .iter()
            .any(|e| e.backfill)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !recorded().await {
        assert!(tokio::time::Instant::now() < deadline, "the backfill run is recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let twice =
        act(addr, "POST", &format!("/api/jobs/yearly/backfill?from={from}&to={to}"), &[]).await.json();
    assert_eq!(
        (twice["queued"].clone(), twice["refused"].clone()),
        (serde_json::json!([]), serde_json::json!([slot.to_rfc3339()])),
        "{twice}"
    );
    let backwards = act(addr, "POST", &format!("/api/jobs/yearly/backfill?from={to}&to={from}"), &[]).await;
    assert_eq!(
        (backwards.status, backwards.error_code().as_str()),
        (400, "invalid_backfill"),
        "{}",
        backwards.body
    );

    // Run now, three quick posts with one idempotency key: one request, one run.
    let key = "4f1c9e2a-run-once";
    let posts = (0..3).map(|_| {
        tokio::spawn(
            async move { act(addr, "POST", "/api/jobs/yearly/run", &[("Idempotency-Key", key)]).await },
        )
    });
    let mut answers = Vec::new();
    for post in posts {
        let answer = post.await.expect("a post");
        assert_eq!(answer.status, 202, "{}", answer.body);
        answers.push(answer.json());
    }
    let requests: BTreeSet<String> =
        answers.iter().filter_map(|a| a["request"].as_str().map(str::to_owned)).collect();
    assert_eq!(requests.len(), 1, "one request for three posts: {answers:?}");
    assert_eq!(answers.iter().filter(|a| a["replayed"] == true).count(), 2, "{answers:?}");
    assert!(wait_until(Duration::from_secs(15), || yearly_runs.load(Ordering::SeqCst) == 2).await, "it ran");
    let request = requests.into_iter().next().unwrap_or_default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let manual = loop {
        let history =
            lock_scheduler::control::history(&client(&server, "probe"), "yearly", 10).await.expect("history");
        let manual: Vec<_> = history.into_iter().filter(|e| e.manual_by.is_some()).collect();
        if !manual.is_empty() {
            break manual;
        }
        assert!(tokio::time::Instant::now() < deadline, "the run-now is recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(manual.len(), 1, "one manual run, no `skipped: still running`: {manual:?}");
    assert_eq!((manual[0].outcome.as_str(), manual[0].request.as_deref()), ("ran", Some(request.as_str())));
    // The same key later still answers with that request; a bad key is refused.
    let later = act(addr, "POST", "/api/jobs/yearly/run", &[("Idempotency-Key", key)]).await.json();
    assert_eq!((later["request"].as_str(), later["replayed"].clone()), (Some(request.as_str()), true.into()));
    let bad = act(addr, "POST", "/api/jobs/yearly/run", &[("Idempotency-Key", "has space")]).await;
    assert_eq!((bad.status, bad.error_code().as_str()), (400, "invalid_argument"), "{}", bad.body);
    assert_eq!(yearly_runs.load(Ordering::SeqCst), 2, "nothing more ran");
    for handle in handles {
        handle.shutdown().await;
    }
}
