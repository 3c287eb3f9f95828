//! The console, safe to leave running (issue 42), against a real redis-server and served by
//! `lock_console::serve`: only locks are read or released (another application's keys, a
//! client's liveness key, a scheduler key and a lock's auxiliary keys are 404 without their
//! values, and stay in Redis); the host check and the read token; the audit log, named tokens
//! and the limit on refused tokens; JSON on every status; the header-read timeout and a
//! shutdown bounded even with half-open connections.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use lock_console::{Console, ServeOptions};
use lock_core::{LockClient, LockOptions};
use tests::harness::{RedisServer, client};
use tests::http::{self, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const TOKEN: &str = "hardening-test-token-0123456789";
const ALICE: &str = "alice-token-abcdefghijklmnop-42";
/// What another application keeps in Redis: must never come out of the console.
const SECRET: &str = r#"{"api_key":"sk_live_x"}"#;

/// A console being served, and how to stop it.
struct Served {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl Served {
    /// Stops the server; returns how long it took to finish.
    async fn stop(mut self) -> Duration {
        let started = Instant::now();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(30), &mut self.task)
            .await
            .expect("the server stops within 30 s")
            .expect("the server task ends cleanly");
        started.elapsed()
    }
}

async fn serve(console: &Console, options: ServeOptions) -> Served {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    let (stop, stopped) = oneshot::channel::<()>();
    let router = console.router();
    let task = tokio::spawn(lock_console::serve(listener, router, options, async {
        let _ = stopped.await;
    }));
    Served { addr, stop: Some(stop), task }
}

/// What the audit log (and everything else lock_console logs at info) wrote in this test
/// binary, one line per event, without colours.
fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("lock_console=info"))
            .with_ansi(false)
            .with_writer(move || Capture(sink.clone()))
            .try_init();
        buffer
    })
    .clone()
}

struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The log lines holding every one of `needles`.
fn log_lines(needles: &[&str]) -> Vec<String> {
    let logs = logs();
    let text =
        String::from_utf8_lossy(&logs.lock().unwrap_or_else(std::sync::PoisonError::into_inner)).into_owned();
    text.lines().filter(|l| needles.iter().all(|n| l.contains(n))).map(str::to_owned).collect()
}

/// The fingerprint the audit log shows for `token`: the first 8 hex digits of its SHA-1 (Redis's
/// script hash is the SHA-1 of the script's text).
fn fingerprint(token: &str) -> String {
    lock_core::redis::Script::new(token).get_hash()[..8].to_owned()
}

fn console_client(server: &RedisServer) -> LockClient {
    client(server, "console")
}

async fn with_token(addr: SocketAddr, method: &str, path: &str, token: &str) -> Response {
    let auth = format!("Bearer {token}");
    http::request(addr, method, path, &[("Authorization", &auth)]).await
}

