//! `lockctl` end to end: a real redis-server (the fixture's), a running `daily_report`
//! replica (the example binary, as a deployment runs it), and the `lockctl` binary run the
//! way an operator runs it. Checks what it prints (text and `--json`), its exit codes, and
//! that pause / resume reach the running replica.
//!
//! The replica binary is `target/<profile>/examples/daily_report`, which `cargo test
//! --workspace` builds (alone: `cargo build -p examples --example daily_report`).

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use lock_core::schema;
use lock_core::{LockClient, LockOptions};
use redis_fixture::RedisServer;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

const JOB: &str = "daily-report";
const KEY: &str = "lock:daily-report";
/// The admin token of the consoles these tests start.
const TOKEN: &str = "e2e-admin-token-0123456789";

/// Generous: the machine may be saturated by other work.
const PATIENCE: Duration = Duration::from_secs(60);

fn daily_report_binary() -> PathBuf {
    let lockctl = PathBuf::from(env!("CARGO_BIN_EXE_lockctl"));
    let profile_dir = lockctl.parent().expect("target/<profile>");
    let path = profile_dir.join("examples").join(format!("daily_report{}", std::env::consts::EXE_SUFFIX));
    let hint = "run `cargo test --workspace`, or `cargo build -p examples --example daily_report` first";
    let built = std::fs::metadata(&path).and_then(|m| m.modified());
    let built = built.unwrap_or_else(|_| panic!("{} is missing: {hint}", path.display()));
    let source =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/examples/daily_report.rs");
    let edited = std::fs::metadata(&source).and_then(|m| m.modified()).expect("example source");
    assert!(built >= edited, "{} is older than its source: {hint}", path.display());
    path
}

/// Runs `lockctl args` against `url`, `stdin` fed to it; (exit code, stdout, stderr).
async fn lockctl(url: &str, args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    cmd.args(args)
        .env("REDIS_URL", url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("start lockctl");
    let mut input = child.stdin.take().expect("piped stdin");
    input.write_all(stdin.as_bytes()).await.expect("write stdin");
    drop(input);
    let output: Output = tokio::time::timeout(PATIENCE, child.wait_with_output())
        .await
        .expect("lockctl exits in time")
        .expect("lockctl output");
    let code = output.status.code().expect("exited normally");
    (
        code,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn lockctl_json(url: &str, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = lockctl(url, &all, "").await;
    let json =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("JSON ({e}): {stdout}\n{stderr}"));
    (code, json)
}

/// Polls `check` until it returns `Some`, or fails the test after [`PATIENCE`].
async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The outcomes in `job`'s history, newest first.
async fn outcomes(url: &str) -> Vec<String> {
    let (_, json) = lockctl_json(url, &["history", JOB, "-n", "50"]).await;
    json["runs"]
        .as_array()
        .map(|runs| runs.iter().filter_map(|r| r["outcome"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// A `daily_report --instance pod-1` replica firing every second, its stdout and stderr lines
/// collected.
struct Replica {
    child: Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Replica {
    fn start(url: &str, metrics_port: u16) -> Replica {
        Replica::spawn(url, &["--cron", "* * * * * *", "--metrics-port", &metrics_port.to_string()])
    }

    /// `daily_report --instance pod-1 <args>`, with [`TOKEN`] as its admin token.
    fn spawn(url: &str, args: &[&str]) -> Replica {
        let mut child = Command::new(daily_report_binary())
            .args(["--instance", "pod-1"])
            .args(args)
            .env("REDIS_URL", url)
            .env("LOCKCTL_ADMIN_TOKEN", TOKEN)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start daily_report");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let mut stderr = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        let tx_err = tx.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stdout.next_line().await {
                let _ = tx.send(line);
            }
        });
        // The log (the console's audit trail among it), drained so the replica never blocks.
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                let _ = tx_err.send(line);
            }
        });
        Replica { child, lines, seen: Vec::new() }
    }

    /// Waits for a stdout line containing `text` (seen before or coming).
    async fn line_containing(&mut self, text: &str) -> String {
        if let Some(line) = self.seen.iter().find(|l| l.contains(text)) {
            return line.clone();
        }
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.recv())
                .await
                .unwrap_or_else(|_| panic!("no line with {text:?}; seen:\n{}", self.seen.join("\n")))
                .unwrap_or_else(|| panic!("the replica exited; seen:\n{}", self.seen.join("\n")));
            self.seen.push(line.clone());
            if line.contains(text) {
                return line;
            }
        }
    }

    async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
        }
        let status = tokio::time::timeout(PATIENCE, self.child.wait()).await.expect("stops").expect("status");
        assert!(status.success(), "{status}");
    }
}

