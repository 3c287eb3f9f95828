//! The console's connection caps cannot be held shut (issue 50, finding 6): half-open and
//! never-speaking connections from many loopback addresses, reopened as soon as the server
//! closes them, fill every cap; requests from an address that is one of the attacker's and
//! from one that is not are still answered, each within 1 s, `/healthz` and a Redis read alike.
//! Real sockets, the console's own server, its default caps (256 connections, 32 per address).
//!
//! The machine is shared and often loaded far past its two cores: each request is sent at the
//! same moment to a second server of the same console that nobody attacks, and the 1 s is
//! counted beyond what that one took, so that a stall of the whole machine is not blamed on
//! the caps (both figures are printed).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lock_console::{Console, ServeOptions};
use tests::harness::{RedisServer, client};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Source addresses the attacker uses (127.0.0.1 is also the legitimate client's).
const ATTACKER_ADDRESSES: std::ops::RangeInclusive<u8> = 1..=9;
/// Connections the attacker keeps open (or reopening) per address: more than the per-address
/// cap, and all of them together more than the global cap.
const SLOTS_PER_ADDRESS: usize = 40;

/// What the attacker did.
#[derive(Default)]
struct Attack {
    /// Connections opened (first openings and reopenings).
    opened: AtomicU64,
    /// Connections open now.
    open: AtomicU64,
    /// Connections the server closed.
    closed_by_server: AtomicU64,
}

/// Connects to `addr` from the loopback address `from`.
async fn connect_from(from: [u8; 4], addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    socket.connect(addr).await
}

/// One attacker slot: a connection that sends part of a request's head (or, for odd slots,
/// nothing at all), waits until the server closes it, and opens again at once, until `stop`.
async fn attacker_slot(
    from: [u8; 4],
    slot: usize,
    addr: SocketAddr,
    attack: Arc<Attack>,
    stop: Arc<AtomicBool>,
) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut stream) = connect_from(from, addr).await else {
            tokio::task::yield_now().await;
            continue;
        };
        attack.opened.fetch_add(1, Ordering::Relaxed);
        attack.open.fetch_add(1, Ordering::Relaxed);
        if slot.is_multiple_of(2) {
            let _ = stream.write_all(b"GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ").await;
        }
        let mut buffer = [0u8; 256];
        // Until the server closes it, or the attack ends (checked every 100 ms).
        loop {
            match tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buffer)).await {
                Ok(Ok(0) | Err(_)) => {
                    attack.closed_by_server.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Ok(Ok(_)) => {}
                Err(_) if stop.load(Ordering::Relaxed) => break,
                Err(_) => {}
            }
        }
        attack.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A whole request from `from` for `path`; its status and how long it took from the connect