/// `method path` with the `Host` header `host`.
async fn with_host(addr: SocketAddr, method: &str, path: &str, host: &str) -> Response {
    http::raw(addr, &format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_locks_are_read_or_released() {
    let server = RedisServer::start();
    let console = Console::new(console_client(&server)).token(TOKEN).expect("a strong token");
    let served = serve(&console, ServeOptions::default()).await;
    let addr = served.addr;

    // Another application's data, of every type.
    server.cli(&["SET", "app:session:42", SECRET]);
    server.cli(&["HSET", "app:profile", "email", "hash-secret@example.com"]);
    server.cli(&["ZADD", "app:scores", "1", "zset-secret-member"]);
    server.cli(&["RPUSH", "app:queue", "list-secret-item"]);
    // The protocol's own keys that are not locks: a live client's liveness key, a lock's fence.
    let holder = client(&server, "pod-x");
    let guard = holder.acquire("lock:real", LockOptions::new().fencing(true)).await.expect("take a lock");
    let semaphore = holder.semaphore("sem:real", 2).expect("a semaphore");
    let permit = semaphore.acquire(LockOptions::new()).await.expect("take a permit");
    assert!(holder.record_holdings().await, "the holdings record is written");
    let liveness = lock_core::inspect::parse_token(guard.token())
        .and_then(|h| h.liveness_key)
        .expect("the token names its liveness key");
    let fence = lock_core::schema::fence_key("lock:real");
    // A scheduler key: a job's pause flag.
    let pause_key = lock_scheduler::pause_key("nightly").expect("a job name");
    lock_scheduler::control::pause_by(&console_client(&server), "nightly", "setup").await.expect("pause");

    let encode = |key: &str| key.replace('{', "%7B").replace('}', "%7D");
    for key in ["app:session:42", "app:profile", "app:scores", "app:queue", &liveness, &fence, &pause_key] {
        let path = format!("/api/locks/{}", encode(key));
        let read = http::get(addr, &path).await;
        assert_eq!(
            (read.status, read.error_code().as_str()),
            (404, "not_a_lock"),
            "GET {key}: {}",
            read.body
        );
        let release = with_token(addr, "DELETE", &path, TOKEN).await;
        assert_eq!(
            (release.status, release.error_code().as_str()),
            (404, "not_a_lock"),
            "DELETE {key}: {}",
            release.body
        );
        for response in [&read, &release] {
            for secret in ["sk_live", "hash-secret", "zset-secret", "list-secret", "by setup"] {
                assert!(!response.body.contains(secret), "{key}'s value leaked: {}", response.body);
            }
        }
        assert_eq!(server.cli(&["EXISTS", key]), "1", "{key} is still in Redis");
    }
    // Naming a hold by a value that is not an owner token releases nothing either.
    let by_value = with_token(addr, "DELETE", "/api/locks/app:session:42?token=sk_live_x", TOKEN).await;
    assert_eq!(by_value.status, 400, "{}", by_value.body);
    assert_eq!(server.cli(&["GET", "app:session:42"]), SECRET, "the value is untouched");
    assert_eq!(server.cli(&["HGET", "app:profile", "email"]), "hash-secret@example.com");

    // What is ours still reads and releases.
    let lock = http::get(addr, "/api/locks/lock:real").await;
    assert_eq!((lock.status, lock.json()["held"].clone()), (200, true.into()), "{}", lock.body);
    let sem = http::get(addr, "/api/locks/sem:real").await;
    assert_eq!((sem.status, sem.json()["kind"].clone()), (200, "semaphore".into()), "{}", sem.body);
    // The page's Unlock button of a semaphore names the permit's token, so it works.
    let page = http::get(addr, "/locks?pattern=sem:*&limit=10").await;
    let url = page
        .body
        .split("data-url=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .map(|url| url.replace("&amp;", "&"))
        .unwrap_or_else(|| panic!("an Unlock button: {}", page.body));
    assert!(url.starts_with("/api/locks/sem%3Areal?token="), "{url}");
    let released = with_token(addr, "DELETE", &url, TOKEN).await;
    assert_eq!(
        (released.status, released.json()["released"].clone()),
        (200, true.into()),
        "{}",
        released.body
    );
    assert_eq!(http::get(addr, "/api/locks/sem:real").await.json()["held"], false, "the permit is back");
    let free = http::get(addr, "/api/locks/lock:never-taken").await;
    assert_eq!((free.status, free.json()["held"].clone()), (200, false.into()), "a free name is a free lock");
    let listed = http::get(addr, "/api/locks?pattern=*&limit=1000").await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let keys: Vec<String> = listed.json()["locks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["key"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(keys, ["lock:real"], "only locks are listed: {}", listed.body);
    let released = with_token(addr, "DELETE", "/api/locks/lock:real", TOKEN).await;
    assert_eq!(
        (released.status, released.json()["released"].clone()),
        (200, true.into()),
        "{}",
        released.body
    );
    assert_eq!(server.cli(&["EXISTS", "lock:real"]), "0");
    assert_eq!(server.cli(&["EXISTS", &liveness]), "1", "the client's liveness key is never touched");

    // lock-core refuses the same way for every caller, with a typed error.
    let direct = console_client(&server);
    for key in ["app:session:42", "app:profile", liveness.as_str()] {
        let e = direct.force_unlock(key).await.expect_err("not a lock");
        assert!(matches!(e, lock_core::LockError::NotALock { .. }), "{key}: {e:?}");
        assert!(!e.to_string().contains("sk_live"), "{e}");
    }
    assert_eq!(server.cli(&["EXISTS", "app:session:42"]), "1");
    drop((guard, permit));
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_loopback_or_allowed_hosts_are_served() {
    let server = RedisServer::start();
    let holder = client(&server, "pod-a");
    let _held = holder.acquire("lock:x", LockOptions::new()).await.expect("a lock");
    assert!(holder.record_holdings().await, "the holdings record is written");
    let console = Console::new(console_client(&server)).token(TOKEN).expect("a strong token");
    let plain = serve(&console, ServeOptions::default()).await;
    let addr = plain.addr;
    let port = addr.port();
    for path in ["/", "/api/locks/lock:x", "/api/jobs", "/no-such-page"] {
        let rebound = with_host(addr, "GET", path, &format!("attacker.example:{port}")).await;
        assert_eq!((rebound.status, rebound.error_code().as_str()), (421, "host_not_allowed"), "{path}");
        assert!(!rebound.body.contains("pod-a"), "nothing read for another host: {}", rebound.body);
    }
    let action = http::raw(
        addr,
        &format!(
            "POST /api/jobs/x/pause HTTP/1.1\r\nHost: attacker.example\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
        ),
    )
    .await;
    assert_eq!(action.status, 421, "{}", action.body);
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), "[::1]".into(), "LOCALHOST".into()]
    {
        let ok = with_host(addr, "GET", "/api/locks/lock:x", &host).await;
        assert_eq!(ok.status, 200, "{host}: {}", ok.body);
    }
    let probe = with_host(addr, "GET", "/healthz", "10.1.2.3:8088").await;
    assert_eq!((probe.status, probe.json()["status"].clone()), (200, "ok".into()), "{}", probe.body);
    assert_eq!(with_host(addr, "GET", "/api/jobs", "10.1.2.3:8088").await.status, 421);

    // A name it was told to answer for (behind a proxy), and no check at all.
    let proxied =
        serve(&console.clone().allow_host("ops.example.com").expect("a host name"), ServeOptions::default())
            .await;
    assert_eq!(with_host(proxied.addr, "GET", "/api/locks/lock:x", "ops.example.com").await.status, 200);
    assert_eq!(with_host(proxied.addr, "GET", "/api/locks/lock:x", "ops.example.org").await.status, 421);
    assert!(console.clone().allow_host("https://ops.example.com").is_err(), "a bare name only");
    let open = serve(&console.clone().allow_any_host(), ServeOptions::default()).await;
    assert_eq!(with_host(open.addr, "GET", "/api/locks/lock:x", "anything.example").await.status, 200);

    // Reads behind the token too.
    let guarded = serve(&console.clone().require_token_for_reads(true), ServeOptions::default()).await;
    let anonymous = http::get(guarded.addr, "/api/locks/lock:x").await;
    assert_eq!(
        (anonymous.status, anonymous.error_code().as_str()),
        (401, "unauthorized"),
        "{}",
        anonymous.body
    );
    assert!(!anonymous.body.contains("pod-a"));
    assert_eq!(http::get(guarded.addr, "/").await.status, 401, "the pages too");
    assert_eq!(with_token(guarded.addr, "GET", "/api/locks/lock:x", TOKEN).await.status, 200);
    assert_eq!(http::get(guarded.addr, "/healthz").await.status, 200);
    assert_eq!(http::get(guarded.addr, "/console.css").await.status, 200);
    // Mounted under a prefix, the 404 page links back under the prefix.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let mounted_addr = listener.local_addr().expect("address");
    let app = axum::Router::new().nest("/admin", console.router());
    let mounted =
        tokio::spawn(lock_console::serve(listener, app, ServeOptions::default(), std::future::pending()));
    let missing = http::get(mounted_addr, "/admin/no-such-page").await;
    assert_eq!(missing.status, 404);
    assert!(missing.body.contains("href=\"/admin/\""), "{}", missing.body);
    mounted.abort();
    for served in [plain, proxied, open, guarded] {
        served.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_are_audited_by_token_name_and_guessing_is_limited() {
    // The subscriber is installed before the first event of this test.
    drop(logs());
    let server = RedisServer::start();
    let setup = console_client(&server);
    lock_scheduler::control::pause_by(&setup, "audited-job", "setup").await.expect("pause");
    let console = Console::new(console_client(&server))
        .token(TOKEN)
        .expect("a strong token")
        .named_token("alice", ALICE)
        .expect("a second token")
        .failed_token_limit(3, Duration::from_secs(600))
        .expect("a limit");
    assert!(console.clone().named_token("alice", "another-token-0123456789").is_err(), "names are unique");
    assert!(console.clone().named_token("bob", "a".repeat(16)).is_err(), "a weak token is refused");
    let served = serve(&console, ServeOptions::default()).await;
    let addr = served.addr;

    // Alice pauses (the job is known by its pause flag): the flag says it was her; the scheme
    // is case-insensitive.
    let auth = format!("bearer {ALICE}");
    let paused =
        http::request(addr, "POST", "/api/jobs/audited-job/pause", &[("authorization", &auth)]).await;
    assert_eq!((paused.status, paused.json()["by"].clone()), (200, "alice".into()), "{}", paused.body);
    let state = lock_scheduler::control::pause_state(&setup, "audited-job").await.expect("state");
    assert!(state.paused.as_deref().is_some_and(|p| p.ends_with("by alice")), "{state:?}");
    let alice_print = fingerprint(ALICE);
    let done = log_lines(&["console action done", "audited-job", "actor=alice", &alice_print, "127.0.0.1:"]);
    assert_eq!(done.len(), 1, "logged once: {done:?}");
    assert!(done[0].contains("action=\"pause\"") && done[0].contains("outcome=\"ok\""), "{done:?}");
    assert!(!done[0].contains(ALICE), "the token itself is never logged");
    // A failed action is logged with its outcome.
    let unknown = with_token(addr, "POST", "/api/jobs/no-such-job/pause", ALICE).await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(log_lines(&["console action failed", "no-such-job", "outcome=\"unknown_job\""]).len(), 1);

    // Wrong tokens: 401, logged with their fingerprints; past the limit 429, still logged; the
    // right token is accepted all the same (guessers cannot lock operators out), and Redis
    // changes only for it.
    for i in 0..4 {
        let wrong = format!("wrong-token-number-{i}-abcdefgh");
        let refused = with_token(addr, "POST", "/api/jobs/audited-job/resume", &wrong).await;
        let expected = if i < 3 { (401, "unauthorized") } else { (429, "too_many_attempts") };
        assert_eq!((refused.status, refused.error_code().as_str()), expected, "{}", refused.body);
        let logged = log_lines(&["console request refused", expected.1, &fingerprint(&wrong)]);
        assert_eq!(logged.len(), 1, "{logged:?}");
        assert!(!logged[0].contains(&wrong), "the token itself is never logged");
        if i == 3 {
            assert!(refused.header("retry-after").and_then(|s| s.parse::<u64>().ok()).is_some_and(|s| s > 0));
            assert!(refused.body.contains("from this address"), "{}", refused.body);
        }
    }
    let state = lock_scheduler::control::pause_state(&setup, "audited-job").await.expect("state");
    assert!(state.paused.is_some(), "still paused: no refused request did anything");
    let accepted = with_token(addr, "POST", "/api/jobs/audited-job/resume", ALICE).await;
    assert_eq!(
        (accepted.status, accepted.json()["was_paused"].clone()),
        (200, true.into()),
        "the right token after the limit: {}",
        accepted.body
    );
    assert_eq!(log_lines(&["refused-token limit reached", "Address"]).len(), 1, "said once per window");
    // Reads are not limited.
    assert_eq!(http::get(addr, "/api/jobs").await.status, 200);

    // Errors are JSON whatever the status.
    let wrong_method = http::request(addr, "DELETE", "/api/jobs", &[]).await;
    assert_eq!((wrong_method.status, wrong_method.error_code().as_str()), (405, "method_not_allowed"));
    let wrong_method = http::request(addr, "PUT", "/api/locks/lock:x", &[]).await;
    assert_eq!((wrong_method.status, wrong_method.error_code().as_str()), (405, "method_not_allowed"));
    assert_eq!(http::get(addr, "/api/nowhere").await.error_code(), "no_route");
    served.stop().await;
}

/// A request with the bearer `token` from the loopback address `from` (another address stands
/// for another client); its status, or `None` if the connection was closed without an answer.
async fn action_from(from: [u8; 4], addr: SocketAddr, method: &str, path: &str, token: &str) -> Option<u16> {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::from((from, 0))).expect("bind a loopback source address");
    let mut stream = socket.connect(addr).await.ok()?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.ok()?;
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut reply)).await.ok()?.ok()?;
    String::from_utf8_lossy(&reply).split_whitespace().nth(1)?.parse().ok()
}

/// Makes `job` known to the console (a job is known by its registration, its history or its
/// pause flag) with one history entry.
fn known_job(server: &RedisServer, job: &str) {
    let key = lock_scheduler::history_key(job).expect("a job name");
    server.cli(&["XADD", &key, "*", "tick", "0", "instance", "pod-a", "outcome", "ran", "duration_ms", "5"]);
}

/// Issue 50, finding 5: guesses from 450 source addresses (one each, so no address reaches its
/// own limit) hit the budget of all addresses together, every one of them audited; a correct
/// token is accepted throughout, from a guesser's address too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guesses_from_many_addresses_hit_the_global_budget_and_never_lock_the_operator_out() {
    drop(logs());
    let server = RedisServer::start();
    let admin = "budget-admin-token-Zq8vK3pX7mN2";
    known_job(&server, "budgeted");
    let console = Console::new(console_client(&server)).named_token("carol", admin).expect("a strong token");
    let served = serve(&console, ServeOptions::default()).await;
    let addr = served.addr;
    let mut statuses = std::collections::BTreeMap::new();
    let mut guessed = Vec::new();
    for i in 0..450u32 {
        let from = [127, 1, (i / 200) as u8, (i % 200 + 1) as u8];
        let guess = format!("guess-{i:03}-from-many-addresses-q7");
        let status = action_from(from, addr, "POST", "/api/jobs/budgeted/pause", &guess).await;
        *statuses.entry(status).or_insert(0) += 1;
        guessed.push(guess);
        if i == 300 {
            // The right token in the middle of the flood, from a guesser's address: accepted.
            let right = action_from(from, addr, "POST", "/api/jobs/budgeted/resume", admin).await;
            assert_eq!(right, Some(200), "the right token while the budget is spent");
        }
    }
    eprintln!("console_hardening: 450 wrong tokens from 450 addresses: {statuses:?}");
    let expected: std::collections::BTreeMap<Option<u16>, i32> = [(Some(401), 100), (Some(429), 350)].into();
    assert_eq!(statuses, expected, "the default budget: 100 refused tokens a minute from all addresses");
    // Every refusal is audited, each with its guess's fingerprint and its outcome.
    let refused = log_lines(&["console request refused", "target_name=\"budgeted\""]);
    assert_eq!(refused.len(), 450, "one audit line per refusal");
    for (i, guess) in guessed.iter().enumerate() {
        let outcome = if i < 100 { "outcome=\"unauthorized\"" } else { "outcome=\"too_many_attempts\"" };
        assert_eq!(
            log_lines(&["console request refused", &fingerprint(guess), outcome]).len(),
            1,
            "guess {i}"
        );
    }
    assert_eq!(log_lines(&["refused-token limit reached", "Global"]).len(), 1, "said once per window");
    // And after the flood, from a fresh address and from a guesser's.
    assert_eq!(action_from([127, 0, 0, 1], addr, "POST", "/api/jobs/budgeted/pause", admin).await, Some(200));
    assert_eq!(
        action_from([127, 1, 0, 7], addr, "POST", "/api/jobs/budgeted/resume", admin).await,
        Some(200)
    );
    served.stop().await;
}

/// Roles: a read token opens the reads that need a token and no action; weak tokens are refused
/// when the console is configured; an unlock's audit line names the holder it released; pause
/// says whether the job was paused already.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_weak_tokens_and_what_actions_say() {
    drop(logs());
    let server = RedisServer::start();
    for weak in ["password12345678", "changeme-changeme", "0123456789abcdef"] {
        let refused = Console::new(console_client(&server)).token(weak);
        assert!(
            matches!(refused, Err(lock_console::ConsoleError::WeakToken(_))),
            "{weak} is refused: {:?}",
            refused.err()
        );
        assert!(Console::new(console_client(&server)).read_token("dave", weak).is_err(), "read tokens too");
    }
    known_job(&server, "roles-job");
    let admin = "roles-admin-token-Wd4nR8tY2kQ6";
    let reader = "roles-reader-token-Hm3sV9pL5xB1";
    let console = Console::new(console_client(&server))
        .named_token("erin", admin)
        .expect("an admin token")
        .read_token("frank", reader)
        .expect("a read token")
        .require_token_for_reads(true);
    let served = serve(&console, ServeOptions::default()).await;
    let addr = served.addr;
    assert_eq!(with_token(addr, "GET", "/api/jobs", reader).await.status, 200, "the reader reads");
    assert_eq!(with_token(addr, "GET", "/jobs", reader).await.status, 200, "pages too");
    let refused = with_token(addr, "POST", "/api/jobs/roles-job/pause", reader).await;
    assert_eq!((refused.status, refused.error_code().as_str()), (403, "forbidden"), "{}", refused.body);
    assert!(refused.body.contains("frank"), "{}", refused.body);
    assert_eq!(
        log_lines(&["console request refused", &fingerprint(reader), "outcome=\"forbidden\""]).len(),
        1
    );
    assert!(
        lock_scheduler::control::pause_state(&console_client(&server), "roles-job")
            .await
            .expect("state")
            .paused
            .is_none(),
        "nothing paused"
    );
    // A reader's token is a correct token: never counted against the limits.
    for _ in 0..10 {
        assert_eq!(with_token(addr, "POST", "/api/jobs/roles-job/pause", reader).await.status, 403);
    }
    // Retry and backfill are actions like the others: refused to the reader, audited either way.
    let backfill = "/api/jobs/roles-job/backfill?from=2026-01-01T00:00&to=2026-01-01T01:00";
    assert_eq!(with_token(addr, "POST", backfill, reader).await.status, 403);
    let unknown = with_token(addr, "POST", backfill, admin).await;
    assert_eq!((unknown.status, unknown.error_code().as_str()), (404, "unknown_job"), "{}", unknown.body);
    let retry = with_token(addr, "POST", "/api/jobs/roles-job/runs/1-0/retry", admin).await;
    assert_eq!((retry.status, retry.error_code().as_str()), (404, "unknown_run"), "{}", retry.body);
    for (line, outcome) in [
        ("console request refused", "outcome=\"forbidden\""),
        ("console action failed", "outcome=\"unknown_job\""),
    ] {
        assert_eq!(
            log_lines(&[line, "action=\"backfill\"", "roles-job", outcome]).len(),
            1,
            "{line} {outcome}"
        );
    }
    assert_eq!(
        log_lines(&["console action failed", "action=\"retry\"", "roles-job run 1-0", "unknown_run"]).len(),
        1
    );
    // Pause says whether the job was paused already.
    let first = with_token(addr, "POST", "/api/jobs/roles-job/pause", admin).await;
    assert_eq!((first.status, first.json()["was_paused"].clone()), (200, false.into()), "{}", first.body);
    let again = with_token(addr, "POST", "/api/jobs/roles-job/pause", admin).await;
    assert_eq!((again.status, again.json()["was_paused"].clone()), (200, true.into()), "{}", again.body);
    // An unlock's audit line names the holder released.
    let holder = client(&server, "pod-held");
    let guard = holder.acquire("lock:audited-unlock", LockOptions::new()).await.expect("a lock");
    assert!(holder.record_holdings().await, "the holdings record is written");
    let owner = guard.token().to_owned();
    let released = with_token(addr, "DELETE", "/api/locks/lock:audited-unlock", admin).await;
    assert_eq!(
        (released.status, released.json()["holder"].clone()),
        (200, owner.clone().into()),
        "{}",
        released.body
    );
    let line = log_lines(&["console action done", "action=\"unlock\"", "lock:audited-unlock"]);
    assert_eq!(line.len(), 1, "{line:?}");
    assert!(line[0].contains(&format!("released=\"{owner}\"")), "names the holder: {line:?}");
    drop(guard);
    served.stop().await;
}