/// `GET /metrics` over plain HTTP/1.0.
async fn scrape(port: u16) -> Option<String> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").await.ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await.ok()?;
    Some(body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_operates_a_running_replica() {
    let server = RedisServer::start();
    let url = server.url();
    let metrics_port = redis_fixture::free_port().expect("a free port");
    let mut replica = Replica::start(&url, metrics_port);

    // The replica runs the job; its runs land in the history, which `jobs` and `history` show.
    replica.line_containing("[pod-1] Starting daily report generation").await;
    eventually("a run in the history", async || {
        outcomes(&url).await.contains(&"ran".to_owned()).then_some(())
    })
    .await;
    let (code, stdout, _) = lockctl(&url, &["jobs"], "").await;
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.starts_with("JOB "), "{stdout}");
    let row = stdout.lines().find(|l| l.starts_with(JOB)).unwrap_or_else(|| panic!("{stdout}"));
    assert!(row.contains(" no ") && row.contains("pod-1"), "{stdout}");
    let (code, stdout, _) = lockctl(&url, &["history", JOB, "-n", "3"], "").await;
    assert_eq!(code, 0, "{stdout}");
    // The schedule in force heads the history, with where it came from: `--cron` is the
    // builder's override (config), not the attribute's schedule (code).
    assert!(stdout.starts_with("schedule: * * * * * * UTC (config)\nSLOT "), "{stdout}");
    assert!(stdout.contains("pod-1") && stdout.contains("ran"), "{stdout}");
    let (code, json) = lockctl_json(&url, &["jobs"]).await;
    assert_eq!(code, 0);
    assert_eq!(json[0]["job"], JOB, "{json}");
    assert_eq!(
        (json[0]["schedule"].as_str(), json[0]["schedule_origin"].as_str()),
        (Some("* * * * * *"), Some("config"))
    );
    assert_eq!(json[0]["last_run"]["instance"], "pod-1", "{json}");

    // Pause: the running replica skips its slots and records them; resume: it runs again.
    let (code, stdout, _) = lockctl(&url, &["pause", JOB], "").await;
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("paused daily-report"), "{stdout}");
    replica.line_containing("[pod-1] The daily report is paused").await;
    eventually("a paused slot in the history", async || {
        outcomes(&url).await.first().is_some_and(|o| o == "skipped: paused").then_some(())
    })
    .await;
    let (_, json) = lockctl_json(&url, &["jobs"]).await;
    assert_eq!(json[0]["paused"], true, "{json}");
    let (code, stdout, _) = lockctl(&url, &["resume", JOB], "").await;
    assert_eq!((code, stdout.as_str()), (0, "resumed daily-report\n"));
    let (code, _, _) = lockctl(&url, &["resume", JOB], "").await;
    assert_eq!(code, 1, "resuming a job that is not paused says so");
    eventually("a run after resume", async || {
        outcomes(&url).await.first().is_some_and(|o| o == "ran").then_some(())
    })
    .await;

    // Metrics of the replica, in the Prometheus text format.
    let metrics = eventually("the metrics endpoint", async || {
        scrape(metrics_port).await.filter(|m| m.contains("scheduler_runs_total"))
    })
    .await;
    for expected in [
        r#"scheduler_runs_total{job_name="daily-report",outcome="ran"}"#,
        r#"scheduler_runs_total{job_name="daily-report",outcome="skipped_paused"}"#,
        r#"lock_acquisitions_total{key="lock:daily-report",kind="lock",outcome="acquired"}"#,
        "lock_hold_seconds",
        "scheduler_run_duration_seconds",
        "scheduler_start_lag_seconds",
    ] {
        assert!(metrics.contains(expected), "{expected} missing:\n{metrics}");
    }
    replica.stop().await;

    // show / list / unlock on a lock held by a live client, with a waiter queued behind it.
    let holder = LockClient::builder().url(&url).instance_id("pod-7").build().expect("client");
    let waiter = LockClient::builder().url(&url).instance_id("pod-8").build().expect("client");
    let guard = holder.acquire(KEY, LockOptions::new().fencing(true)).await.expect("take the lock");
    // Operators' tools see a lock once its holder's record names it (written 100 ms after).
    assert!(holder.record_holdings().await, "the holdings record is written");
    let waiting = tokio::spawn(async move {
        let guard = waiter.acquire(KEY, LockOptions::new().wait(Duration::from_secs(120))).await;
        guard.map(|g| (g.token().to_owned(), g))
    });
    let shown = eventually("the waiter queued", async || {
        let (code, json) = lockctl_json(&url, &["show", KEY]).await;
        (code == 0 && json["waiters"].as_array().is_some_and(|w| w.len() == 1)).then_some(json)
    })
    .await;
    assert_eq!(shown["holder"]["token"], guard.token(), "{shown}");
    assert_eq!(shown["holder"]["instance"], "pod-7", "{shown}");
    assert_eq!(shown["holder"]["alive"], true, "{shown}");
    assert_eq!(shown["fence"].as_u64(), guard.fence(), "{shown}");
    assert!(shown["ttl_ms"].as_u64().is_some_and(|t| t > 0), "{shown}");
    assert!(shown["waiters"][0]["token"].as_str().is_some_and(|t| t.starts_with("pod-8:")), "{shown}");
    assert!(shown["waiters"][0]["ticket_remaining_ms"].as_u64().is_some_and(|t| t > 0), "{shown}");
    let (code, text, _) = lockctl(&url, &["show", KEY], "").await;
    assert_eq!(code, 0);
    assert!(text.contains(&format!("holder:    {}", guard.token())), "{text}");
    assert!(
        text.contains("instance:  pod-7")
            && text.contains(&format!("alive:     yes ({}", schema::liveness_key("pod-7:"))),
        "{text}"
    );
    assert!(text.contains("waiters:   1\n  1. pod-8:") && text.contains(" left\n"), "{text}");
    assert_eq!(
        (shown["live_waiters"].as_u64(), shown["lapsed_waiters"].as_u64()),
        (Some(1), Some(0)),
        "{shown}"
    );

    // A ticket that lapsed (its waiter's process died) and a client that let a hand-off lapse:
    // counted apart from the live waiter.
    let now_ms: i64 =
        server.cli(&["TIME"]).lines().next().expect("seconds").parse::<i64>().expect("int") * 1000;
    let (queue, tickets) = (schema::queue_key(KEY), schema::tickets_key(KEY));
    let dead = "pod-9:abcdef012345:0b5e3c9a-4c1e-4d5f-9a0b-1c2d3e4f5a6b";
    server.cli(&["RPUSH", &queue, &format!("2000|{dead}")]);
    server.cli(&["ZADD", &tickets, &(now_ms - 1000).to_string(), dead]);
    server.cli(&["ZADD", &tickets, &(now_ms - 500).to_string(), &schema::handoff_record("abcdef012345")]);
    let (code, shown) = lockctl_json(&url, &["show", KEY]).await;
    assert_eq!(code, 0);
    assert_eq!(
        (shown["live_waiters"].as_u64(), shown["lapsed_waiters"].as_u64()),
        (Some(1), Some(1)),
        "{shown}"
    );
    assert_eq!(shown["waiters"][1]["live"], false, "{shown}");
    assert_eq!(shown["handoffs"][0]["client_id"], "abcdef012345", "{shown}");
    assert_eq!(shown["handoffs"][0]["lapsed"], true, "{shown}");
    let (_, text, _) = lockctl(&url, &["show", KEY], "").await;
    assert!(text.contains("waiters:   2 (1 live, 1 lapsed: dropped when reached)"), "{text}");
    assert!(text.contains(&format!("2. {dead}  ticket 0ms left  (lapsed)")), "{text}");
    assert!(text.contains("client abcdef012345 let a hand-off lapse at "), "{text}");
    server.cli(&["LREM", &queue, "1", &format!("2000|{dead}")]);
    server.cli(&["ZREM", &tickets, dead, &schema::handoff_record("abcdef012345")]);

    let (code, text, _) = lockctl(&url, &["list", "lock:*"], "").await;
    assert_eq!(code, 0, "{text}");
    assert!(
        text.lines().nth(1).is_some_and(|l| l.starts_with("lock:daily-report  lock  1        pod-7  ")),
        "{text}"
    );
    let (code, _, _) = lockctl(&url, &["list", "nothing:*"], "").await;
    assert_eq!(code, 1, "no match");

    // Not confirmed: left alone (exit 4). Confirmed: released, handed to the waiter.
    let (code, stdout, stderr) = lockctl(&url, &["unlock", KEY], "n\n").await;
    assert_eq!(code, 4, "{stdout}{stderr}");
    assert!(stderr.contains("Force-release lock:daily-report, held by pod-7:"), "{stderr}");
    assert!(guard.is_held());
    let (code, stdout, _) = lockctl(&url, &["unlock", KEY], "y\n").await;
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(
        stdout,
        format!("released lock:daily-report, taken from {} (instance pod-7)\n", guard.token())
    );
    let (token, handed) =
        tokio::time::timeout(PATIENCE, waiting).await.expect("handed over").expect("task").expect("lock");
    let (_, json) = lockctl_json(&url, &["show", KEY]).await;
    assert_eq!(json["holder"]["token"], token.as_str(), "the waiter got it: {json}");
    drop(handed);
    drop(guard);
    let (code, json) = lockctl_json(&url, &["unlock", "--yes", KEY]).await;
    assert!(code == 0 || code == 1, "{json}");
    let (code, stdout, _) = lockctl(&url, &["show", KEY], "").await;
    assert_eq!(code, 1, "a free lock: {stdout}");
    assert!(stdout.contains("holder:    (free)"), "{stdout}");
}

