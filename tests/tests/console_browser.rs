//! The console's page in a real headless browser (Debian's `chromium`, which `.ci/run`
//! installs), against a real redis-server and three scheduler replicas: the DOM shows a held
//! lock (escaped: its key is markup) and a job's history with its chart; pressing "Pause" in
//! the page, with the token typed into its token box, makes every replica skip the job; and
//! screenshots a person can open are written under `target/console-screenshots/`.
//!
//! Without chromium on PATH the test fails, saying how to install it; set
//! `LOCK_CONSOLE_SKIP_BROWSER=1` to skip it instead (it then prints SKIPPED).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::Html;
use axum::routing::get;
use lock_console::Console;
use lock_core::LockOptions;
use lock_scheduler::{Job, RunOutcome, Scheduler, SchedulerHandle};
use tests::harness::{RedisServer, client, init_tracing, wait_until};
use tests::http;

const TOKEN: &str = "browser-test-token-0123456789";
const MARKUP: &str = "<script>alert(1)</script>";
const BROWSER: &str = "chromium";

/// A page of the test (not of the console), same origin: it loads the console's jobs page in
/// a frame, puts the token where the console's script keeps it, presses the job's "Pause"
/// button, and writes what the reloaded page says into `#result`.
fn press_pause_page() -> String {
    format!(
        r#"<!doctype html><html><body><pre id="result">pending</pre>
<iframe id="f" src="/jobs" width="1200" height="700"></iframe>
<script>
sessionStorage.setItem("lockConsoleToken", "{TOKEN}");
var f = document.getElementById("f"), stage = 0;
function done(text) {{ stage = 2; document.getElementById("result").textContent = text; }}
f.addEventListener("load", function () {{
  var d = f.contentDocument;
  if (stage === 0) {{
    var button = d.querySelector('tr[data-job="report"] button[data-url$="/report/pause"]');
    if (!button) {{ done("no pause button"); return; }}
    stage = 1;
    button.click();
  }} else if (stage === 1) {{
    var cell = d.querySelector('tr[data-job="report"] td.paused');
    done(cell ? "row says: " + cell.textContent : "no row");
  }}
}});
</script></body></html>"#
    )
}

/// Runs chromium headless with `args` then `url`; returns its stdout.
async fn chromium(args: &[&str], url: &str) -> String {
    let profile = tempfile::tempdir().expect("a browser profile directory");
    let profile_arg = format!("--user-data-dir={}", profile.path().display());
    let mut command = tokio::process::Command::new(BROWSER);
    command
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
        .arg(&profile_arg)
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .unwrap_or_else(|_| panic!("chromium did not finish within 60 s on {url}"))
        .expect("run chromium");
    assert!(output.status.success(), "chromium failed on {url}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The DOM after the page's scripts ran: a virtual-time budget under the page's 5 s
/// self-refresh (past it, chromium keeps reloading the page and never dumps).
async fn dump_dom(url: &str) -> String {
    chromium(&["--virtual-time-budget=4000", "--dump-dom"], url).await
}

async fn screenshot(url: &str, path: &Path) {
    let _ = std::fs::remove_file(path);
    let arg = format!("--screenshot={}", path.display());
    chromium(&["--window-size=1280,860", "--hide-scrollbars", &arg], url).await;
    let png = std::fs::read(path).unwrap_or_else(|e| panic!("no screenshot at {}: {e}", path.display()));
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{} is not a real PNG",
        path.display()
    );
    eprintln!("console_browser: screenshot {} ({} bytes)", path.display(), png.len());
}

fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("console-screenshots");
    std::fs::create_dir_all(&dir).expect("create target/console-screenshots");
    dir
}

fn browser_available() -> bool {
    let found = std::process::Command::new(BROWSER)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        if std::env::var_os("LOCK_CONSOLE_SKIP_BROWSER").is_some() {
            eprintln!(
                "SKIPPED: console browser test: {BROWSER} is not on PATH (LOCK_CONSOLE_SKIP_BROWSER is set)"
            );
            return false;
        }
        panic!(
            "{BROWSER} is not on PATH: install it (apt-get install -y chromium) or set LOCK_CONSOLE_SKIP_BROWSER=1"
        );
    }
    true
}