/// to the last byte of the answer (`None` if the connection was closed without an answer).
async fn timed_request(from: [u8; 4], addr: SocketAddr, path: &str) -> (Option<u16>, Duration) {
    let started = Instant::now();
    let exchange = async {
        let mut stream = connect_from(from, addr).await.ok()?;
        let head = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        stream.write_all(head.as_bytes()).await.ok()?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await.ok()?;
        String::from_utf8_lossy(&reply).split_whitespace().nth(1)?.parse::<u16>().ok()
    };
    let status = tokio::time::timeout(Duration::from_secs(10), exchange).await.ok().flatten();
    (status, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connections_from_many_addresses_cannot_keep_a_request_from_an_answer() {
    let server = RedisServer::start();
    let console = Console::new(client(&server, "console"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    let options = ServeOptions::default();
    let (cap, per_address) = (options.max_connections, options.max_connections_per_client);
    let (stop_server, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(lock_console::serve(listener, console.router(), options, async {
        let _ = stopped.await;
    }));
    // The same console, served apart and never attacked: what a request costs at each moment.
    let control_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let control_addr = control_listener.local_addr().expect("local address");
    let control = tokio::spawn(lock_console::serve(
        control_listener,
        console.router(),
        options,
        std::future::pending(),
    ));

    // The attacker, on a runtime of its own (as another process would be).
    let attack = Arc::new(Attack::default());
    let stop = Arc::new(AtomicBool::new(false));
    let attacker = {
        let (attack, stop) = (attack.clone(), stop.clone());
        std::thread::spawn(move || {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            runtime.block_on(async move {
                let mut slots = tokio::task::JoinSet::new();
                for last in ATTACKER_ADDRESSES {
                    for slot in 0..SLOTS_PER_ADDRESS {
                        slots.spawn(attacker_slot(
                            [127, 0, 0, last],
                            slot,
                            addr,
                            attack.clone(),
                            stop.clone(),
                        ));
                    }
                }
                while slots.join_next().await.is_some() {}
            });
        })
    };
    let slots = ATTACKER_ADDRESSES.count() * SLOTS_PER_ADDRESS;
    assert!(slots > cap && SLOTS_PER_ADDRESS > per_address, "the attack fills every cap");
    // The caps are full: the server has been closing the attacker's connections to make room
    // for the attacker's own new ones.
    let deadline = Instant::now() + Duration::from_secs(30);
    while attack.closed_by_server.load(Ordering::Relaxed) < slots as u64 {
        assert!(Instant::now() < deadline, "the attack never filled the caps");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let opened_before = attack.opened.load(Ordering::Relaxed);

    // Requests during the attack: /healthz and a read of Redis, from one of the attacker's
    // addresses and from another; each beside the same request to the unattacked server.
    let mut times = Vec::new();
    let mut control_times = Vec::new();
    let mut failures = Vec::new();
    let attack_started = Instant::now();
    for round in 0..20 {
        for (from, path) in [
            ([127, 0, 0, 1], "/healthz"),
            ([127, 0, 0, 10], "/healthz"),
            ([127, 0, 0, 1], "/api/jobs"),
            ([127, 0, 0, 11], "/locks"),
        ] {
            let ((status, took), (control_status, control)) =
                tokio::join!(timed_request(from, addr, path), timed_request(from, control_addr, path));
            assert_eq!(control_status, Some(200), "the unattacked server answers {path}");
            if status != Some(200) || took > Duration::from_secs(1) + control {
                failures.push(format!(
                    "round {round}: {path} from {from:?}: {status:?} in {took:?} (unattacked: {control:?})"
                ));
            }
            times.push(took);
            control_times.push(control);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let attack_lasted = attack_started.elapsed();
    let opened = attack.opened.load(Ordering::Relaxed) - opened_before;
    let open_now = attack.open.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    attacker.join().expect("the attacker ends");
    times.sort();
    control_times.sort();
    let (median, max) = (times[times.len() / 2], times[times.len() - 1]);
    let (control_median, control_max) = (control_times[times.len() / 2], control_times[times.len() - 1]);
    let within = times.iter().filter(|t| **t <= Duration::from_secs(1)).count();
    eprintln!(
        "console_connections: {} requests during the attack ({slots} attacker slots on {} addresses, \
         caps {cap} / {per_address} per address): all answered {}; median {median:?}, max {max:?}, {within} \
         within 1 s (the same requests to an unattacked server meanwhile: median {control_median:?}, max \
         {control_max:?}); the attacker opened {opened} connections in {attack_lasted:?} ({:.0}/s), {open_now} \
         open at the end",
        times.len(),
        ATTACKER_ADDRESSES.count(),
        if failures.is_empty() { "200" } else { "NOT" },
        opened as f64 / attack_lasted.as_secs_f64(),
    );
    assert!(failures.is_empty(), "requests refused or slower than 1 s: {failures:?}");
    assert!(opened > 0, "the attacker kept reopening during the requests");
    control.abort();
    let _ = stop_server.send(());
    tokio::time::timeout(Duration::from_secs(30), served).await.expect("the server stops").expect("cleanly");
}