#[tokio::test]
async fn exit_codes_and_errors_are_for_scripts_and_keep_secrets() {
    // Bad input: exit 2, a clear message, no panic.
    let (code, _, stderr) = lockctl("redis://127.0.0.1:1/", &["show", "a{b"], "").await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.starts_with("lockctl: invalid lock key"), "{stderr}");
    let (code, _, stderr) = lockctl("redis://127.0.0.1:1/", &["frobnicate"], "").await;
    assert_eq!(code, 2, "{stderr}");

    // Redis unreachable: exit 3; the URL's password appears nowhere, JSON included.
    for json in [false, true] {
        let mut args = vec!["show", "lock:x"];
        if json {
            args.insert(0, "--json");
        }
        let (code, stdout, stderr) = lockctl("redis://:hunter2@127.0.0.1:1/", &args, "").await;
        assert_eq!(code, 3, "{stdout}{stderr}");
        assert!(!stdout.contains("hunter2") && !stderr.contains("hunter2"), "{stdout}{stderr}");
        // The whole chain on one line, each cause once.
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with("lockctl: redis command failed while reading lock `lock:x`: "),
            "{stderr}"
        );
        assert_eq!(stderr.matches("refused").count(), 1, "the cause once: {stderr}");
        if json {
            let v: Value = serde_json::from_str(stdout.trim()).expect("JSON error");
            assert_eq!(v["exit_code"], 3);
            assert_eq!(
                v["error"].as_str().map(|e| format!("lockctl: {e}\n")),
                Some(stderr.clone()),
                "{stdout}"
            );
        }
    }
    // A job command's error, chained the same way.
    let (code, _, stderr) = lockctl("redis://127.0.0.1:1/", &["history", "daily"], "").await;
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.starts_with("lockctl: redis failed while reading a job's run history: "), "{stderr}");
    assert_eq!(stderr.matches("refused").count(), 1, "the cause once: {stderr}");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    let output = cmd.args(["show", "k"]).env_remove("REDIS_URL").output().await.expect("run");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("pass --url or set REDIS_URL"));
    let help = Command::new(env!("CARGO_BIN_EXE_lockctl"))
        .arg("--help")
        .env("REDIS_URL", "redis://:hunter2@127.0.0.1:1/")
        .output()
        .await
        .expect("run");
    assert!(help.status.success());
    assert!(!String::from_utf8_lossy(&help.stdout).contains("hunter2"), "help hides the env value");
}