/// Reads from `stream` until the server closes it (EOF or a reset); false if it is still open
/// after `patience`.
async fn closed_within(stream: &mut TcpStream, patience: Duration) -> bool {
    let mut buffer = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_are_cut_off_and_shutdown_is_bounded() {
    let server = RedisServer::start();
    let console = Console::new(console_client(&server));

    // A request whose headers never end is closed after the header-read timeout.
    let quick =
        serve(&console, ServeOptions::default().header_read_timeout(Duration::from_millis(300))).await;
    let mut half = TcpStream::connect(quick.addr).await.expect("connect");
    half.write_all(b"GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.expect("send half a request");
    assert!(closed_within(&mut half, Duration::from_secs(20)).await, "a half-sent request is closed");
    // And an idle kept-alive connection too, after its one request was answered.
    let mut idle = TcpStream::connect(quick.addr).await.expect("connect");
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.expect("send a request");
    assert!(closed_within(&mut idle, Duration::from_secs(20)).await, "an idle connection is closed");
    quick.stop().await;

    // Shutdown with three half-open connections and a long header timeout: it ends after the
    // grace, not after the timeout.
    let options = ServeOptions::default()
        .header_read_timeout(Duration::from_secs(300))
        .shutdown_grace(Duration::from_millis(500));
    let slow = serve(&console, options).await;
    let slow_addr = slow.addr;
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut stream = TcpStream::connect(slow.addr).await.expect("connect");
        stream.write_all(b"GET / HTTP/1.1\r\nHost: 127.").await.expect("send a few bytes");
        open.push(stream);
    }
    // The server answers a full request meanwhile: the half-open ones are accepted by then.
    assert_eq!(http::get(slow.addr, "/healthz").await.status, 200);
    let took = slow.stop().await;
    assert!(took < Duration::from_secs(20), "shutdown took {took:?}");
    for stream in &mut open {
        assert!(closed_within(stream, Duration::from_secs(5)).await, "closed at shutdown");
    }
    assert!(TcpStream::connect(slow_addr).await.is_err(), "the listener is closed");
}

/// A full request to `addr` from the local address `from` (another loopback address stands
/// for another client); its status, or `None` if the connection was closed without an answer.
async fn status_from(from: &str, addr: SocketAddr) -> Option<u16> {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind(format!("{from}:0").parse().expect("address")).expect("bind a loopback source address");
    let mut stream = socket.connect(addr).await.ok()?;
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").await.ok()?;
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut reply)).await.ok()?.ok()?;
    let line = String::from_utf8_lossy(&reply);
    line.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_at_its_cap_makes_room_with_its_own_idle_connections() {
    let server = RedisServer::start();
    let console = Console::new(console_client(&server));
    let options =
        ServeOptions::default().header_read_timeout(Duration::from_secs(300)).max_connections_per_client(4);
    let served = serve(&console, options).await;
    // One client holds its 4 connections with half-sent requests.
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(served.addr).await.expect("connect");
        stream.write_all(b"GET / HTTP/1.1\r\nHost: 127.").await.expect("send a few bytes");
        held.push(stream);
    }
    // The server has them all before the next one comes (they answer once it reads EOF).
    assert_eq!(status_from("127.0.0.2", served.addr).await, Some(200), "another client is served");
    // Its fifth connection, a whole request, takes the place of the oldest half-sent one (the
    // old cap closed the new one unanswered); the other three stay open.
    assert_eq!(status_from("127.0.0.1", served.addr).await, Some(200), "a fifth connection is served");
    assert!(closed_within(&mut held[0], Duration::from_secs(5)).await, "the oldest half-sent one is closed");
    for stream in &mut held[1..] {
        assert!(!closed_within(stream, Duration::from_millis(200)).await, "the others stay open");
    }
    served.stop().await;
}

