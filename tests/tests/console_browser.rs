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
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::Html;
use axum::routing::{get, post};
use lock_console::Console;
use lock_core::LockOptions;
use lock_scheduler::chrono::Utc;
use lock_scheduler::{Job, RunOutcome, Scheduler, SchedulerHandle};
use tests::harness::{RedisServer, client, init_tracing, wait_until};
use tests::http;

const TOKEN: &str = "browser-test-token-0123456789";
const MARKUP: &str = "<script>alert(1)</script>";
const BROWSER: &str = "chromium";

/// A page of the test (not of the console), same origin: it loads the console's jobs page in
/// a frame, puts the token where the console's script keeps it, presses the job's "Pause"
/// button and cancels the question it asks (nothing must happen), presses it again and
/// confirms, and writes into `#result` what the frame says once its row shows the pause (the
/// script updates the table in the background: the frame must not be reloaded).
fn press_pause_page() -> String {
    format!(
        r#"<!doctype html><html><body><pre id="result">pending</pre>
<iframe id="f" src="/jobs" width="1200" height="700"></iframe>
<script>
sessionStorage.setItem("lockConsoleToken", "{TOKEN}");
var f = document.getElementById("f"), loads = 0, log = [];
function done(text) {{ document.getElementById("result").textContent = log.join("; ") + (log.length ? "; " : "") + text; }}
function row() {{
  var cell = f.contentDocument.querySelector('tr[data-job="report"] td.paused');
  return cell ? cell.textContent : "no row";
}}
function wait(check, then, left) {{
  if (check()) {{ then(); return; }}
  if (left <= 0) {{ done("timed out; row says: " + row()); return; }}
  setTimeout(function () {{ wait(check, then, left - 1); }}, 100);
}}
function pauseButton() {{
  return f.contentDocument.querySelector('tr[data-job="report"] button[data-url$="/report/pause"]');
}}
f.addEventListener("load", function () {{
  loads += 1;
  if (loads > 1) return;
  var d = f.contentDocument, dialog = d.getElementById("confirm");
  if (!pauseButton()) {{ done("no pause button"); return; }}
  pauseButton().click();
  log.push("asked: " + (dialog.open ? d.getElementById("confirm-question").textContent : "nothing"));
  dialog.querySelector("button.cancel").click();
  // Cancelled: after three update intervals nothing was sent and the row still says so.
  setTimeout(function () {{
    log.push("after cancel: " + row() + " (dialog open: " + dialog.open + ")");
    pauseButton().click();
    dialog.querySelector("button.confirm").click();
    wait(function () {{ return row() === "paused"; }}, function () {{
      var status = d.getElementById("status");
      done("row says: " + row() + "; loads: " + loads + "; status: " + status.textContent);
    }}, 200);
  }}, 16000);
}});
</script></body></html>"#
    )
}

/// A page of the test: the console page `src` in a frame (filling the window with `full=1`);
/// it fills the fields `fill` names (a JSON object: selector to value), presses the button
/// `button`, writes the question the page asks and, unless `stop=asked`, confirms it and
/// writes the feedback the frame shows, with its link, into `#result`.
fn act_page() -> String {
    format!(
        r#"<!doctype html><html><body style="margin:0"><pre id="result">pending</pre>
<iframe id="f" width="1200" height="700"></iframe>
<script>
sessionStorage.setItem("lockConsoleToken", "{TOKEN}");
var params = new URLSearchParams(location.search), f = document.getElementById("f"), loads = 0, asked = "";
if (params.get("full") === "1") {{
  f.setAttribute("style", "position:fixed;top:0;left:0;width:100%;height:100%;border:0");
}}
f.src = params.get("src");
function done(text) {{ document.getElementById("result").textContent = "asked: " + asked + " | " + text + "; loads: " + loads; }}
function wait(check, then, left) {{
  if (check()) {{ then(); return; }}
  if (left <= 0) {{ done("timed out; status: " + f.contentDocument.getElementById("status").textContent); return; }}
  setTimeout(function () {{ wait(check, then, left - 1); }}, 100);
}}
f.addEventListener("load", function () {{
  loads += 1;
  if (loads > 1) return;
  var d = f.contentDocument, fill = JSON.parse(params.get("fill") || "{{}}");
  Object.keys(fill).forEach(function (selector) {{
    var field = d.querySelector(selector);
    if (field.type === "checkbox") field.checked = !!fill[selector]; else field.value = fill[selector];
  }});
  var button = d.querySelector(params.get("button"));
  if (!button) {{ done("no button " + params.get("button")); return; }}
  button.click();
  var dialog = d.getElementById("confirm");
  asked = dialog.open ? d.getElementById("confirm-question").textContent : "nothing";
  if (params.get("stop") === "asked") {{ done("left open"); return; }}
  dialog.querySelector("button.confirm").click();
  var status = d.getElementById("status");
  wait(function () {{ return status.className === "ok" || status.className === "bad"; }}, function () {{
    var link = status.querySelector("a");
    done(status.className + ": " + status.textContent + "; link: " + (link ? link.getAttribute("href") : "none"));
  }}, 300);
}});
</script></body></html>"#
    )
}

