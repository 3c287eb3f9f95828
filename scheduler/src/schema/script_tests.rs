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
    let live: Vec<(String, u64)> = ANNOUNCE
        .key(key)
        .key(jobs_key("g"))
        .key(replicas_key("g"))
        .arg(instance)
        .arg(ttl_ms)
        .invoke(con)
        .expect("announce script");
    assert!(live.iter().all(|(_, left)| (1..=ttl_ms.max(10_000)).contains(left)), "time left: {live:?}");
    let mut names: Vec<String> = live.into_iter().map(|(name, _)| name).collect();
    names.sort();
    names
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
    // The job registry lives as long as the members.
    server.cli(&["HSET", &jobs_key("g"), "job", "* * * * * *\tUTC"]);
    announce(&mut con, &key, "pod-a", 10_000);
    let pttl: i64 = con.pttl(jobs_key("g")).expect("PTTL");
    assert!((9_000..=10_000).contains(&pttl), "registry {pttl}");
    announce(&mut con, &key, "pod-a", 50);
    assert!(
        redis_fixture::wait_until_blocking(std::time::Duration::from_secs(5), || server
            .cli(&["EXISTS", &key])
            == "0"),
        "the set expires once nobody renews"
    );
}

#[test]
fn announce_writes_what_a_replica_says_only_when_sent_and_drops_it_with_the_member() {
    let (server, mut con) = start();
    let (key, about) = (members_key("g"), replicas_key("g"));
    let say = |con: &mut Connection, instance: &str, what: &str| {
        let _: Vec<(String, u64)> = ANNOUNCE
            .key(&key)
            .key(jobs_key("g"))
            .key(&about)
            .arg(instance)
            .arg(10_000)
            .arg(what)
            .invoke(con)
            .expect("announce script");
    };
    say(&mut con, "pod-a", &replica_about(1_700_000_000_000, "host-a", "1.2.3", &["report"]));
    let stored: String = con.hget(&about, "pod-a").expect("HGET");
    assert_eq!(parse_replica_about(&stored), Some((1_700_000_000_000, "host-a", "1.2.3", vec!["report"])));
    let pttl: i64 = con.pttl(&about).expect("PTTL");
    assert!((9_000..=10_000).contains(&pttl), "{pttl}");
    // Announcing without it keeps what was said.
    announce(&mut con, &key, "pod-a", 10_000);
    let kept: String = con.hget(&about, "pod-a").expect("HGET");
    assert_eq!(kept, stored);
    // A lapsed member's entry goes with it.
    server.cli(&["ZADD", &key, "1", "pod-dead"]);
    server.cli(&["HSET", &about, "pod-dead", "1\th\tv"]);
    announce(&mut con, &key, "pod-a", 10_000);
    assert_eq!(server.cli(&["HEXISTS", &about, "pod-dead"]), "0");
    assert_eq!(server.cli(&["HEXISTS", &about, "pod-a"]), "1");
}

