//! The admin console's JSON API and pages against a real redis-server with three real
//! scheduler replicas: every endpoint, the auth rules (token, read-only, no token, cross-site),
//! bad input answered with a 4xx naming the problem, run-now exactly once, escaping of what
//! Redis holds, no password in any response, and the OpenAPI document against the routes.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_console::Console;
use lock_core::{LockClient, LockOptions};
use lock_scheduler::{Job, Scheduler, SchedulerHandle};
use tests::harness::{AclUser, RedisServer, client, create_user, init_tracing, wait_until};
use tests::http::{self, Response};

const TOKEN: &str = "console-test-token-0123456789";
const PASSWORD: &str = "Sup3rSecretPw-4242";
/// A lock key and a job name that are markup.
const MARKUP: &str = "<script>alert(1)</script>";

struct Setup {
    server: RedisServer,
    handles: Vec<SchedulerHandle>,
    /// The console's own client: the password-protected user.
    console_client: LockClient,
    addr: SocketAddr,
    manual_runs: Arc<AtomicUsize>,
}

/// Three replicas of: `report` (every second, under a lock), `fails` (every second, fails),
/// `manual` (yearly, counting its runs: only run-now runs it) and a yearly job named with
/// markup; a console with [`TOKEN`] over a client that logs in with [`PASSWORD`].
async fn setup() -> Setup {
    init_tracing();
    let server = RedisServer::start();
    let admin = AclUser::new("console", PASSWORD, vec!["~*".into(), "&*".into(), "+@all".into()]);
    create_user(&server.url(), &admin).expect("create the console's Redis user");
    let manual_runs = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for instance in ["pod-a", "pod-b", "pod-c"] {
        let counter = manual_runs.clone();
        let scheduler = Scheduler::builder()
            .client(client(&server, instance))
            .job(
                Job::new("report", "* * * * * *", || async {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                })
                .lock("lock:report"),
            )
            .job(
                Job::new("fails", "* * * * * *", || async { Err::<(), _>(anyhow::anyhow!("boom")) })
                    .lock("lock:fails"),
            )
            .job(
                Job::new("manual", "0 0 0 1 1 *", move || {
                    counter.fetch_add(1, Ordering::SeqCst);
                    async {}
                })
                .lock("lock:manual"),
            )
            .job(Job::new(MARKUP, "0 0 0 1 1 *", || async {}))
            .build()
            .expect("valid scheduler");
        handles.push(scheduler.start().await.expect("scheduler starts"));
    }
    let console_client = LockClient::builder()
        .url(admin.url_on(&server.url()))
        .instance_id("console")
        .command_timeout(Duration::from_secs(2))
        .build()
        .expect("valid client");
    let console = Console::new(console_client.clone()).token(TOKEN).expect("a strong token");
    let addr = http::serve(console.router()).await;
    Setup { server, handles, console_client, addr, manual_runs }
}

impl Setup {
    async fn shutdown(self) {
        for handle in self.handles {
            handle.shutdown().await;
        }
    }
}

fn bearer() -> (&'static str, String) {
    ("Authorization", format!("Bearer {TOKEN}"))
}

async fn act(addr: SocketAddr, method: &str, path: &str) -> Response {
    let (name, value) = bearer();
    http::request(addr, method, path, &[(name, &value)]).await
}