/// A page of the test: a job's page in a frame. It types a search into the history filter
/// without applying it and moves on, and checks the text survives two background updates; then
/// selects the history table's text and checks that no update replaces it for three
/// intervals (the footer says why), and that updates resume once the selection is cleared.
fn keep_page() -> String {
    r#"<!doctype html><html><body><pre id="result">pending</pre>
<iframe id="f" src="/jobs/export" width="1200" height="700"></iframe>
<script>
var f = document.getElementById("f"), loads = 0, log = [];
function d() { return f.contentDocument; }
function updates() { return parseInt(d().body.getAttribute("data-updates") || "0", 10); }
function done(text) { document.getElementById("result").textContent = log.join("; ") + "; " + text + "; loads: " + loads; }
function wait(check, then, left) {
  if (check()) { then(); return; }
  if (left <= 0) { done("timed out at " + updates() + " updates"); return; }
  setTimeout(function () { wait(check, then, left - 1); }, 100);
}
window.addEventListener("error", function (event) { done("script error: " + event.message); });
f.addEventListener("load", function () {
  loads += 1;
  if (loads > 1) return;
  log.push("loaded at " + updates() + " updates");
  var search = d().querySelector('#history-filter input[name="q"]');
  search.focus();
  search.value = "refused";
  search.blur();
  var before = updates();
  wait(function () { return updates() >= before + 2; }, function () {
    var now = d().querySelector('#history-filter input[name="q"]');
    log.push("typed after " + (updates() - before) + " updates: " + now.value + " (rendered: '" + now.defaultValue + "')");
    var selection = f.contentWindow.getSelection();
    selection.selectAllChildren(d().getElementById("history"));
    var held = updates();
    setTimeout(function () {
      var note = d().getElementById("held");
      log.push("while selected: " + (updates() - held) + " updates, note: " + (note ? note.textContent.trim() : "none") +
        ", still selected: " + (String(selection).length > 0));
      selection.removeAllRanges();
      wait(function () { return updates() > held; }, function () { done("resumed"); }, 300);
    }, 16000);
  }, 300);
});
</script></body></html>"#
        .to_owned()
}

/// A page of the test: the console's job page in a frame; it presses "Run now" and writes
/// the feedback the frame shows, with its link, into `#result`.
fn press_run_page() -> String {
    format!(
        r#"<!doctype html><html><body><pre id="result">pending</pre>
<iframe id="f" src="/jobs/report" width="1200" height="700"></iframe>
<script>
sessionStorage.setItem("lockConsoleToken", "{TOKEN}");
var f = document.getElementById("f"), loads = 0;
function done(text) {{ document.getElementById("result").textContent = text + "; loads: " + loads; }}
function wait(check, then, left) {{
  if (check()) {{ then(); return; }}
  if (left <= 0) {{ done("timed out; status: " + f.contentDocument.getElementById("status").textContent); return; }}
  setTimeout(function () {{ wait(check, then, left - 1); }}, 100);
}}
f.addEventListener("load", function () {{
  loads += 1;
  if (loads > 1) return;
  var button = f.contentDocument.querySelector('button[data-url$="/report/run"]');
  if (!button) {{ done("no run button"); return; }}
  button.click();
  f.contentDocument.querySelector('#confirm button.confirm').click();
  var status = f.contentDocument.getElementById("status");
  wait(function () {{ return status.className === "ok" || status.className === "bad"; }}, function () {{
    var link = status.querySelector("a");
    done(status.className + ": " + status.textContent + "; link: " + (link ? link.getAttribute("href") : "none"));
  }}, 300);
}});
</script></body></html>"#
    )
}