#[test]
fn replica_about_keeps_control_characters_out() {
    let about = replica_about(5, "ho\tst\n", "v\x1b[2J", &[]);
    assert_eq!(parse_replica_about(&about), Some((5, "ho st ", "v [2J", vec![])));
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

#[test]
fn a_run_request_needs_the_job_and_a_live_member_and_is_taken_once() {
    let (server, mut con) = start();
    let (members, jobs, runs) = (members_key("g"), jobs_key("g"), runs_key("g"));
    let request = |con: &mut Connection, job: &str, value: &str| -> i64 {
        REQUEST_RUN
            .key(&members)
            .key(&jobs)
            .key(&runs)
            .arg(job)
            .arg(value)
            .arg(10_000)
            .arg("PUBLISH")
            .arg(group_channel("g"))
            .invoke(con)
            .expect("request_run script")
    };
    let first = run_request("r1", "ana", 1);
    assert_eq!(request(&mut con, "report", &first), -2, "no replica has the job");
    server.cli(&["HSET", &jobs, "report", "* * * * * *\tUTC"]);
    assert_eq!(request(&mut con, "report", &first), -1, "no live replica");
    server.cli(&["ZADD", &members, "1", "pod-dead"]);
    assert_eq!(request(&mut con, "report", &first), -1, "a lapsed member is not live");
    announce(&mut con, &members, "pod-a", 10_000);
    assert_eq!(request(&mut con, "report", &first), 1);
    let pttl: i64 = con.pttl(&runs).expect("PTTL");
    assert!((9_000..=10_000).contains(&pttl), "requests expire: {pttl}");
    assert_eq!(request(&mut con, "report", &run_request("r2", "bo", 2)), 0, "one pending per job");
    let take = |con: &mut Connection, value: &str| -> i64 {
        TAKE_RUN.key(&runs).arg("report").arg(value).invoke(con).expect("take_run script")
    };
    assert_eq!(take(&mut con, &run_request("r2", "bo", 2)), 0, "not the pending request");
    assert_eq!(take(&mut con, &first), 1, "taken");
    assert_eq!(take(&mut con, &first), 0, "at most once");
    assert_eq!(server.cli(&["HEXISTS", &runs, "report"]), "0");
}

/// Runs `count_failure.lua` for slot `tick` (limit 3, the latest `keep` outcomes kept).
fn fail_slot(con: &mut Connection, outcomes: &str, pause: &str, tick: i64, keep: u32) -> (i64, i64) {
    COUNT_FAILURE
        .key(outcomes)
        .key(pause)
        .arg(3)
        .arg(60_000)
        .arg("auto")
        .arg(tick)
        .arg(keep)
        .invoke(con)
        .expect("script")
}

/// A success of slot `tick`, as the history write's pipeline adds it.
fn succeed_slot(con: &mut Connection, outcomes: &str, tick: i64, keep: u32) {
    let mut pipe = lock_core::redis::pipe();
    crate::failures::add_success(&mut pipe, outcomes, tick, keep);
    pipe.query::<()>(con).expect("success");
}

#[test]
fn count_failure_pauses_at_the_limit_once_and_keeps_an_operators_pause() {
    let (server, mut con) = start();
    let (outcomes, pause) = (failure_streak_key("j").expect("valid"), pause_key("j").expect("valid"));
    assert_eq!(fail_slot(&mut con, &outcomes, &pause, 1_000, 256), (1, 0));
    assert_eq!(fail_slot(&mut con, &outcomes, &pause, 2_000, 256), (2, 0));
    assert_eq!(fail_slot(&mut con, &outcomes, &pause, 3_000, 256), (3, 1), "paused at the third");
    assert_eq!(server.cli(&["GET", &pause]).trim(), "auto");
    assert_eq!(fail_slot(&mut con, &outcomes, &pause, 4_000, 256), (4, 0), "already paused: not again");
    let pttl: i64 = con.pttl(&outcomes).expect("PTTL");
    assert!((1..=60_000).contains(&pttl), "the outcomes expire: {pttl}");
    // An operator's pause is kept as it is.
    server.cli(&["SET", &pause, "by ana"]);
    server.cli(&["DEL", &outcomes]);
    for tick in [5_000, 6_000, 7_000] {
        fail_slot(&mut con, &outcomes, &pause, tick, 256);
    }
    assert_eq!(server.cli(&["GET", &pause]).trim(), "by ana");
}

/// P2: the streak counts failed slots in slot order, whatever order their final outcomes came
/// in. Slots 0, 1 and 2 fail for good, slot 3 succeeds at once while slot 2's retries still
/// run: its success must not hide three failed slots in a row (counted in the order the
/// outcomes came, the success would reset the count to 0 before slot 2's failure).
#[test]
fn count_failure_counts_failed_slots_in_a_row_in_slot_order() {
    let (server, mut con) = start();
    let (outcomes, pause) = (failure_streak_key("j").expect("valid"), pause_key("j").expect("valid"));
    assert_eq!(fail_slot(&mut con, &outcomes, &pause, 0, 256), (1, 0));
    assert_eq!(fail_slot(&mut con, &outcomes, &pause, 1_000, 256), (2, 0));
    succeed_slot(&mut con, &outcomes, 3_000, 256);
    assert_eq!(server.cli(&["EXISTS", &pause]).trim(), "0");
    assert_eq!(fail_slot(&mut con, &outcomes, &pause, 2_000, 256), (3, 1), "slots 0, 1 and 2 in a row");
    assert_eq!(server.cli(&["GET", &pause]).trim(), "auto");
    server.cli(&["DEL", &pause, &outcomes]);
    // A success between two failed slots breaks the streak, even when it came last.
    assert_eq!(fail_slot(&mut con, &outcomes, &pause, 10_000, 256), (1, 0));
    assert_eq!(fail_slot(&mut con, &outcomes, &pause, 12_000, 256), (2, 0));
    succeed_slot(&mut con, &outcomes, 11_000, 256);
    assert_eq!(fail_slot(&mut con, &outcomes, &pause, 13_000, 256), (2, 0), "12 and 13 only");
    // A slot that later succeeded (a backfill) is a success.
    succeed_slot(&mut con, &outcomes, 12_000, 256);
    assert_eq!(fail_slot(&mut con, &outcomes, &pause, 14_000, 256), (2, 0), "13 and 14 only");
    // Only the latest `keep` outcomes are kept; an outcome older than all of them counts alone.
    server.cli(&["DEL", &outcomes]);
    for tick in [20_000, 21_000] {
        succeed_slot(&mut con, &outcomes, tick, 2);
    }
    succeed_slot(&mut con, &outcomes, 22_000, 2);
    assert_eq!(server.cli(&["ZCARD", &outcomes]).trim(), "2", "trimmed to the latest two");
    assert_eq!(fail_slot(&mut con, &outcomes, &pause, 5_000, 2), (1, 0), "older than all kept: alone");
    assert_eq!(server.cli(&["ZCARD", &outcomes]).trim(), "2");
    assert_eq!(server.cli(&["EXISTS", &pause]).trim(), "0");
}

#[test]
fn take_retries_takes_each_entry_once_and_answers_a_resend_the_same() {
    let (server, mut con) = start();
    let retries = retries_key("g");
    let member = retry_member("j", 1_000, 2);
    server.cli(&["ZADD", &retries, "5", &member]);
    let take = |con: &mut Connection, taker: &str| -> Vec<i64> {
        TAKE_RETRIES
            .key(&retries)
            .key(retry_taken_key(&retries, &member))
            .arg(taker)
            .arg(60_000)
            .arg(&member)
            .invoke(con)
            .expect("take_retries script")
    };
    assert_eq!(take(&mut con, "pod-a"), [1], "taken");
    assert_eq!(server.cli(&["ZCARD", &retries]).trim(), "0", "removed");
    assert_eq!(take(&mut con, "pod-a"), [1], "a resend after a lost reply: still pod-a's");
    assert_eq!(take(&mut con, "pod-b"), [0], "nobody else's");
    assert_eq!(server.cli(&["GET", &retry_taken_key(&retries, &member)]).trim(), "pod-a");
    // Put back (its lock was held): taken again, by whoever comes first.
    server.cli(&["ZADD", &retries, "6", &member]);
    assert_eq!(take(&mut con, "pod-b"), [1]);
    assert_eq!(take(&mut con, "pod-a"), [0]);
}

#[test]
fn queue_backfill_queues_a_slot_once_unless_forced() {
    let (server, mut con) = start();
    let (retries, backfilled) = (retries_key("g"), backfilled_key("g"));
    let queue = |con: &mut Connection, now: i64, force: &str| -> Vec<i64> {
        QUEUE_BACKFILL
            .key(&retries)
            .key(&backfilled)
            .arg(now)
            .arg(60_000)
            .arg(force)
            .arg(retry_member("j", 1_000, BACKFILL_ATTEMPT))
            .arg(backfill_request("j", 1_000))
            .arg(retry_member("j", 2_000, BACKFILL_ATTEMPT))
            .arg(backfill_request("j", 2_000))
            .invoke(con)
            .expect("queue_backfill script")
    };
    assert_eq!(queue(&mut con, 100_000, "0"), [1, 1]);
    assert_eq!(server.cli(&["ZCARD", &retries]).trim(), "2");
    // A concurrent (or later) request: refused, even once the entries were taken.
    server.cli(&["DEL", &retries]);
    assert_eq!(queue(&mut con, 100_001, "0"), [0, 0]);
    assert_eq!(server.cli(&["EXISTS", &retries]).trim(), "0");
    assert_eq!(queue(&mut con, 100_002, "1"), [1, 1], "forced");
    // Past the memory of requests: queued again.
    assert_eq!(queue(&mut con, 200_000, "0"), [1, 1]);
}