/// Asserts that no response shows the Redis password.
fn no_secret(response: &Response) {
    assert!(!response.body.contains(PASSWORD), "the password leaked: {}", response.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_answers_from_redis_and_actions_need_the_token() {
    let s = setup().await;
    let addr = s.addr;
    // A held lock, by another instance.
    let holder = client(&s.server, "pod-x");
    let guard = holder.acquire("lock:console:held", LockOptions::new()).await.expect("take the lock");
    let markup_guard = holder.acquire(MARKUP, LockOptions::new()).await.expect("take the markup lock");
    assert!(holder.record_holdings().await, "the holdings record is written");

    // Locks.
    let locks = http::get(addr, "/api/locks?pattern=lock:console:*").await;
    assert_eq!(locks.status, 200, "{}", locks.body);
    assert_eq!(locks.header("content-type"), Some("application/json"));
    let listed = locks.json();
    assert_eq!(listed["locks"][0]["key"], "lock:console:held", "{listed}");
    assert_eq!(listed["locks"][0]["holder"]["instance"], "pod-x");
    let one = http::get(addr, "/api/locks/lock:console:held").await.json();
    assert_eq!(one["held"], true, "{one}");
    assert_eq!(one["holder"]["token"].as_str(), Some(guard.token()));
    assert_eq!(one["holder"]["alive"], true);
    assert_eq!(one["fence"], guard.fence().map_or(serde_json::Value::Null, serde_json::Value::from));
    assert!(one["ttl_ms"].as_u64().is_some_and(|t| t > 0), "{one}");
    assert_eq!(one["waiters"], serde_json::json!([]));

    // Jobs: registered by the replicas, with their schedules, last runs and failures.
    assert!(
        wait_until(Duration::from_secs(8), || {
            let history = s.server.cli(&["XLEN", &lock_scheduler::history_key("fails").expect("key")]);
            history.parse::<u64>().unwrap_or(0) >= 2
        })
        .await,
        "the jobs ran"
    );
    let jobs = http::get(addr, "/api/jobs").await;
    assert_eq!(jobs.status, 200, "{}", jobs.body);
    let jobs = jobs.json();
    let job =
        |name: &str| jobs["jobs"].as_array().and_then(|a| a.iter().find(|j| j["name"] == name)).cloned();
    let report = job("report").expect("report listed");
    assert_eq!(report["schedule"], "* * * * * *");
    assert_eq!(report["time_zone"], "UTC");
    assert_eq!(report["group"], lock_scheduler::DEFAULT_GROUP);
    assert_eq!(report["paused"], false);
    assert!(report["next_slot"].as_str().is_some(), "{report}");
    let fails = job("fails").expect("fails listed");
    assert_eq!(fails["last_outcome"], "failed", "{fails}");
    assert!(fails["failures_24h"].as_u64().is_some_and(|n| n >= 2), "{fails}");
    // Counted by the counts per hour written with the history entries, not by reading history.
    let counts_key = lock_scheduler::schema::failures_key("fails").expect("key");
    let counted: u64 = s
        .server
        .cli(&["ZRANGE", &counts_key, "0", "-1", "WITHSCORES"])
        .lines()
        .skip(1)
        .step_by(2)
        .filter_map(|n| n.trim().parse::<u64>().ok())
        .sum();
    assert!(counted >= 2, "the failure counts: {counted}");
    let ttl: i64 = s.server.cli(&["PTTL", &counts_key]).trim().parse().unwrap_or(-3);
    assert!(ttl > 0, "the counts expire: {ttl}");
    assert!(["pod-a", "pod-b", "pod-c"].contains(&fails["last_instance"].as_str().unwrap_or("")));
    assert!(job(MARKUP).is_some() && job("manual").is_some());
    let history = http::get(addr, "/api/jobs/fails/history?n=2").await.json();
    assert_eq!(history["runs"].as_array().map(Vec::len), Some(2), "{history}");
    assert_eq!(history["runs"][0]["error"], "boom");

    // Replicas.
    let replicas = http::get(addr, "/api/replicas").await.json();
    let live: BTreeSet<&str> = replicas["replicas"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["live"] == true)
        .filter_map(|r| r["instance"].as_str())
        .collect();
    assert_eq!(live, BTreeSet::from(["pod-a", "pod-b", "pod-c"]), "{replicas}");

    // Actions: 401 without or with a wrong token; done with it.
    let none = http::request(addr, "POST", "/api/jobs/report/pause", &[]).await;
    assert_eq!((none.status, none.error_code().as_str()), (401, "unauthorized"), "{}", none.body);
    assert_eq!(none.header("www-authenticate"), Some("Bearer"));
    let wrong = http::request(
        addr,
        "POST",
        "/api/jobs/report/pause",
        &[("Authorization", "Bearer not-the-token-at-all")],
    )
    .await;
    assert_eq!(wrong.status, 401);
    let cross = http::request(
        addr,
        "POST",
        "/api/jobs/report/pause",
        &[(bearer().0, &bearer().1), ("Origin", "https://evil.example")],
    )
    .await;
    assert_eq!((cross.status, cross.error_code().as_str()), (403, "cross_site"));
    assert_eq!(
        s.server.cli(&["EXISTS", &lock_scheduler::pause_key("report").expect("key")]),
        "0",
        "nothing paused yet"
    );

    let paused = act(addr, "POST", "/api/jobs/report/pause").await;
    assert_eq!(paused.status, 200, "{}", paused.body);
    assert_eq!(paused.json()["paused"], true);
    let state = lock_scheduler::control::pause_state(&s.console_client, "report").await.expect("pause state");
    assert!(state.paused.as_deref().is_some_and(|p| p.ends_with("by console")), "{state:?}");
    assert_eq!(
        http::get(addr, "/api/jobs").await.json()["jobs"].to_string().matches("\"paused\":true").count(),
        1
    );
    let resumed = act(addr, "POST", "/api/jobs/report/resume").await.json();
    assert_eq!((resumed["paused"].clone(), resumed["was_paused"].clone()), (false.into(), true.into()));

    // Force-unlock: the lock is gone from Redis, and the API says whose it was.
    let unlocked = act(addr, "DELETE", "/api/locks/lock:console:held").await;
    assert_eq!(unlocked.status, 200, "{}", unlocked.body);
    let unlocked = unlocked.json();
    assert_eq!((unlocked["released"].clone(), unlocked["instance"].clone()), (true.into(), "pod-x".into()));
    assert_eq!(s.server.cli(&["EXISTS", "lock:console:held"]), "0");
    let again = act(addr, "DELETE", "/api/locks/lock:console:held").await.json();
    assert_eq!(again["released"], false, "a free lock: nothing to do");

    // The pages show what Redis holds, escaped; no response shows the password.
    let locks_page = http::get(addr, "/locks?pattern=*&limit=100").await;
    assert_eq!(locks_page.status, 200);
    assert!(locks_page.header("content-type").is_some_and(|t| t.starts_with("text/html")));
    assert!(locks_page.header("content-security-policy").is_some_and(|c| c.contains("script-src 'self'")));
    assert!(locks_page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{}", locks_page.body);
    assert!(!locks_page.body.contains(MARKUP), "markup from Redis is escaped");
    let jobs_page = http::get(addr, "/jobs").await;
    assert!(
        jobs_page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;") && !jobs_page.body.contains(MARKUP)
    );
    assert!(jobs_page.body.contains("data-url=\"/api/jobs/report/pause\""), "{}", jobs_page.body);
    let job_page = http::get(addr, "/jobs/fails").await;
    assert!(
        job_page.body.contains("<svg id=\"chart\"") && job_page.body.contains("boom"),
        "{}",
        job_page.body
    );
    for path in ["/", "/replicas", "/api/openapi.json", "/api/locks?pattern=*&limit=10", "/api/jobs"] {
        let response = http::get(addr, path).await;
        assert_eq!(response.status, 200, "{path}: {}", response.body);
        no_secret(&response);
    }
    for response in [&locks, &jobs_page, &job_page, &locks_page] {
        no_secret(response);
    }
    drop((guard, markup_guard));
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_now_through_the_api_runs_once_on_one_of_three_replicas() {
    let s = setup().await;
    let ran = act(s.addr, "POST", "/api/jobs/manual/run").await;
    assert_eq!(ran.status, 202, "{}", ran.body);
    let request = ran.json();
    assert_eq!((request["job"].clone(), request["by"].clone()), ("manual".into(), "console".into()));
    assert!(wait_until(Duration::from_secs(5), || s.manual_runs.load(Ordering::SeqCst) == 1).await);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let history =
            lock_scheduler::control::history(&s.console_client, "manual", 10).await.expect("history");
        if history.iter().any(|e| e.manual_by.as_deref() == Some("console")) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "recorded as a manual run by the console: {history:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let shown = http::get(s.addr, "/api/jobs/manual/history").await.json();
    assert_eq!(shown["runs"][0]["manual_by"], "console", "{shown}");
    assert_eq!(shown["runs"][0]["request"], request["request"]);
    assert_eq!(s.manual_runs.load(Ordering::SeqCst), 1, "exactly one replica ran it");
    let unknown = act(s.addr, "POST", "/api/jobs/no-such-job/run").await;
    assert_eq!((unknown.status, unknown.error_code().as_str()), (404, "unknown_job"), "{}", unknown.body);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_4xx_naming_the_problem_and_modes_refuse_actions() {
    let s = setup().await;
    let addr = s.addr;
    for (method, path, status, code) in [
        ("GET", "/api/jobs/no-such-job/history", 404, "unknown_job"),
        ("POST", "/api/jobs/no-such-job/pause", 404, "unknown_job"),
        ("GET", "/api/locks?pattern=*", 400, "unbounded_pattern"),
        ("GET", "/api/locks?pattern=lock:*&limit=0", 400, "invalid_limit"),
        ("GET", "/api/locks?pattern=lock:*&limit=100000", 400, "invalid_limit"),
        ("GET", "/api/locks?pattern=a%0Ab", 400, "invalid_input"),
        ("GET", "/api/locks/lock%0Akey", 400, "invalid_input"),
        ("GET", "/api/jobs/report/history?n=1000000", 400, "invalid_n"),
        ("GET", "/api/jobs/report/history?n=-3", 400, "invalid_n"),
        ("GET", "/api/jobs/a%01b/history", 400, "invalid_job"),
        ("GET", "/api/nothing-here", 404, "no_route"),
    ] {
        let response = act(addr, method, path).await;
        assert_eq!(
            (response.status, response.error_code().as_str()),
            (status, code),
            "{method} {path}: {}",
            response.body
        );
        assert!(!response.json()["error"]["message"].as_str().unwrap_or_default().is_empty());
    }

    // Read-only: 403 whatever the token. No token configured: 403, saying how to set one.
    let read_only = Console::new(s.console_client.clone()).token(TOKEN).expect("token").read_only(true);
    let no_token = Console::new(s.console_client.clone());
    let (ro, nt) = (http::serve(read_only.router()).await, http::serve(no_token.router()).await);
    let refused = act(ro, "POST", "/api/jobs/report/pause").await;
    assert_eq!((refused.status, refused.error_code().as_str()), (403, "read_only"));
    let refused = act(nt, "DELETE", "/api/locks/lock:report").await;
    assert_eq!((refused.status, refused.error_code().as_str()), (403, "no_token"));
    assert!(refused.body.contains("LOCKCTL_ADMIN_TOKEN"), "{}", refused.body);
    assert_eq!(s.server.cli(&["EXISTS", &lock_scheduler::pause_key("report").expect("key")]), "0");
    let page = http::get(ro, "/jobs").await;
    assert!(page.body.contains("read-only") && !page.body.contains("data-url"), "no buttons: {}", page.body);
    assert!(matches!(
        Console::new(s.console_client.clone()).token("short"),
        Err(lock_console::ConsoleError::WeakToken(_))
    ));
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_lists_exactly_the_routes() {
    let s = setup().await;
    let spec = http::get(s.addr, "/api/openapi.json").await.json();
    assert_eq!(spec["openapi"], "3.1.0");
    let mut documented = BTreeSet::new();
    for (path, item) in spec["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("operations").keys() {
            documented.insert((method.to_uppercase(), path.clone()));
        }
    }
    let routes: BTreeSet<(String, String)> = [
        ("GET", "/healthz"),
        ("GET", "/livez"),
        ("GET", "/readyz"),
        ("GET", "/api/openapi.json"),
        ("GET", "/api/locks"),
        ("GET", "/api/locks/{key}"),
        ("DELETE", "/api/locks/{key}"),
        ("GET", "/api/jobs"),
        ("GET", "/api/jobs/{name}/history"),
        ("GET", "/api/jobs/{name}/stats"),
        ("GET", "/api/jobs/{name}/runs/{id}"),
        ("POST", "/api/jobs/{name}/runs/{id}/retry"),
        ("POST", "/api/jobs/{name}/backfill"),
        ("POST", "/api/jobs/{name}/pause"),
        ("POST", "/api/jobs/{name}/resume"),
        ("POST", "/api/jobs/{name}/run"),
        ("GET", "/api/replicas"),
    ]
    .into_iter()
    .map(|(m, p)| (m.to_owned(), p.to_owned()))
    .collect();
    assert_eq!(documented, routes, "the OpenAPI document and the routes differ");
    // Every documented operation is served (not the API's "no such route" 404, nor a 405).
    for (method, path) in &documented {
        let concrete =
            path.replace("{key}", "lock:report").replace("{name}", "manual").replace("{id}", "1-0");
        let response = act(s.addr, method, &concrete).await;
        assert_ne!(response.status, 405, "{method} {concrete}");
        if response.status == 404 {
            assert_ne!(response.error_code(), "no_route", "{method} {concrete} is documented but not routed");
        }
    }
    // And a method the document does not list is not served.
    assert_eq!(act(s.addr, "DELETE", "/api/jobs").await.status, 405);
    s.shutdown().await;
}