/// `show`, `list` and `unlock --token` on a semaphore and a read-write lock: the kind, every
/// holder, and one permit or reader released while the others stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_shows_and_releases_permits_and_readers() {
    let server = RedisServer::start();
    let url = server.url();
    let client = LockClient::builder()
        .url(&url)
        .instance_id("pod-sem")
        .watchdog_lease(Duration::from_secs(1))
        .build()
        .expect("client");
    let semaphore = client.semaphore("lock:exports", 3).expect("semaphore");
    let p1 = semaphore.acquire(LockOptions::new()).await.expect("permit 1");
    let p2 = semaphore.acquire(LockOptions::new()).await.expect("permit 2");
    let rw = client.rw_lock("lock:catalogue").expect("rw-lock");
    let reader = rw.read(LockOptions::new()).await.expect("reader");
    assert!(client.record_holdings().await, "the holdings record is written");

    let (code, json) = lockctl_json(&url, &["show", "lock:exports"]).await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["kind"], "semaphore");
    assert_eq!(json["permits"], 3);
    let holders: Vec<&str> =
        json["holders"].as_array().expect("holders").iter().filter_map(|h| h["token"].as_str()).collect();
    assert_eq!(holders.len(), 2, "{json}");
    assert!(holders.contains(&p1.token()) && holders.contains(&p2.token()));
    assert!(json["holders"][0]["alive"].as_bool().expect("alive"));
    let (_, text, _) = lockctl(&url, &["show", "lock:catalogue"], "").await;
    assert!(text.contains("rw-lock") && text.contains(reader.token()), "{text}");

    let (code, json) = lockctl_json(&url, &["list", "lock:*"]).await;
    assert_eq!(code, 0, "{json}");
    let kinds: Vec<(String, String, u64)> = json
        .as_array()
        .expect("list")
        .iter()
        .map(|l| {
            (
                l["key"].as_str().unwrap_or("").to_owned(),
                l["kind"].as_str().unwrap_or("").to_owned(),
                l["holders"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert!(kinds.contains(&("lock:exports".into(), "semaphore".into(), 2)), "{kinds:?}");
    assert!(kinds.contains(&("lock:catalogue".into(), "rw-lock".into(), 1)), "{kinds:?}");

    // Without --token a shared primitive is a usage error, not a guess.
    let (code, _, stderr) = lockctl(&url, &["unlock", "lock:exports", "--yes"], "").await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--token"), "{stderr}");
    let (code, stdout, stderr) =
        lockctl(&url, &["unlock", "lock:exports", "--yes", "--token", p1.token()], "").await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(semaphore.available().await.expect("available"), 2, "one permit given back, one still held");
    assert!(
        tokio::time::timeout(PATIENCE, p1.lost()).await.is_ok(),
        "the released holder finds out at its renewal"
    );
    assert!(p2.is_held());
    let (code, _, _) =
        lockctl(&url, &["unlock", "lock:catalogue", "--yes", "--token", reader.token()], "").await;
    assert_eq!(code, 0);
    let writer = rw.write(LockOptions::new()).await.expect("the released reader no longer blocks a writer");
    assert!(writer.release().await.expect("release"));
    assert!(p2.release().await.expect("release"));
}

/// One HTTP/1.1 request to `127.0.0.1:port` (`Connection: close`): (status, body).
async fn http(port: u16, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: 0\r\n{auth}\r\n"
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read");
    let status = response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_now_and_the_console_reach_a_running_replica() {
    let server = RedisServer::start();
    let url = server.url();
    let admin_port = redis_fixture::free_port().expect("a free port");
    // Daily at 02:00: only "run now" runs it during the test.
    let mut replica =
        Replica::spawn(&url, &["--cron", "0 0 2 * * *", "--admin-port", &admin_port.to_string()]);
    replica.line_containing(&format!("admin console on http://127.0.0.1:{admin_port}/")).await;
    replica.line_containing("scheduling the daily report").await;

    // lockctl run: the replica runs it once, recorded as asked for by lockctl.
    // (Until the replica's first registration lands, the job is unknown and nothing runs.)
    let stdout = eventually("lockctl run taken", async || {
        let (code, stdout, stderr) = lockctl(&url, &["run", JOB], "").await;
        assert!(code == 0 || stderr.contains("no scheduler replica has a job"), "{stdout}{stderr}");
        (code == 0).then_some(stdout)
    })
    .await;
    assert!(stdout.contains("took the request") && stdout.contains(JOB), "{stdout}");
    replica.line_containing("[pod-1] Starting daily report generation").await;
    let run = eventually("the manual run in the history", async || {
        let (_, json) = lockctl_json(&url, &["history", JOB]).await;
        json["runs"].as_array().and_then(|r| r.first()).filter(|r| r["outcome"] == "ran").cloned()
    })
    .await;
    assert!(run["manual_by"].as_str().is_some_and(|by| by.starts_with("lockctl@")), "{run}");
    let (code, _, stderr) = lockctl(&url, &["run", "no-such-job"], "").await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no-such-job"), "{stderr}");

    // The replica's console: its job with its schedule; pause needs the token.
    let (status, body) = http(admin_port, "GET", "/api/jobs", None).await;
    assert_eq!(status, 200, "{body}");
    let jobs: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        (jobs["jobs"][0]["name"].as_str(), jobs["jobs"][0]["schedule"].as_str()),
        (Some(JOB), Some("0 0 2 * * *"))
    );
    // `--cron` gives the builder's override, even when it repeats the declared schedule.
    assert_eq!(jobs["jobs"][0]["schedule_origin"], "config", "{jobs}");
    assert_eq!(http(admin_port, "POST", "/api/jobs/daily-report/pause", None).await.0, 401);
    let (status, body) = http(admin_port, "POST", "/api/jobs/daily-report/pause", Some(TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    // The replica's audit trail has the action, not only the refusal before it.
    let audit = replica.line_containing("console action done").await;
    assert!(audit.contains("action=\"pause\"") && audit.contains("client=127.0.0.1:"), "{audit}");
    let (_, json) = lockctl_json(&url, &["jobs"]).await;
    assert_eq!(json[0]["paused"], true, "{json}");

    // lockctl serve: the same console, standalone, until SIGTERM.
    let serve_port = redis_fixture::free_port().expect("a free port");
    let mut serve = Command::new(env!("CARGO_BIN_EXE_lockctl"))
        .args(["serve", "--listen", &format!("127.0.0.1:{serve_port}")])
        .env("REDIS_URL", &url)
        .env("LOCKCTL_ADMIN_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start lockctl serve");
    let mut stderr = BufReader::new(serve.stderr.take().expect("piped stderr")).lines();
    let first = tokio::time::timeout(PATIENCE, stderr.next_line()).await.expect("a line").expect("read");
    assert!(
        first.as_deref().is_some_and(|l| l.contains(&format!("console on http://127.0.0.1:{serve_port}/"))),
        "{first:?}"
    );
    let (status, body) = http(serve_port, "GET", "/api/replicas", None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"instance\":\"pod-1\"") && body.contains("\"live\":true"), "{body}");
    let (status, body) = http(serve_port, "POST", "/api/jobs/daily-report/resume", Some(TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"was_paused\":true"), "{body}");
    assert!(!body.contains(&url), "no Redis URL in responses");
    if let Some(pid) = serve.id() {
        let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    }
    let status = tokio::time::timeout(PATIENCE, serve.wait()).await.expect("stops").expect("status");
    assert!(status.success(), "lockctl serve exits 0 on SIGTERM: {status}");

    // A token too short to be a secret is refused before anything is served.
    let mut weak = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    weak.args(["serve", "--listen", "127.0.0.1:0"])
        .env("REDIS_URL", &url)
        .env("LOCKCTL_ADMIN_TOKEN", "short");
    let output = tokio::time::timeout(PATIENCE, weak.output()).await.expect("exits").expect("output");
    assert_eq!(output.status.code(), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stderr).contains("at least 16"));
    replica.stop().await;
}

/// Issue 42 in lockctl: keys that are not locks are refused (exit 2) without their values and
/// stay in Redis; what Redis holds cannot drive the terminal; `pause` refuses an unknown job
/// unless forced; tokens are generated from the OS's random source, weak ones refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_touches_only_locks_and_escapes_what_it_prints() {
    let server = RedisServer::start();
    let url = server.url();
    let secret = r#"{"api_key":"sk_live_x"}"#;
    server.cli(&["SET", "app:session:42", secret]);
    server.cli(&["HSET", "app:profile", "email", "hash-secret"]);
    let holder = LockClient::builder().url(&url).instance_id("pod-x").build().expect("client");
    let guard = holder.acquire("lock:mine", LockOptions::new()).await.expect("take a lock");
    // Operators' tools see a lock once its holder's record names it (written 100 ms after).
    assert!(holder.record_holdings().await, "the holdings record is written");
    let liveness = lock_core::inspect::parse_token(guard.token())
        .and_then(|h| h.liveness_key)
        .expect("the token names its liveness key");
    for key in ["app:session:42", "app:profile", liveness.as_str()] {
        for args in [vec!["show", key], vec!["unlock", key, "--yes"]] {
            let (code, stdout, stderr) = lockctl(&url, &args, "").await;
            assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
            assert!(stderr.contains("is not a lock"), "{args:?}: {stderr}");
            assert!(!format!("{stdout}{stderr}").contains("sk_live") && !stderr.contains("hash-secret"));
        }
        assert_eq!(server.cli(&["EXISTS", key]), "1", "{key} is still in Redis");
    }
    let (code, stdout, stderr) = lockctl(&url, &["show", "lock:mine"], "").await;
    assert_eq!(code, 0, "a lock still shows: {stdout}{stderr}");

    // A history entry full of terminal controls: printed escaped, never raw.
    let job = "escapes";
    let history = lock_scheduler::history_key(job).expect("a job name");
    let nasty = "\u{1b}]0;pwned\u{7}\u{1b}[2J boom \u{202e}txt.exe";
    server.cli(&[
        "XADD",
        &history,
        "*",
        "tick",
        "1700000000000",
        "instance",
        "pod-\u{1b}[31mred",
        "outcome",
        "failed",
        "duration_ms",
        "5",
        "error",
        nasty,
    ]);
    let (code, stdout, _) = lockctl(&url, &["history", job], "").await;
    assert_eq!(code, 0, "{stdout}");
    assert!(
        !stdout.contains('\u{1b}') && !stdout.contains('\u{7}') && !stdout.contains('\u{202e}'),
        "{stdout:?}"
    );
    assert!(stdout.contains("\\u{1b}]0;pwned\\u{7}") && stdout.contains("\\u{202e}txt.exe"), "{stdout}");
    // A job with a maximum number of runs: its count under the runs, and in the JSON.
    let count = lock_scheduler::schema::run_count_key(job).expect("a job name");
    server.cli(&["SET", &count, "4", "PX", "60000"]);
    let (_, stdout, _) = lockctl(&url, &["history", job], "").await;
    assert!(stdout.contains("runs counted (max_runs): 4"), "{stdout}");
    let (_, json) = lockctl_json(&url, &["history", job]).await;
    assert_eq!(json["run_count"], 4, "{json}");

    // pause: an unknown job is refused and leaves no flag, unless --force.
    let (code, _, stderr) = lockctl(&url, &["pause", "no-such-job"], "").await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--force"), "{stderr}");
    let flag = lock_scheduler::pause_key("no-such-job").expect("a job name");
    assert_eq!(server.cli(&["EXISTS", &flag]), "0");
    let (code, _, stderr) = lockctl(&url, &["pause", "no-such-job", "--force"], "").await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(server.cli(&["EXISTS", &flag]), "1");
    let (code, _, stderr) = lockctl(&url, &["pause", job], "").await;
    assert_eq!(code, 0, "a job with a history is known: {stderr}");

    // Tokens: 64 hex digits, new each time; a weak one is refused before anything is served.
    let (code, first, _) = lockctl(&url, &["token"], "").await;
    let (_, second, _) = lockctl(&url, &["token"], "").await;
    let first = first.trim();
    assert_eq!(code, 0);
    assert!(first.len() == 64 && first.bytes().all(|b| b.is_ascii_hexdigit()), "{first}");
    assert_ne!(first, second.trim());
    let mut weak = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    weak.args(["serve", "--listen", "127.0.0.1:0"])
        .env("REDIS_URL", &url)
        .env("LOCKCTL_ADMIN_TOKEN", "a".repeat(16));
    let output = tokio::time::timeout(PATIENCE, weak.output()).await.expect("exits").expect("output");
    assert_eq!(output.status.code(), Some(2), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stderr).contains("different characters"));
    drop(guard);
}

/// `lockctl serve` with named tokens from a file: the history says who acted; a foreign Host is
/// refused; SIGTERM stops it within its grace even with half-open connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_serve_names_its_actors_and_stops_in_bounded_time() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("tokens");
    let alice = "alice-secret-token-0123456789abcdef";
    let carol = "carol-reader-token-Tq6wX2nB8vL4";
    std::fs::write(
        &file,
        format!("# operators\nalice {alice}\nbob bob-secret-token-0123456789abcdef\ncarol {carol} read\n"),
    )
    .expect("write the token file");
    // Readable by its owner only, or lockctl warns first.
    let mut permissions = std::fs::metadata(&file).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o600);
    std::fs::set_permissions(&file, permissions).expect("chmod 600");
    let (code, _, _) = lockctl(&url, &["pause", "nightly", "--force"], "").await;
    assert_eq!(code, 0);
    let port = redis_fixture::free_port().expect("a free port");
    let mut serve = Command::new(env!("CARGO_BIN_EXE_lockctl"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--shutdown-grace", "1s"])
        .arg("--token-file")
        .arg(&file)
        .env("REDIS_URL", &url)
        .env_remove("LOCKCTL_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start lockctl serve");
    let mut stderr = BufReader::new(serve.stderr.take().expect("piped stderr")).lines();
    let first =
        tokio::time::timeout(PATIENCE, stderr.next_line()).await.expect("a first line").expect("read");
    assert!(first.as_deref().is_some_and(|l| l.contains("console on http://")), "{first:?}");

    let (status, body) = http(port, "POST", "/api/jobs/nightly/pause", Some(alice)).await;
    assert_eq!(status, 200, "{body}");
    let flag = server.cli(&["GET", &lock_scheduler::pause_key("nightly").expect("a job name")]);
    assert!(flag.ends_with("by alice"), "the pause flag names the token's owner: {flag}");
    // The audit trail on stderr: who, from where, with which token (its fingerprint only).
    let audit = tokio::time::timeout(PATIENCE, async {
        while let Ok(Some(line)) = stderr.next_line().await {
            if line.contains("console action done") {
                return Some(line);
            }
        }
        None
    })
    .await
    .expect("an audit line in time")
    .expect("an audit line");
    assert!(
        audit.contains("actor=alice") && audit.contains("nightly") && audit.contains("client=127.0.0.1:"),
        "{audit}"
    );
    assert!(!audit.contains(alice), "the token itself is never logged: {audit}");
    let (status, body) =
        http(port, "POST", "/api/jobs/nightly/resume", Some("wrong-token-0123456789abcdef")).await;
    assert_eq!(status, 401, "{body}");
    // A token the file gives the read role: known, and refused any action.
    let (status, body) = http(port, "POST", "/api/jobs/nightly/resume", Some(carol)).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("\"forbidden\"") && body.contains("carol"), "{body}");
    let mut rebound = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    rebound
        .write_all(b"GET /api/jobs HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n")
        .await
        .expect("send");
    let mut response = String::new();
    rebound.read_to_string(&mut response).await.expect("read");
    assert!(response.starts_with("HTTP/1.1 421"), "{response}");

    // Three connections that never finish their request, then SIGTERM.
    let mut half_open = Vec::new();
    for _ in 0..3 {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
        stream.write_all(b"GET / HTTP/1.1\r\nHost: 127.").await.expect("send part of a request");
        half_open.push(stream);
    }
    let (status, _) = http(port, "GET", "/healthz", None).await;
    assert_eq!(status, 200, "the half-open connections are accepted by now");
    let started = Instant::now();
    if let Some(pid) = serve.id() {
        let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    }
    let status = tokio::time::timeout(PATIENCE, serve.wait()).await.expect("stops").expect("status");
    let took = started.elapsed();
    assert!(status.success(), "{status}");
    assert!(took < Duration::from_secs(15), "SIGTERM took {took:?} with half-open connections");
    drop(half_open);
}