type Reports = Arc<Mutex<Vec<(String, RunOutcome)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_locks_and_history_and_its_pause_button_pauses_every_replica() {
    if !browser_available() {
        return;
    }
    init_tracing();
    let server = RedisServer::start();
    let reports: Reports = Arc::default();
    let mut handles: Vec<SchedulerHandle> = Vec::new();
    for instance in ["pod-a", "pod-b", "pod-c"] {
        let scheduler = Scheduler::builder()
            .client(client(&server, instance))
            .job(
                Job::new("report", "* * * * * *", || async {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                })
                .lock("lock:report"),
            )
            .build()
            .expect("valid scheduler");
        let (mut rx, sink, name) = (scheduler.subscribe(), reports.clone(), instance.to_owned());
        tokio::spawn(async move {
            while let Ok(report) = rx.recv().await {
                sink.lock().expect("reports").push((name.clone(), report.outcome));
            }
        });
        handles.push(scheduler.start().await.expect("scheduler starts"));
    }
    let holder = client(&server, "pod-x");
    let held = holder.acquire(MARKUP, LockOptions::new()).await.expect("hold the markup lock");
    let console = Console::new(client(&server, "console")).token(TOKEN).expect("token");
    let app = console.router().route("/test/press-pause", get(|| async { Html(press_pause_page()) }));
    let addr: SocketAddr = http::serve(app).await;
    let url = |path: &str| format!("http://{addr}{path}");
    let ran = |reports: &Reports| {
        reports.lock().expect("reports").iter().filter(|(_, o)| *o == RunOutcome::Ran).count()
    };
    assert!(wait_until(Duration::from_secs(8), || ran(&reports) >= 3).await, "the job ran");

    // The locks page: the held lock, its key shown as text (the only script is the console's).
    let dom = dump_dom(&url("/locks?pattern=*&limit=100")).await;
    assert!(dom.contains("<td class=\"key\">&lt;script&gt;alert(1)&lt;/script&gt;</td>"), "{dom}");
    assert_eq!(dom.matches("<script").count(), 1, "no script from Redis in the DOM: {dom}");
    assert!(dom.contains("pod-x"), "the holder's instance: {dom}");
    // A job's page: its history table and the chart of its runs.
    let dom = dump_dom(&url("/jobs/report")).await;
    assert!(dom.contains("<table id=\"history\">") && dom.contains("<td class=\"ok\">ran</td>"), "{dom}");
    assert!(dom.contains("<svg id=\"chart\"") && dom.contains("<rect class=\"ok\""), "{dom}");
    eprintln!(
        "console_browser: /jobs/report DOM holds the history table and the chart ({} bytes)",
        dom.len()
    );
    let dir = screenshot_dir();
    screenshot(&url("/"), &dir.join("overview.png")).await;
    screenshot(&url("/jobs/report"), &dir.join("job.png")).await;
    screenshot(&url("/locks?pattern=*&limit=100"), &dir.join("locks.png")).await;

    // Press "Pause" in the page.
    let dom = dump_dom(&url("/test/press-pause")).await;
    assert!(
        dom.contains("<pre id=\"result\">row says: paused</pre>"),
        "the page after pressing Pause: {dom}"
    );
    let state = lock_scheduler::control::pause_state(&holder, "report").await.expect("pause state");
    assert!(state.paused.as_deref().is_some_and(|p| p.ends_with("by console")), "{state:?}");
    eprintln!("console_browser: pressed Pause in the page; Redis says: {:?}", state.paused);
    // Every replica skips the job from then on.
    let seen = reports.lock().expect("reports").len();
    let skipped_by = |reports: &Reports| -> BTreeSet<String> {
        reports.lock().expect("reports")[seen..]
            .iter()
            .filter(|(_, o)| *o == RunOutcome::SkippedPaused)
            .map(|(instance, _)| instance.clone())
            .collect()
    };
    assert!(
        wait_until(Duration::from_secs(8), || skipped_by(&reports).len() == 3).await,
        "every replica skipped the paused job: {:?}",
        skipped_by(&reports)
    );
    let ran_before = ran(&reports);
    eprintln!("console_browser: replicas skipping the paused job: {:?}", skipped_by(&reports));
    screenshot(&url("/jobs"), &dir.join("jobs-paused.png")).await;
    assert_eq!(ran(&reports), ran_before, "no run while paused");
    drop(held);
    for handle in handles {
        handle.shutdown().await;
    }
}