/// Calls of `command` since the statistics were reset (`CONFIG RESETSTAT`).
fn calls(server: &RedisServer, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_owned))
        .and_then(|rest| rest.split(',').next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// The reads a view makes (the holdings records, the index of them, the jobs' last runs), and
/// `SCAN`s: what the lock holders' own writes never send.
fn reads(server: &RedisServer) -> u64 {
    ["hgetall", "zrangebyscore", "xrevrange", "scan"].iter().map(|c| calls(server, c)).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewers_share_one_bounded_snapshot() {
    let server = RedisServer::start();
    let holder = client(&server, "pod-x");
    let _guard = holder.acquire("zzz:lock", LockOptions::new()).await.expect("take a lock");
    assert!(holder.record_holdings().await, "the holdings record is written");
    lock_scheduler::control::pause_by(&holder, "shared-job", "setup").await.expect("a job by its flag");

    // What one view of the jobs costs in reads, on a console of its own.
    let one = Console::new(console_client(&server)).lock_pattern("zzz:*");
    let one = serve(&one, ServeOptions::default()).await;
    server.cli(&["CONFIG", "RESETSTAT"]);
    assert_eq!(http::get(one.addr, "/api/jobs").await.status, 200);
    let per_view = reads(&server);
    assert!(per_view > 0, "a view reads Redis");

    // Twenty viewers at once, of every page the snapshot serves: one read.
    let shared = Console::new(console_client(&server))
        .lock_pattern("zzz:*")
        .snapshot_budget(Duration::from_secs(600), Duration::from_secs(10), 100_000)
        .expect("a budget");
    let shared = serve(&shared, ServeOptions::default()).await;
    server.cli(&["CONFIG", "RESETSTAT"]);
    let views = (0..20).map(|i| {
        let path = ["/api/jobs", "/", "/jobs", "/api/replicas", "/replicas"][i % 5];
        let addr = shared.addr;
        tokio::spawn(async move { http::get(addr, path).await })
    });
    for view in views {
        let view = view.await.expect("a view");
        assert_eq!(view.status, 200, "{}", view.body);
    }
    assert_eq!(reads(&server), per_view, "twenty viewers cost what one does");
    let jobs = http::get(shared.addr, "/api/jobs").await.json();
    assert_eq!(
        (jobs["partial"].clone(), jobs["jobs"][0]["name"].clone()),
        (false.into(), "shared-job".into())
    );
    assert_eq!(reads(&server), per_view, "still the same snapshot");
    // An action makes the next view read anew (so it shows the action's effect).
    let token_console = Console::new(console_client(&server)).token(TOKEN).expect("token");
    let acting = serve(&token_console, ServeOptions::default()).await;
    assert_eq!(http::get(acting.addr, "/api/jobs").await.json()["jobs"][0]["paused"], true);
    assert_eq!(with_token(acting.addr, "POST", "/api/jobs/shared-job/resume", TOKEN).await.status, 200);
    let after = http::get(acting.addr, "/api/jobs").await.json();
    assert_eq!(after["jobs"], serde_json::json!([]), "resumed, the job is gone from the fresh view: {after}");

    // 5,000 unrelated keys change nothing: the locks come from the holdings records, never a
    // SCAN. A budget of holds to check below the number held says partial; the default is whole.
    server.cli(&["EVAL", "for i = 1, 5000 do redis.call('SET', 'other:' .. i, 'x') end", "0"]);
    let _second = holder.acquire("zzz:lock2", LockOptions::new()).await.expect("take a lock");
    assert!(holder.record_holdings().await, "the holdings record is written");
    let small = Console::new(console_client(&server))
        .lock_pattern("zzz:*")
        .snapshot_budget(Duration::from_secs(600), Duration::from_secs(10), 1)
        .expect("a budget");
    let small = serve(&small, ServeOptions::default()).await;
    server.cli(&["CONFIG", "RESETSTAT"]);
    let page = http::get(small.addr, "/").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("id=\"partial\"") && page.body.contains("locks"), "{}", page.body);
    assert!(page.body.contains("the holds it may check"), "{}", page.body);
    let listing = http::get(small.addr, "/api/locks?pattern=zzz:*&limit=10").await.json();
    assert_eq!(listing["partial"], true, "{listing}");
    let roomy =
        serve(&Console::new(console_client(&server)).lock_pattern("zzz:*"), ServeOptions::default()).await;
    let listing = http::get(roomy.addr, "/api/locks?pattern=zzz:*&limit=10").await.json();
    assert_eq!(
        (listing["partial"].clone(), listing["locks"][0]["key"].clone(), listing["locks"][1]["key"].clone()),
        (false.into(), "zzz:lock".into(), "zzz:lock2".into())
    );
    let whole = http::get(roomy.addr, "/").await;
    assert!(!whole.body.contains("id=\"partial\""), "{}", whole.body);
    assert!(whole.body.contains("<b id=\"locks-held\">2</b>"), "both locks are counted: {}", whole.body);
    assert_eq!(calls(&server, "scan"), 0, "no view scans the keyspace");
    for served in [one, shared, acting, small, roomy] {
        served.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_redis_gives_partial_views_and_requests_beyond_the_limit_get_429() {
    let server = RedisServer::start();
    let patient = LockClient::builder()
        .url(server.url())
        .instance_id("console")
        // Longer than the test needs: the stuck request stays stuck until Redis is thawed.
        .command_timeout(Duration::from_secs(20))
        .liveness_ttl(Duration::from_secs(60))
        .build()
        .expect("a client");
    assert!(patient.inspect("lock:x").await.is_ok(), "connected before the freeze");
    let console = Console::new(patient)
        .snapshot_budget(Duration::from_millis(1), Duration::from_millis(300), 100_000)
        .expect("a budget")
        .max_concurrent_requests(1)
        .expect("a limit");
    let served = serve(&console, ServeOptions::default()).await;
    let addr = served.addr;
    server.pause();
    // The snapshot's time budget: a partial answer, not a 503 and not a 20 s wait.
    let started = Instant::now();
    let jobs = http::get(addr, "/api/jobs").await;
    assert_eq!((jobs.status, jobs.json()["partial"].clone()), (200, true.into()), "{}", jobs.body);
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    // One request stuck on the frozen Redis holds the only slot: the next gets 429 at once.
    // (Sent again if it found the slot taken by one of the probes below.)
    let stuck = tokio::spawn(async move {
        loop {
            let response = http::get(addr, "/api/locks/lock:x").await;
            if response.status != 429 {
                return response;
            }
            tokio::task::yield_now().await;
        }
    });
    let deadline = Instant::now() + Duration::from_secs(15);
    let busy = loop {
        let response = http::get(addr, "/console.css").await;
        if response.status == 429 {
            break response;
        }
        assert_eq!(response.status, 200, "{}", response.body);
        if Instant::now() >= deadline {
            let stuck = stuck.await;
            panic!("the stuck request never took the slot: {stuck:?}");
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(busy.error_code(), "busy");
    assert_eq!(busy.header("retry-after"), Some("1"));
    assert_eq!(http::get(addr, "/healthz").await.status, 200, "probes are not counted");
    server.resume();
    let stuck = stuck.await.expect("the stuck request ends");
    assert_eq!(stuck.status, 200, "{}", stuck.body);
    assert_eq!(http::get(addr, "/console.css").await.status, 200, "the slot is free again");
    served.stop().await;
}