/// What an operator's shell does around lockctl: `serve --token` (visible in `ps`) warns and
/// the environment variable does not; output piped into a reader that has gone (`| head`) is
/// not a panic; a run-now in the history says who asked for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_warns_of_a_visible_token_survives_a_closed_pipe_and_names_who_ran_a_job() {
    let server = RedisServer::start();
    let url = server.url();
    let warning = "shows in `ps`";
    // A weak token: lockctl refuses it and exits, so nothing is served either way.
    let weak = "a".repeat(16);
    let (code, _, stderr) = lockctl(&url, &["serve", "--listen", "127.0.0.1:0", "--token", &weak], "").await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(warning), "a token flag is warned of: {stderr}");
    let mut from_env = Command::new(env!("CARGO_BIN_EXE_lockctl"));
    from_env
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("REDIS_URL", &url)
        .env("LOCKCTL_ADMIN_TOKEN", &weak);
    let output = tokio::time::timeout(PATIENCE, from_env.output()).await.expect("exits").expect("output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("different characters") && !stderr.contains(warning), "{stderr}");

    let job = "piped";
    let history = lock_scheduler::history_key(job).expect("a job name");
    for (tick, by) in [("1700000000000", None), ("1700000001000", Some("alice"))] {
        let mut args = vec!["XADD", &history, "*", "tick", tick, "instance", "pod-1", "outcome", "ran"];
        args.extend(["duration_ms", "5"]);
        if let Some(by) = by {
            args.extend([lock_scheduler::schema::field::MANUAL_BY, by]);
            args.extend([lock_scheduler::schema::field::REQUEST, "request-1"]);
        }
        server.cli(&args);
    }
    let (code, stdout, stderr) = lockctl(&url, &["history", job], "").await;
    assert_eq!(code, 0, "{stderr}");
    let manual = stdout.lines().find(|l| l.contains("2023-11-14T22:13:21Z")).expect("the run-now's row");
    assert!(manual.contains("ran (run now by alice)"), "{stdout}");
    let scheduled = stdout.lines().find(|l| l.contains("2023-11-14T22:13:20Z")).expect("the scheduled row");
    assert!(!scheduled.contains("run now"), "{stdout}");

    // stdout is a pipe whose reader closed before lockctl started: every write fails (EPIPE).
    for args in [vec!["history", job], vec!["--json", "history", job]] {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let mut closed = Command::new(env!("CARGO_BIN_EXE_lockctl"));
        closed.args(&args).env("REDIS_URL", &url).stdout(Stdio::from(writer)).stderr(Stdio::piped());
        let output = tokio::time::timeout(PATIENCE, closed.output()).await.expect("exits").expect("output");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// `lockctl elections` lists an election with its leader, term and candidates, in text and
/// JSON; none at all exits with the "nothing" code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_lists_elections() {
    let server = RedisServer::start();
    let url = server.url();
    let (code, _, _) = lockctl(&url, &["elections"], "").await;
    assert_eq!(code, 1, "no election: nothing to list");
    let a = LockClient::builder().url(&url).instance_id("member-a").build().expect("client");
    let b = LockClient::builder().url(&url).instance_id("member-b").build().expect("client");
    let leader = a.election("election:feed").join().await.expect("joined");
    let term = leader.elected().await.expect("leads");
    let _follower = b.election("election:feed").join().await.expect("joined");
    eventually("b waits in the queue", async || (b.stats().waiters_on("election:feed") == 1).then_some(()))
        .await;
    let (code, text, stderr) = lockctl(&url, &["elections"], "").await;
    assert_eq!(code, 0, "{stderr}");
    let row = text.lines().find(|l| l.starts_with("election:feed")).unwrap_or_else(|| panic!("{text}"));
    assert!(
        row.contains("member-a") && row.contains(&term.to_string()) && row.contains("member-b:"),
        "{text}"
    );
    let (code, json) = lockctl_json(&url, &["elections"]).await;
    assert_eq!(code, 0);
    assert_eq!(json[0]["name"], "election:feed");
    assert_eq!(json[0]["leader"]["instance"], "member-a");
    assert_eq!(json[0]["leader"]["term"], term);
    assert_eq!(json[0]["candidates"].as_array().map(Vec::len), Some(1));
    println!("{text}");
}
