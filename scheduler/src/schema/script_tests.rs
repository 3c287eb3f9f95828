//! Each Lua script against a real redis-server, for its edge cases.

use lock_core::redis::{Commands, Connection};
use redis_fixture::RedisServer;

use super::*;

fn start() -> (RedisServer, Connection) {
    let server = RedisServer::start();
    let con = server.connection();
    (server, con)
}

/// The live members the script returns, sorted: it lists them by lapse time, and two
/// announcements in the same millisecond tie (then Redis orders them by name).
fn announce(con: &mut Connection, key: &str, instance: &str, ttl_ms: u64) -> Vec<String> {
    let mut live: Vec<String> =
        ANNOUNCE.key(key).arg(instance).arg(ttl_ms).invoke(con).expect("announce script");
    live.sort();
    live
}

#[test]
fn announce_adds_drops_lapsed_members_and_expires_the_set() {
    let (server, mut con) = start();
    let key = members_key("g");
    assert_eq!(announce(&mut con, &key, "pod-a", 10_000), ["pod-a"]);
    assert_eq!(announce(&mut con, &key, "pod-b", 10_000), ["pod-a", "pod-b"]);
    // A member whose announcement lapsed (score in the past) is dropped by the next one.
    server.cli(&["ZADD", &key, "1", "pod-dead"]);
    assert_eq!(announce(&mut con, &key, "pod-a", 10_000), ["pod-a", "pod-b"]);
    // Scores are lapse times on the server's clock.
    let score: f64 = con.zscore(&key, "pod-a").expect("ZSCORE");
    let time = server.cli(&["TIME"]);
    let now_s: f64 = time.lines().next().expect("seconds").parse().expect("TIME");
    assert!((score / 1000.0 - now_s - 10.0).abs() < 2.0, "lapses in 10 s: {score} vs {now_s}");
    // The set lives a TTL past the last announcement.
    let pttl: i64 = con.pttl(&key).expect("PTTL");
    assert!((9_000..=10_000).contains(&pttl), "{pttl}");
    announce(&mut con, &key, "pod-a", 50);
    assert!(
        redis_fixture::wait_until_blocking(std::time::Duration::from_secs(5), || server
            .cli(&["EXISTS", &key])
            == "0"),
        "the set expires once nobody renews"
    );
}

#[test]
fn record_missed_is_set_once_per_tick_and_never_goes_back() {
    let (server, mut con) = start();
    let key = missed_key("job").expect("valid");
    let mut first = |tick: i64| -> i64 {
        RECORD_MISSED.key(&key).arg(tick).arg(60_000).invoke(&mut con).expect("record_missed script")
    };
    assert_eq!(first(1_000), 1, "the first replica records it");
    assert_eq!(first(1_000), 0, "the others do not");
    assert_eq!(first(500), 0, "an older run of missed slots is already covered");
    assert_eq!(first(2_000), 1, "a later one is recorded");
    let mut con2 = server.connection();
    let pttl: i64 = con2.pttl(&key).expect("PTTL");
    assert!((50_000..=60_000).contains(&pttl), "the marker expires: {pttl}");
}