/// A page of the test: the console's jobs page in a frame, the job paused. It resumes the job
/// through the API from outside the frame and waits for the frame's row to say so, without a
/// reload; then, with the focus in the frame's token box, pauses it again and checks that
/// the frame did not update during three update intervals; then moves the focus away and
/// waits for the frame to show the pause.
fn background_page() -> String {
    format!(
        r#"<!doctype html><html><body><pre id="result">pending</pre>
<iframe id="f" src="/jobs" width="1200" height="700"></iframe>
<script>
var f = document.getElementById("f"), loads = 0, log = [];
function done(text) {{ document.getElementById("result").textContent = log.join("; ") + "; " + text + "; loads: " + loads; }}
function row() {{
  var cell = f.contentDocument.querySelector('tr[data-job="report"] td.paused');
  return cell ? cell.textContent : "no row";
}}
function wait(check, then, left) {{
  if (check()) {{ then(); return; }}
  if (left <= 0) {{ done("timed out; row says: " + row()); return; }}
  setTimeout(function () {{ wait(check, then, left - 1); }}, 100);
}}
function act(action) {{
  return fetch("/api/jobs/report/" + action, {{ method: "POST", headers: {{ Authorization: "Bearer {TOKEN}" }} }});
}}
f.addEventListener("load", function () {{
  loads += 1;
  if (loads > 1) return;
  log.push("first: " + row());
  act("resume").then(function () {{
    wait(function () {{ return row() === "no"; }}, function () {{
      log.push("after resume: " + row());
      f.contentDocument.getElementById("token").focus();
      var before = f.contentDocument.body.getAttribute("data-updates");
      act("pause").then(function () {{
        setTimeout(function () {{
          var held = f.contentDocument.getElementById("held");
          log.push("while typing: " + row() + " (updates " + before + " to " + f.contentDocument.body.getAttribute("data-updates") + ", note: " + (held ? "shown" : "none") + ")");
          f.contentDocument.activeElement.blur();
          wait(function () {{ return row() === "paused"; }}, function () {{ done("after typing: " + row()); }}, 200);
        }}, 16000);
      }});
    }}, 200);
  }});
}});
</script></body></html>"#
    )
}

/// A page of the test: the console's overview in a frame; it stops Redis (through a route of
/// the test) and waits for the frame's stale banner, then starts Redis again and waits for
/// the banner to go. The frame is never reloaded.
fn stale_page() -> String {
    r#"<!doctype html><html><body><pre id="result">pending</pre>
<iframe id="f" src="/" width="1200" height="700"></iframe>
<script>
var f = document.getElementById("f"), loads = 0, log = [];
function done(text) { document.getElementById("result").textContent = log.join("; ") + "; " + text + "; loads: " + loads; }
function wait(check, then, left) {
  if (check()) { then(); return; }
  if (left <= 0) { done("timed out"); return; }
  setTimeout(function () { wait(check, then, left - 1); }, 100);
}
function d() { return f.contentDocument; }
f.addEventListener("load", function () {
  loads += 1;
  if (loads > 1) return;
  log.push("locks held: " + d().getElementById("locks-held").textContent);
  fetch("/test/redis/stop", { method: "POST" }).then(function () {
    wait(function () { return d().body.getAttribute("data-stale") === "yes"; }, function () {
      var banner = d().getElementById("stale");
      log.push("banner: " + banner.textContent + " (hidden: " + banner.hidden + ")");
      log.push("still shown: " + d().getElementById("locks-held").textContent);
      fetch("/test/redis/start", { method: "POST" }).then(function () {
        wait(function () { return !d().body.hasAttribute("data-stale"); }, function () {
          done("after restart: banner hidden " + d().getElementById("stale").hidden);
        }, 600);
      });
    }, 600);
  });
});
</script></body></html>"#
        .to_owned()
}

/// A page of the test: the console's jobs page in a frame as wide as a phone (390 px). It
/// reports whether the page itself is wider than the frame (it must not be: a wide table
/// scrolls inside its own box) and whether the table's box scrolls.
fn phone_page() -> String {
    r#"<!doctype html><html><body><pre id="result">pending</pre>
<iframe id="f" src="/jobs" width="390" height="800"></iframe>
<script>
var f = document.getElementById("f");
f.addEventListener("load", function () {
  var d = f.contentDocument, box = d.querySelector(".scroll");
  document.getElementById("result").textContent =
    "page wider than the frame: " + (d.documentElement.scrollWidth > d.documentElement.clientWidth) +
    "; table box scrolls: " + (box ? box.scrollWidth > box.clientWidth : "no box");
});
</script></body></html>"#
        .to_owned()
}

/// The test's action page (`act_page`) for the console page `src`: press `button` after
/// filling `fill` (JSON), with `extra` query parameters (`&stop=asked`, `&full=1`).
fn act_url(page: &str, src: &str, button: &str, fill: &str, extra: &str) -> String {
    let encode = |text: &str| -> String {
        text.bytes()
            .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect()
    };
    format!("{page}?src={}&button={}&fill={}{extra}", encode(src), encode(button), encode(fill))
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

/// The DOM after the page's scripts ran for 4 s of virtual time.
async fn dump_dom(url: &str) -> String {
    dump_dom_after(url, 4_000).await
}

/// The DOM after `budget_ms` of virtual time: chromium runs the page's timers that fast, and
/// holds virtual time while a request is under way, so a test page's waits (bounded counts of
/// 100 ms timers) end on their condition or their deadline, not on the machine's speed.
async fn dump_dom_after(url: &str, budget_ms: u32) -> String {
    let budget = format!("--virtual-time-budget={budget_ms}");
    chromium(&[&budget, "--dump-dom"], url).await
}

async fn screenshot(url: &str, path: &Path) {
    screenshot_at(url, path, "1280,860").await;
}

/// A screenshot with the window `size` (`"width,height"`), after the page's scripts ran.
async fn screenshot_at(url: &str, path: &Path, size: &str) {
    let _ = std::fs::remove_file(path);
    let arg = format!("--screenshot={}", path.display());
    let size = format!("--window-size={size}");
    chromium(&[&size, "--hide-scrollbars", "--virtual-time-budget=2000", &arg], url).await;
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

/// The text between the first `start` and the next `end` in `text` (empty when absent).
fn between<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    text.split_once(start).and_then(|(_, rest)| rest.split_once(end)).map_or("", |(inside, _)| inside)
}

/// What the replicas reported: (instance, job, outcome).
type Reports = Arc<Mutex<Vec<(String, String, RunOutcome)>>>;

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
            // A second job that fails every third call on each replica, with varied
            // durations: the chart then has more than one outcome to tell apart.
            .job(
                Job::new("export", "* * * * * *", {
                    let calls = Arc::new(AtomicU32::new(0));
                    move || {
                        let call = calls.fetch_add(1, Ordering::Relaxed);
                        async move {
                            tokio::time::sleep(Duration::from_millis(20 + u64::from(call % 5) * 40)).await;
                            if call % 3 == 2 {
                                Err(anyhow::anyhow!("export target refused the upload"))
                            } else {
                                Ok(())
                            }
                        }
                    }
                })
                .lock("lock:export"),
            )
            .build()
            .expect("valid scheduler");
        let (mut rx, sink, name) = (scheduler.subscribe(), reports.clone(), instance.to_owned());
        tokio::spawn(async move {
            while let Ok(report) = rx.recv().await {
                sink.lock().expect("reports").push((name.clone(), report.job, report.outcome));
            }
        });
        handles.push(scheduler.start().await.expect("scheduler starts"));
    }
    let holder = client(&server, "pod-x");
    let held = holder.acquire(MARKUP, LockOptions::new()).await.expect("hold the markup lock");
    assert!(holder.record_holdings().await, "the holdings record is written");
    let console = Console::new(client(&server, "console")).token(TOKEN).expect("token");
    let app = console
        .router()
        .route("/test/press-pause", get(|| async { Html(press_pause_page()) }))
        .route("/test/background", get(|| async { Html(background_page()) }))
        .route("/test/phone", get(|| async { Html(phone_page()) }))
        .route("/test/press-run", get(|| async { Html(press_run_page()) }))
        .route("/test/act", get(|| async { Html(act_page()) }))
        .route("/test/keep", get(|| async { Html(keep_page()) }));
    let addr: SocketAddr = http::serve(app).await;
    let url = |path: &str| format!("http://{addr}{path}");
    let ran = |reports: &Reports| {
        reports
            .lock()
            .expect("reports")
            .iter()
            .filter(|(_, j, o)| j == "report" && *o == RunOutcome::Ran)
            .count()
    };
    assert!(wait_until(Duration::from_secs(8), || ran(&reports) >= 3).await, "the job ran");

    // The locks page: the held lock, its key shown as text (the only script is the console's).
    let dom = dump_dom(&url("/locks?pattern=*&limit=100")).await;
    assert!(
        dom.contains(
            "<td class=\"key\"><a href=\"/locks/%3Cscript%3Ealert%281%29%3C%2Fscript%3E\">&lt;script&gt;alert(1)&lt;/script&gt;</a></td>"
        ),
        "the key, escaped, links to its page: {dom}"
    );
    assert_eq!(dom.matches("<script").count(), 1, "no script from Redis in the DOM: {dom}");
    assert!(dom.contains("pod-x"), "the holder's instance: {dom}");
    // A job's page: its history table and the chart of its runs.
    let dom = dump_dom(&url("/jobs/report")).await;
    assert!(dom.contains("<table id=\"history\">") && dom.contains("<td class=\"ok\">ran</td>"), "{dom}");
    assert!(dom.contains("<svg id=\"chart\"") && dom.contains("<rect class=\"ok\""), "{dom}");
    // The chart's axes: duration ticks from 0, the oldest and newest runs' slots, a legend.
    assert!(dom.contains("id=\"y-tick-0\" x=\"58.0\" y=\"154.0\" text-anchor=\"end\">0 ms</text>"), "{dom}");
    assert!(dom.contains("id=\"y-tick-2\"") && dom.contains(">duration</text>"), "{dom}");
    assert!(
        dom.contains("id=\"x-tick-0\"") && dom.contains(">slot (UTC), one bar per run, oldest left</text>"),
        "{dom}"
    );
    assert!(dom.contains("<ul class=\"legend\" id=\"legend\"><li><i class=\"ok\"></i>ran ("), "{dom}");
    eprintln!(
        "console_browser: /jobs/report DOM holds the history table and the chart ({} bytes)",
        dom.len()
    );

    // The replicas page: which replica made the job's last run (from the same snapshot).
    let dom = dump_dom(&url("/replicas")).await;
    assert_eq!(dom.matches("<td class=\"ok\">yes</td>").count(), 3, "three live replicas: {dom}");
    assert_eq!(
        dom.matches("<a href=\"/jobs/report\">report</a> (").count(),
        1,
        "one replica made the last run: {dom}"
    );

    // A lock's page: a semaphore's two holders, each with its liveness and its own Unlock
    // button, and a caller queued for a permit.
    let other = client(&server, "pod-y");
    let semaphore = |c: &lock_core::LockClient| c.semaphore("sem:exports", 2).expect("a semaphore");
    let first = semaphore(&holder).acquire(LockOptions::new()).await.expect("first permit");
    let second = semaphore(&other).acquire(LockOptions::new()).await.expect("second permit");
    assert!(holder.record_holdings().await && other.record_holdings().await, "the records are written");
    let queued = client(&server, "pod-z");
    let waiter = tokio::spawn(async move {
        let permit = semaphore(&queued).acquire(LockOptions::new().wait(Duration::from_secs(120))).await;
        drop(permit);
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let info = holder.inspect("sem:exports").await.expect("inspect the semaphore");
        if !info.waiters.is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the third caller never queued: {info:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let dom = dump_dom(&url("/locks/sem%3Aexports")).await;
    assert!(dom.contains("<dd id=\"lock-kind\">semaphore</dd>"), "{dom}");
    assert!(dom.contains("<dd id=\"lock-held\">yes, 2 holder(s) of 2 permits</dd>"), "{dom}");
    let holders = between(&dom, "<table id=\"holders\">", "</table>");
    assert_eq!(holders.matches("<tr><td>permit</td>").count(), 2, "{holders}");
    assert!(holders.contains("<td>pod-x</td>") && holders.contains("<td>pod-y</td>"), "{holders}");
    assert_eq!(holders.matches("<td class=\"ok\">yes</td>").count(), 2, "both alive: {holders}");
    assert_eq!(holders.matches("data-url=\"/api/locks/sem%3Aexports?token=").count(), 2, "{holders}");
    let waiters = between(&dom, "<table id=\"waiters\">", "</table>");
    assert!(waiters.contains("<td class=\"ok\">yes</td>"), "one live waiter: {waiters}");
    eprintln!("console_browser: /locks/sem:exports shows 2 permit holders and a waiter");
    // A fenced lock's page shows its fence.
    let fenced =
        holder.acquire("lock:nightly", LockOptions::new().fencing(true)).await.expect("a fenced lock");
    assert!(holder.record_holdings().await, "the holdings record is written");
    let dom = dump_dom(&url("/locks/lock%3Anightly")).await;
    let fence = between(&dom, "<dd id=\"lock-fence\">", "</dd>");
    assert!(fence.parse::<u64>().is_ok(), "a fence number, not {fence:?}: {dom}");
    assert!(
        between(&dom, "<table id=\"holders\">", "</table>").contains("<tr><td>holder</td><td>pod-x</td>"),
        "{dom}"
    );

    // Usable at phone width: the page keeps to the screen, the table scrolls in its box.
    let dom = dump_dom(&url("/test/phone")).await;
    assert!(
        dom.contains("<pre id=\"result\">page wider than the frame: false; table box scrolls: true</pre>"),
        "{dom}"
    );

    let dir = screenshot_dir();
    screenshot(&url("/locks/sem%3Aexports"), &dir.join("lock.png")).await;
    screenshot_at(&url("/jobs"), &dir.join("jobs-phone.png"), "390,844").await;
    waiter.abort();
    drop((first, second, fenced));
    screenshot(&url("/"), &dir.join("overview.png")).await;
    screenshot(&url("/jobs/report"), &dir.join("job.png")).await;
    // The failing job's page: its chart tells runs that failed from runs that ran.
    let failed = |reports: &Reports| {
        reports
            .lock()
            .expect("reports")
            .iter()
            .filter(|(_, j, o)| j == "export" && matches!(o, RunOutcome::Failed(_)))
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(20), || failed(&reports) >= 2).await,
        "the export job failed twice"
    );
    let dom = dump_dom(&url("/jobs/export")).await;
    let legend = between(&dom, "<ul class=\"legend\" id=\"legend\">", "</ul>");
    assert!(
        legend.contains("<i class=\"ok\"></i>ran (") && legend.contains("<i class=\"bad\"></i>failed ("),
        "{legend}"
    );
    assert!(dom.contains("<rect class=\"bad\""), "{dom}");
    screenshot(&url("/jobs/export"), &dir.join("job-export.png")).await;
    screenshot(&url("/locks?pattern=*&limit=100"), &dir.join("locks.png")).await;

    // The failing job's page: its runs per hour, the backfill form, the history's filter.
    let counts = between(&dom, "<ul class=\"legend\" id=\"counts-legend\">", "</ul>");
    assert!(
        counts.contains("<i class=\"bad\"></i>failed (") && dom.contains("<svg id=\"counts\""),
        "{counts}"
    );
    assert!(
        dom.contains("<form id=\"backfill\" class=\"filter\">") && dom.contains("id=\"history-filter\""),
        "{dom}"
    );
    // A failed run's own page, and its retry from there: the page asks, then queues the slot.
    let probe = client(&server, "probe");
    let failed_run = lock_scheduler::control::history(&probe, "export", 100)
        .await
        .expect("export's history")
        .into_iter()
        .find(|e| e.outcome == "failed")
        .expect("a failed run of export");
    let run_path = format!("/jobs/export/runs/{}", failed_run.id);
    let dom = dump_dom(&url(&run_path)).await;
    assert!(dom.contains("<pre id=\"run-error\">export target refused the upload</pre>"), "{dom}");
    assert!(dom.contains("<p id=\"retry\"><button"), "{dom}");
    let slot_runs = between(&dom, "<table id=\"slot-runs\">", "</table>");
    assert!(
        slot_runs.contains("<tr class=\"this\"><td><a href=\"/jobs/export/runs/")
            && slot_runs.contains(&failed_run.id),
        "the run is among its slot's: {slot_runs}"
    );
    screenshot(&url(&run_path), &dir.join("run.png")).await;
    let dom = dump_dom_after(&act_url(&url("/test/act"), &run_path, "#retry button", "{}", ""), 40_000).await;
    let result = between(&dom, "<pre id=\"result\">", "</pre>");
    eprintln!("console_browser: pressed Retry on a failed run's page: {result}");
    assert!(
        result.starts_with("asked: Retry export&#39;s slot ")
            || result.starts_with("asked: Retry export's slot "),
        "{result}"
    );
    assert!(
        result.contains(" | ok: Retry of export's slot ")
            && result.contains(" queued: a live replica of default runs it once"),
        "{result}"
    );
    assert!(
        wait_until(Duration::from_secs(20), || {
            reports.lock().expect("reports").iter().filter(|(_, j, _)| j == "export").count() > 0
        })
        .await
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let history = lock_scheduler::control::history(&probe, "export", 200).await.expect("history");
        if history.iter().any(|e| e.tick == failed_run.tick && e.backfill) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the retried slot ran again as a backfill");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Backfill from the job's page: an hour-old range of three slots, from the form's fields.
    let from = Utc::now() - lock_scheduler::chrono::TimeDelta::hours(1);
    let to = from + lock_scheduler::chrono::TimeDelta::seconds(2);
    let fill = format!(
        r##"{{"#backfill input[name=from]":"{}","#backfill input[name=to]":"{}"}}"##,
        from.format("%Y-%m-%dT%H:%M:%S"),
        to.format("%Y-%m-%dT%H:%M:%S")
    );
    let dom =
        dump_dom_after(&act_url(&url("/test/act"), "/jobs/report", "#backfill button", &fill, ""), 40_000)
            .await;
    let result = between(&dom, "<pre id=\"result\">", "</pre>");
    eprintln!("console_browser: backfilled from the job's page: {result}");
    assert!(result.starts_with("asked: Backfill report: run every slot"), "{result}");
    assert!(
        result.contains(
            " | ok: Backfill of report: 3 slot(s) queued, each runs once on a live replica of default."
        ),
        "{result}"
    );
    // A job with two days of history (written as the replicas write it): its runs per hour.
    let now_ms = Utc::now().timestamp_millis();
    let nightly = lock_scheduler::history_key("nightly-export").expect("a job name");
    server.cli(&[
        "EVAL",
        "local now = tonumber(ARGV[1]) \
         for i = 240, 1, -1 do \
           local at = now - i * 600000 \
           local failed = (i % 7 == 0) or (i > 100 and i < 112) \
           if failed then \
             redis.call('XADD', KEYS[1], at .. '-0', 'tick', at, 'instance', 'pod-' .. (i % 3 + 1), 'outcome', 'failed', \
               'duration_ms', 900 + (i * 37) % 400, 'error', 'export target refused the upload: 503 from storage') \
             redis.call('ZADD', KEYS[2], 'INCR', 1, math.floor(at / 3600000)) \
           else \
             redis.call('XADD', KEYS[1], at .. '-0', 'tick', at, 'instance', 'pod-' .. (i % 3 + 1), 'outcome', 'ran', \
               'duration_ms', 400 + (i * 53) % 700) \
           end \
         end",
        "2",
        &nightly,
        &lock_scheduler::schema::failures_key("nightly-export").expect("a job name"),
        &now_ms.to_string(),
    ]);
    let dom = dump_dom(&url("/jobs/nightly-export")).await;
    let legend = between(&dom, "<ul class=\"legend\" id=\"counts-legend\">", "</ul>");
    assert!(legend.contains("succeeded (") && legend.contains("failed ("), "{legend}");
    assert!(dom.contains("The 240 runs the history keeps"), "{dom}");
    screenshot(&url("/jobs/nightly-export"), &dir.join("job-counts.png")).await;
    screenshot(&url("/jobs/nightly-export?outcome=failed&n=20"), &dir.join("job-failed.png")).await;
    // The question a Run now asks, left open for the guide's picture.
    screenshot(
        &act_url(&url("/test/act"), "/jobs/report", "button[data-action=run]", "{}", "&stop=asked&full=1"),
        &dir.join("confirm.png"),
    )
    .await;
    // A search typed but not applied survives the background updates; a selection holds them.
    let dom = dump_dom_after(&url("/test/keep"), 90_000).await;
    let result = between(&dom, "<pre id=\"result\">", "</pre>");
    eprintln!("console_browser: typed text and selections across updates: {result}");
    assert!(
        result.starts_with("loaded at 0 updates; typed after 2 updates: refused (rendered: '')"),
        "{result}"
    );
    assert!(
        result.contains("while selected: 0 updates, note: · updates held while text is selected"),
        "{result}"
    );
    assert!(result.contains("still selected: true; resumed; loads: 1"), "{result}");

    // Press "Run now" in the page: a sentence that links to the job's page, and it stays.
    let dom = dump_dom_after(&url("/test/press-run"), 40_000).await;
    let result = between(&dom, "<pre id=\"result\">", "</pre>");
    eprintln!("console_browser: pressed Run now in the page: {result}");
    assert!(
        result.starts_with("ok: Run-now of report requested at ") && result.contains(" UTC (request "),
        "{result}"
    );
    assert!(
        result.contains("one live replica of default runs it once; the run appears on its page."),
        "{result}"
    );
    assert!(result.ends_with("; link: /jobs/report; loads: 1"), "{result}");

    // Press "Pause" in the page: the row shows it without a reload, and the feedback is a
    // sentence, not JSON.
    let dom = dump_dom_after(&url("/test/press-pause"), 30_000).await;
    let result = between(&dom, "<pre id=\"result\">", "</pre>");
    assert!(
        result.starts_with(
            "asked: Pause report? Every replica skips its slots until it is resumed.; after cancel: no (dialog open: false); \
             row says: paused; loads: 1; status: Paused report (by console)"
        ),
        "{result}"
    );
    assert!(result.contains("every replica skips its runs until it is resumed"), "{result}");
    eprintln!("console_browser: pressed Pause in the page: {result}");
    // Every replica skips the job from then on.
    let seen = reports.lock().expect("reports").len();
    let skipped_by = |reports: &Reports| -> BTreeSet<String> {
        reports.lock().expect("reports")[seen..]
            .iter()
            .filter(|(_, j, o)| j == "report" && *o == RunOutcome::SkippedPaused)
            .map(|(instance, _, _)| instance.clone())
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

    // Changed from outside (the API), the open page follows in the background, except while
    // the operator types.
    let dom = dump_dom_after(&url("/test/background"), 70_000).await;
    let result = between(&dom, "<pre id=\"result\">", "</pre>");
    eprintln!("console_browser: background updates: {result}");
    assert!(result.starts_with("first: paused; after resume: no; while typing: no (updates "), "{result}");
    assert!(result.ends_with("after typing: paused; loads: 1"), "{result}");
    assert!(result.contains(", note: shown)"), "the footer says updates are held: {result}");
    let (before, after) = between(result, "(updates ", ",").split_once(" to ").unwrap_or(("?", "!"));
    assert_eq!(before, after, "no update while the token box has the focus: {result}");
    drop(held);
    for handle in handles {
        handle.shutdown().await;
    }
}

/// Redis stopped under an open page: the page keeps its last data under a "stale since"
/// banner (no error page, no reload), and drops the banner once Redis is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_update_keeps_the_last_data_under_a_stale_banner() {
    if !browser_available() {
        return;
    }
    init_tracing();
    let server = Arc::new(tokio::sync::Mutex::new(RedisServer::start()));
    let console_client = client(&*server.lock().await, "console");
    let holder = client(&*server.lock().await, "pod-x");
    let _held = holder.acquire("lock:stale", LockOptions::new()).await.expect("hold a lock");
    assert!(holder.record_holdings().await, "the holdings record is written");
    // No snapshot reuse: every update of the page reads Redis.
    let console = Console::new(console_client.clone())
        .snapshot_budget(Duration::ZERO, Duration::from_secs(2), 100_000)
        .expect("a budget");
    let (stop, start) = (server.clone(), server.clone());
    let probe = console_client.clone();
    let app = console
        .router()
        .route("/test/stale", get(|| async { Html(stale_page()) }))
        .route(
            "/test/redis/stop",
            post(move || async move {
                stop.lock().await.stop();
                "stopped"
            }),
        )
        .route(
            "/test/redis/start",
            post(move || async move {
                start.lock().await.restart();
                // Answer once the console's client talks to Redis again, so the page's next
                // update can succeed.
                let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
                while probe.inspect("lock:stale").await.is_err() && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                "started"
            }),
        );
    let addr: SocketAddr = http::serve(app).await;
    let dom = dump_dom_after(&format!("http://{addr}/test/stale"), 130_000).await;
    let result = between(&dom, "<pre id=\"result\">", "</pre>");
    eprintln!("console_browser: stale banner: {result}");
    assert!(result.starts_with("locks held: 1; banner: Stale since "), "{result}");
    assert!(result.contains("the console could not read (503"), "{result}");
    assert!(result.contains("(hidden: false); still shown: 1;"), "the last data stays: {result}");
    assert!(result.ends_with("after restart: banner hidden true; loads: 1"), "{result}");
}
