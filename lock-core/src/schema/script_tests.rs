//! Each Lua script against a real redis-server, for its edge cases: the contract between the
//! Rust side (names from this module, arguments) and the Lua side, tested in one place.

use deadpool_redis::redis::{Connection, Value};
use redis_fixture::RedisServer;

use super::scripts::{ABANDON, ACQUIRE, CLAIM_TICKS, EXTEND, RELEASE, RELEASE_OWN_MANY};
use super::*;

const LEASE: u64 = 30_000;
const HANDOFF: u64 = 2_000;
const TICKET: u64 = 3_000;

/// Tokens of two clients (client ids `aaaaaaaaaaaa` and `bbbbbbbbbbbb`).
fn token(client: char, n: u32) -> String {
    format!("pod-{client}:{}:00000000-0000-4000-8000-{n:012}", client.to_string().repeat(12))
}

struct Redis {
    server: RedisServer,
    con: Connection,
}

impl Redis {
    fn start() -> Self {
        let server = RedisServer::start();
        let con = server.connection();
        Redis { server, con }
    }

    fn cli(&self, args: &[&str]) -> String {
        self.server.cli(args)
    }

    fn now_ms(&self) -> u64 {
        let time = self.cli(&["TIME"]);
        let mut parts = time.lines().map(|s| s.parse::<u64>().expect("TIME"));
        let (secs, micros) = (parts.next().expect("seconds"), parts.next().expect("microseconds"));
        secs * 1000 + micros / 1000
    }

    /// ACQUIRE for `token` on `key`: fenced or not, with a tick, waiting (a ticket) or not.
    fn acquire(
        &mut self,
        key: &str,
        token: &str,
        fencing: bool,
        tick: Option<i64>,
        waits: bool,
    ) -> Vec<Value> {
        let mut call = ACQUIRE.key(key);
        call.key(queue_key(key)).key(tickets_key(key));
        if fencing || tick.is_some() {
            call.key(fence_key(key));
        }
        if tick.is_some() {
            call.key(tick_key(key)).key(tick_claimant_key(key));
        }
        call.arg(token)
            .arg(LEASE)
            .arg(if fencing { "1" } else { "0" })
            .arg(tick.map(|t| t.to_string()).unwrap_or_default())
            .arg(if waits { TICKET } else { 0 })
            .arg(HANDOFF)
            .arg("PUBLISH")
            .arg(release_channel_prefix(key))
            .arg(TICK_TTL.as_millis() as u64);
        call.invoke(&mut self.con).expect("acquire script")
    }

    /// As lock-core sends it: the optional arguments only when they are not the defaults.
    fn release(&mut self, key: &str, token: &str, keep_ms: u64, takeover: bool) -> Value {
        let mut call = RELEASE.key(key);
        call.key(queue_key(key)).key(tickets_key(key)).arg(token).arg(release_channel_prefix(key));
        if keep_ms > 0 || takeover {
            call.arg(keep_ms).arg("PUBLISH").arg(if takeover { "1" } else { "0" });
        }
        call.invoke(&mut self.con).expect("release script")
    }

    fn abandon(&mut self, key: &str, token: &str) -> Value {
        ABANDON
            .key(key)
            .key(queue_key(key))
            .key(tickets_key(key))
            .arg(token)
            .arg(queue_entry(token, HANDOFF))
            .arg("PUBLISH")
            .arg(release_channel_prefix(key))
            .invoke(&mut self.con)
            .expect("abandon script")
    }

    fn extend(&mut self, key: &str, token: &str) -> i64 {
        EXTEND.key(key).arg(token).arg(LEASE).invoke(&mut self.con).expect("extend script")
    }

    /// Queues `token` as a waiter with a ticket lapsing `ticket_ms` from now (negative: lapsed).
    fn queue(&mut self, key: &str, token: &str, ticket_ms: i64) {
        let until = self.now_ms() as i64 + ticket_ms;
        self.cli(&["RPUSH", &queue_key(key), &queue_entry(token, HANDOFF)]);
        self.cli(&["ZADD", &tickets_key(key), &until.to_string(), token]);
        self.cli(&["PEXPIRE", &queue_key(key), "60000"]);
        self.cli(&["PEXPIRE", &tickets_key(key), "60000"]);
    }

    fn queued(&self, key: &str) -> Vec<String> {
        self.cli(&["LRANGE", &queue_key(key), "0", "-1"])
            .lines()
            .filter(|l| !l.is_empty())
            .map(|e| token_of_entry(e).to_owned())
            .collect()
    }
}

fn ints(values: &[Value]) -> Vec<i64> {
    values.iter().map(|v| if let Value::Int(n) = v { *n } else { -99 }).collect()
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    }
}

#[test]
fn acquire_takes_refuses_queues_marks_and_fences() {
    let mut r = Redis::start();
    let (a, b) = (token('a', 1), token('b', 1));
    let key = "lock:s";
    // Free: taken, no mark, nothing queued.
    assert_eq!(ints(&r.acquire(key, &a, false, None, false)), [1, 0, 0]);
    assert_eq!(r.cli(&["GET", key]), a);
    // Held, fail fast: refused with the holder and its PTTL; not queued, not marked.
    let held = r.acquire(key, &b, false, None, false);
    assert_eq!(ints(&held)[0], 0);
    assert!((1..=LEASE as i64).contains(&ints(&held)[1]));
    assert_eq!(text(&held[2]), a);
    assert_eq!(r.cli(&["GET", key]), a, "a fail-fast caller does not mark");
    // Held, waiting: queued with its ticket, the holder marked, expiries set.
    assert_eq!(ints(&r.acquire(key, &b, false, None, true))[0], 0);
    assert_eq!(r.cli(&["GET", key]), format!("{a}{QUEUED_MARK}"));
    assert_eq!(r.queued(key), [b.as_str()]);
    let pttl: i64 = r.cli(&["PTTL", &tickets_key(key)]).parse().unwrap();
    assert!(pttl > 0 && pttl <= TICKET as i64, "{pttl}");
    // A second try refreshes the ticket, never queues twice.
    r.acquire(key, &b, false, None, true);
    assert_eq!(r.queued(key), [b.as_str()]);
    // A key holding the caller's token (a hand-off, or a lost reply) is the caller's: acquired,
    // its lease reset, out of the queue.
    r.cli(&["SET", key, &b, "PX", "100"]);
    assert_eq!(ints(&r.acquire(key, &b, false, None, true))[0], 1);
    assert!(r.cli(&["PTTL", key]).parse::<i64>().unwrap() > 1000, "lease reset");
    assert!(r.queued(key).is_empty());
    assert_eq!(r.cli(&["ZSCORE", &tickets_key(key), &b]), "(nil)");
    // Fences: at least the server time in µs, strictly increasing, expiring with the lease.
    let key = "lock:fenced";
    let first = ints(&r.acquire(key, &a, true, None, false))[1];
    assert!(first as u64 >= r.now_ms() * 1000 - 5_000_000, "floored by server time: {first}");
    r.cli(&["DEL", key]);
    let second = ints(&r.acquire(key, &a, true, None, false))[1];
    assert!(second > first);
    assert!(r.cli(&["PTTL", &fence_key(key)]).parse::<i64>().unwrap() > 0, "the counter expires");
}

#[test]
fn acquire_claims_a_tick_once_and_recognises_its_own_lost_reply() {
    let mut r = Redis::start();
    let (a, b) = (token('a', 1), token('b', 1));
    let key = "lock:job";
    assert_eq!(ints(&r.acquire(key, &a, false, Some(60_000), false))[0], 1);
    assert_eq!(r.cli(&["GET", &tick_key(key)]), "60000");
    assert_eq!(r.cli(&["GET", &tick_claimant_key(key)]), a);
    let ttl: u64 = r.cli(&["PTTL", &tick_key(key)]).parse().unwrap();
    assert!(ttl > TICK_TTL.as_millis() as u64 - 60_000, "kept for TICK_TTL: {ttl}");
    // The same send again (its reply was lost): still ours.
    assert_eq!(ints(&r.acquire(key, &a, false, Some(60_000), false))[0], 1);
    // Another caller, once the lock is free: the tick is done.
    r.cli(&["DEL", key]);
    assert_eq!(ints(&r.acquire(key, &b, false, Some(60_000), false)), [2, 60_000, 0]);
    // An older slot is done too; a later one is claimed.
    assert_eq!(ints(&r.acquire(key, &b, false, Some(1_000), false))[0], 2);
    assert_eq!(ints(&r.acquire(key, &b, false, Some(120_000), false))[0], 1);
    // Handed the key but the tick was claimed meanwhile: told so, with `ours`.
    r.cli(&["SET", key, &a, "PX", "5000"]);
    assert_eq!(ints(&r.acquire(key, &a, false, Some(120_000), false)), [2, 120_000, 1]);
}

#[test]
fn a_free_key_goes_to_the_oldest_live_waiter_not_to_a_newcomer() {
    let mut r = Redis::start();
    let key = "lock:fifo";
    let (w1, w2, newcomer) = (token('b', 1), token('b', 2), token('a', 9));
    r.queue(key, &token('b', 0), -1000); // lapsed ticket: dropped on the way
    r.queue(key, &w1, 10_000);
    r.queue(key, &w2, 10_000);
    // A waiting newcomer finds the key free but hands it to the oldest live waiter, and queues.
    let reply = r.acquire(key, &newcomer, false, None, true);
    assert_eq!(ints(&reply)[0], 0);
    assert_eq!(ints(&reply)[1], HANDOFF as i64);
    assert_eq!(text(&reply[2]), w1);
    assert_eq!(r.cli(&["GET", key]), format!("{w1}{QUEUED_MARK}"), "reserved, marked: others queue");
    assert_eq!(r.queued(key), [w2.clone(), newcomer.clone()]);
    let record: i64 = r.cli(&["ZSCORE", &tickets_key(key), &handoff_record("bbbbbbbbbbbb")]).parse().unwrap();
    assert!(record > r.now_ms() as i64, "the reservation's deadline is recorded: {record}");
    // The caller at the head of the queue takes a free key itself.
    r.cli(&["DEL", key]);
    r.abandon(key, &w2);
    assert_eq!(r.queued(key), [newcomer.as_str()]);
    assert_eq!(ints(&r.acquire(key, &newcomer, false, None, true))[0], 1);
    assert!(r.queued(key).is_empty());
    assert_eq!(r.cli(&["GET", key]), newcomer);
}

#[test]
fn a_lapsed_reservation_skips_that_clients_other_tickets_once_counted() {
    let mut r = Redis::start();
    let key = "lock:lapsed";
    let (dead1, dead2, live) = (token('b', 1), token('b', 2), token('a', 1));
    r.queue(key, &dead1, 10_000);
    r.queue(key, &dead2, 10_000);
    r.queue(key, &live, 10_000);
    // A reservation for client b that ran out untaken.
    r.cli(&["ZADD", &tickets_key(key), &(r.now_ms() - 10).to_string(), &handoff_record("bbbbbbbbbbbb")]);
    // The free key skips both of b's tickets (one lapse counted) and the live waiter, at the head
    // now, takes it.
    let reply = r.acquire(key, &live, false, None, true);
    assert_eq!(ints(&reply), [1, 0, 1]);
    assert!(r.queued(key).is_empty());
    // Counted once: the record is kept negative, so b's later tickets are skipped, uncounted...
    let record: i64 = r.cli(&["ZSCORE", &tickets_key(key), &handoff_record("bbbbbbbbbbbb")]).parse().unwrap();
    assert!(record < 0, "{record}");
    r.queue(key, &dead1, 10_000);
    r.cli(&["SET", key, &format!("{live}{QUEUED_MARK}"), "PX", "5000"]);
    assert_eq!(r.release(key, &live, 0, false), Value::Int(1), "nobody to hand to, no new count");
    assert_eq!(r.cli(&["EXISTS", key]), "0");
    // ...until b shows it is alive: a new ticket of b clears the record.
    let b3 = token('b', 3);
    r.cli(&["SET", key, &live, "PX", "5000"]);
    r.acquire(key, &b3, false, None, true);
    assert_eq!(r.cli(&["ZSCORE", &tickets_key(key), &handoff_record("bbbbbbbbbbbb")]), "(nil)");
}

#[test]
fn release_deletes_hands_over_keeps_and_checks_the_owner() {
    let mut r = Redis::start();
    let (a, b, c) = (token('a', 1), token('b', 1), token('c', 1));
    let key = "lock:r";
    r.cli(&["SET", key, &a, "PX", "30000"]);
    assert_eq!(r.release(key, &b, 0, false), Value::Int(0), "not the owner");
    assert_eq!(r.cli(&["GET", key]), a);
    assert_eq!(r.release(key, &a, 0, false), Value::Int(1));
    assert_eq!(r.cli(&["EXISTS", key]), "0", "the bare path deletes");
    // Within a minimum hold: kept as `<token>:released` for the rest of it.
    r.cli(&["SET", key, &a, "PX", "30000"]);
    assert_eq!(r.release(key, &a, 700, false), Value::Int(1));
    assert_eq!(r.cli(&["GET", key]), format!("{a}{RELEASED_SUFFIX}"));
    assert!(r.cli(&["PTTL", key]).parse::<i64>().unwrap() <= 700);
    assert_eq!(r.extend(key, &a), 0, "no renewal stretches a released hold");
    // Marked: handed to the oldest live waiter, for the hand-off time it named.
    r.cli(&["SET", key, &format!("{a}{QUEUED_MARK}"), "PX", "30000"]);
    r.queue(key, &b, 10_000);
    r.queue(key, &c, 10_000);
    assert_eq!(r.release(key, &a, 0, false), Value::Int(2), "2: handed over");
    assert_eq!(r.cli(&["GET", key]), format!("{b}{QUEUED_MARK}"));
    assert!(r.cli(&["PTTL", key]).parse::<u64>().unwrap() <= HANDOFF);
    assert_eq!(r.queued(key), [c.as_str()]);
    // The last waiter gets it unmarked; with nobody left the key is deleted.
    assert_eq!(r.release(key, &b, 0, false), Value::Int(2));
    assert_eq!(r.cli(&["GET", key]), c);
    r.cli(&["SET", key, &format!("{c}{QUEUED_MARK}"), "PX", "30000"]);
    assert_eq!(r.release(key, &c, 0, false), Value::Int(1));
    assert_eq!(r.cli(&["EXISTS", key]), "0");
}

#[test]
fn a_take_over_does_not_exempt_the_dead_holders_client() {
    let mut r = Redis::start();
    let key = "lock:t";
    let (dead_holder, dead_waiter, live) = (token('b', 1), token('b', 2), token('a', 1));
    r.cli(&["SET", key, &format!("{dead_holder}{QUEUED_MARK}"), "PX", "30000"]);
    r.queue(key, &dead_waiter, 10_000);
    r.queue(key, &live, 10_000);
    r.cli(&["ZADD", &tickets_key(key), &(r.now_ms() - 10).to_string(), &handoff_record("bbbbbbbbbbbb")]);
    // The holder's own release would trust its client's waiters; a take-over does not.
    assert_eq!(
        r.release(key, &dead_holder, 0, true),
        Value::Array(vec![Value::Int(2), Value::Int(1)]),
        "handed over, 1 lapsed"
    );
    assert_eq!(r.cli(&["GET", key]), live);
}

#[test]
fn abandon_leaves_the_queue_and_passes_a_reservation_on() {
    let mut r = Redis::start();
    let key = "lock:a";
    let (holder, leaver, next) = (token('a', 1), token('b', 1), token('c', 1));
    r.cli(&["SET", key, &format!("{holder}{QUEUED_MARK}"), "PX", "30000"]);
    r.queue(key, &leaver, 10_000);
    r.queue(key, &next, 10_000);
    // Not holding: just out of the queue.
    assert_eq!(r.abandon(key, &leaver), Value::Array(vec![Value::Int(0), Value::Int(0)]));
    assert_eq!(r.queued(key), [next.as_str()]);
    // Reserved for it (a release handed over just now): passed on in the same call.
    r.queue(key, &leaver, 10_000);
    r.cli(&["SET", key, &format!("{leaver}{QUEUED_MARK}"), "PX", "2000"]);
    assert_eq!(r.abandon(key, &leaver), Value::Array(vec![Value::Int(1), Value::Int(0)]));
    assert_eq!(r.cli(&["GET", key]), next);
    assert!(r.queued(key).is_empty());
    // Holding with nobody queued: freed.
    assert_eq!(r.abandon(key, &next), Value::Array(vec![Value::Int(1), Value::Int(0)]));
    assert_eq!(r.cli(&["EXISTS", key]), "0");
}

#[test]
fn extend_renews_only_its_own_key_and_never_creates_one() {
    let mut r = Redis::start();
    let (a, b) = (token('a', 1), token('b', 1));
    let key = "lock:e";
    assert_eq!(r.extend(key, &a), 0);
    assert_eq!(r.cli(&["EXISTS", key]), "0", "never resurrected");
    r.cli(&["SET", key, &format!("{a}{QUEUED_MARK}"), "PX", "100"]);
    assert_eq!(r.extend(key, &a), 1, "marked or not");
    assert!(r.cli(&["PTTL", key]).parse::<i64>().unwrap() > 1000);
    assert_eq!(r.extend(key, &b), 0);
}

/// The one-key release deletes only its own unmarked token and sends a marked one to the full
/// release untouched.
#[test]
fn release_own_deletes_its_token_and_defers_a_marked_one() {
    let mut r = Redis::start();
    let key = "lock:own";
    let (a, b) = (token('a', 1), token('b', 1));
    let own = |r: &mut Redis, token: &str| -> Value {
        super::scripts::RELEASE_OWN.key(key).arg(token).invoke(&mut r.con).expect("release_own script")
    };
    assert_eq!(own(&mut r, &a), Value::Int(0), "nothing there");
    r.cli(&["SET", key, &a, "PX", "10000"]);
    assert_eq!(own(&mut r, &b), Value::Int(0), "not the owner");
    assert_eq!(r.cli(&["GET", key]), a);
    assert_eq!(own(&mut r, &a), Value::Int(1));
    assert_eq!(r.cli(&["EXISTS", key]), "0");
    let marked = format!("{a}{QUEUED_MARK}");
    r.cli(&["SET", key, &marked, "PX", "10000"]);
    assert_eq!(own(&mut r, &a), Value::Int(-1), "someone queued: the full release hands over");
    assert_eq!(r.cli(&["GET", key]), marked, "untouched");
    assert_eq!(own(&mut r, &b), Value::Int(0));
    r.cli(&["SET", key, &format!("{a}{RELEASED_SUFFIX}"), "PX", "10000"]);
    assert_eq!(own(&mut r, &a), Value::Int(0), "kept after release: no longer ours");
}

/// The markers the Lua spells are the ones this module names.
#[test]
fn the_scripts_spell_the_markers_of_this_module() {
    for (name, lua) in [
        ("acquire", lua::ACQUIRE),
        ("release", &lua::RELEASE),
        ("abandon", lua::ABANDON),
        ("extend", lua::EXTEND),
        ("release_own", lua::RELEASE_OWN),
    ] {
        assert!(lua.contains(&format!("'{QUEUED_MARK}'")), "{name} checks the queue mark");
        assert!(!lua.contains("lock-client:"), "{name}: a liveness key is never a script's business");
    }
    assert!(lua::RELEASE.contains(&format!("'{RELEASED_SUFFIX}'")));
    assert!(lua::ACQUIRE.contains(&format!("'{}'", HANDOFF_RECORD)));
    // Every script reads its keys from KEYS: none builds a key name from a suffix.
    for suffix in [FENCE, TICK, QUEUE, TICKETS, RELEASED] {
        for lua in [lua::ACQUIRE, &lua::RELEASE, lua::ABANDON, lua::EXTEND] {
            assert!(
                !lua.contains(&format!("'{suffix}'")) && !lua.contains(&format!("':{suffix}")),
                "{suffix}"
            );
        }
    }
}

impl Redis {
    fn sem_acquire(&mut self, name: &str, token: &str, permits: u32, waits: bool) -> Vec<Value> {
        super::scripts::SEM_ACQUIRE
            .key(name)
            .key(queue_key(name))
            .key(tickets_key(name))
            .arg(token)
            .arg(LEASE)
            .arg(permits)
            .arg("0")
            .arg(if waits { TICKET } else { 0 })
            .arg(HANDOFF)
            .arg("PUBLISH")
            .arg(release_channel_prefix(name))
            .invoke(&mut self.con)
            .expect("sem_acquire script")
    }

    fn sem_release(&mut self, name: &str, token: &str, leave: bool) -> Vec<i64> {
        let values: Vec<Value> = super::scripts::SEM_RELEASE
            .key(name)
            .key(queue_key(name))
            .key(tickets_key(name))
            .arg(token)
            .arg(0)
            .arg("PUBLISH")
            .arg(release_channel_prefix(name))
            .arg("0")
            .arg(if leave { queue_entry(token, HANDOFF) } else { String::new() })
            .invoke(&mut self.con)
            .expect("sem_release script");
        ints(&values)
    }

    fn sem_count(&mut self, name: &str) -> Vec<i64> {
        super::scripts::SEM_COUNT.key(name).invoke(&mut self.con).expect("sem_count script")
    }

    fn rw_acquire(&mut self, name: &str, token: &str, read: bool, waits: bool) -> Vec<Value> {
        super::scripts::RW_ACQUIRE
            .key(name)
            .key(readers_key(name))
            .key(queue_key(name))
            .key(tickets_key(name))
            .arg(token)
            .arg(LEASE)
            .arg(if read { "r" } else { "w" })
            .arg("0")
            .arg(if waits { TICKET } else { 0 })
            .arg(HANDOFF)
            .arg("PUBLISH")
            .arg(release_channel_prefix(name))
            .invoke(&mut self.con)
            .expect("rw_acquire script")
    }

    fn rw_release(&mut self, name: &str, token: &str, read: bool) -> Vec<i64> {
        let values: Vec<Value> = super::scripts::RW_RELEASE
            .key(name)
            .key(readers_key(name))
            .key(queue_key(name))
            .key(tickets_key(name))
            .arg(token)
            .arg(if read { "r" } else { "w" })
            .arg(0)
            .arg("PUBLISH")
            .arg(release_channel_prefix(name))
            .arg("0")
            .arg("")
            .invoke(&mut self.con)
            .expect("rw_release script");
        ints(&values)
    }

    fn members(&self, zset: &str) -> Vec<String> {
        let mut m: Vec<String> = self
            .cli(&["ZRANGE", zset, "0", "-1"])
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        m.sort();
        m
    }
}

#[test]
fn a_semaphore_admits_its_permits_queues_the_rest_and_hands_freed_permits_in_order() {
    let mut r = Redis::start();
    let name = "sem:s";
    let (a, b, c, d) = (token('a', 1), token('b', 1), token('c', 1), token('d', 1));
    assert_eq!(ints(&r.sem_acquire(name, &a, 2, false))[0], 1);
    assert_eq!(ints(&r.sem_acquire(name, &b, 2, false))[0], 1);
    assert_eq!(r.sem_count(name), [2, 2]);
    // Another count is refused, never a silent over-admission.
    assert_eq!(ints(&r.sem_acquire(name, &c, 3, false)), [-1, 2]);
    // Full: refused with the holders; a waiter queues.
    let full = r.sem_acquire(name, &c, 2, true);
    assert_eq!(ints(&full)[0], 0);
    let holders: Vec<String> = full[3..].iter().map(text).collect();
    assert!(holders.contains(&a) && holders.contains(&b), "{holders:?}");
    r.sem_acquire(name, &d, 2, true);
    assert_eq!(r.queued(name), [c.as_str(), d.as_str()]);
    // A release hands the freed permit to the oldest waiter (a reservation for its hand-off
    // time), not to a newcomer.
    assert_eq!(r.sem_release(name, &a, false), [2, 0], "released, callers queued");
    let reserved: u64 = r.cli(&["ZSCORE", name, &c]).parse().unwrap();
    assert!(reserved <= r.now_ms() + HANDOFF, "reserved for the hand-off time only");
    assert_eq!(ints(&r.sem_acquire(name, &token('e', 1), 2, false))[0], 0, "no barging");
    // The waiter confirms: its permit gets the full lease.
    assert_eq!(ints(&r.sem_acquire(name, &c, 2, true))[0], 1);
    assert!(r.cli(&["ZSCORE", name, &c]).parse::<u64>().unwrap() > r.now_ms() + HANDOFF);
    assert_eq!(r.queued(name), [d.as_str()]);
    // A waiter that gives up leaves the queue.
    assert_eq!(r.sem_release(name, &d, true), [0, 0]);
    assert!(r.queued(name).is_empty());
    // Lapsed permits (a holder that died) are dropped by the next acquirer.
    r.cli(&["ZADD", name, &(r.now_ms() - 1).to_string(), &b]);
    assert_eq!(ints(&r.sem_acquire(name, &d, 2, false))[0], 1);
    assert_eq!(r.sem_count(name), [2, 2]);
    // Idle again: the declared count goes with the last holder.
    r.sem_release(name, &c, false);
    r.sem_release(name, &d, false);
    assert_eq!(r.cli(&["EXISTS", name]), "0");
    assert_eq!(r.sem_count(name), [-1, 0]);
    assert_eq!(ints(&r.sem_acquire(name, &a, 5, false))[0], 1, "a new count once idle");
    assert!(r.cli(&["PTTL", name]).parse::<i64>().unwrap() > 0, "the holders expire");
}

#[test]
fn an_idle_semaphore_is_taken_and_given_back_on_the_short_path_without_skipping_waiters() {
    let mut r = Redis::start();
    let name = "sem:idle";
    let (a, b, c) = (token('a', 1), token('b', 1), token('c', 1));
    // Idle: taken at once, declared, with an expiry.
    assert_eq!(ints(&r.sem_acquire(name, &a, 2, false)), [1, 0, 0]);
    assert_eq!(r.members(name), ["#permits".to_owned(), a.clone()]);
    let pttl: i64 = r.cli(&["PTTL", name]).parse().unwrap();
    assert!(pttl > 0 && pttl <= LEASE as i64, "{pttl}");
    // The last holder out with nobody queued: idle again.
    assert_eq!(r.sem_release(name, &a, false), [1, 0]);
    assert_eq!(r.cli(&["EXISTS", name]), "0");
    // WakeUps queued while the holders zset expired (it outlives tickets, but a test can
    // delete it): the next caller is not the head, so it hands the permit to the waiter instead
    // of barging, and the zset is declared again.
    r.sem_acquire(name, &b, 1, false);
    assert_eq!(ints(&r.sem_acquire(name, &c, 1, true))[0], 0);
    r.cli(&["DEL", name]);
    assert_eq!(ints(&r.sem_acquire(name, &a, 1, false))[0], 0, "the waiter is served first");
    assert_eq!(r.members(name), ["#permits".to_owned(), c.clone()]);
    assert!(r.cli(&["PTTL", name]).parse::<i64>().unwrap() > 0, "the holders expire");
    // A release beside a queue takes the long path: the permit goes on to the next waiter.
    assert_eq!(ints(&r.sem_acquire(name, &c, 1, true))[0], 1, "the waiter confirms");
    assert_eq!(ints(&r.sem_acquire(name, &b, 1, true))[0], 0);
    assert_eq!(r.sem_release(name, &c, false), [2, 0], "released, callers queued");
    assert_eq!(r.members(name), ["#permits".to_owned(), b.clone()], "reserved for b");
}

#[test]
fn a_read_write_lock_admits_readers_together_and_a_writer_alone_in_arrival_order() {
    let mut r = Redis::start();
    let name = "rw:s";
    let readers = readers_key(name);
    let (r1, r2, w1, r3) = (token('a', 1), token('b', 1), token('c', 1), token('d', 1));
    assert_eq!(ints(&r.rw_acquire(name, &r1, true, false))[0], 1);
    assert_eq!(ints(&r.rw_acquire(name, &r2, true, false))[0], 1, "readers share");
    assert_eq!(r.members(&readers).len(), 2);
    // A writer waits for the readers; a reader that comes after the writer waits behind it.
    let refused = r.rw_acquire(name, &w1, false, true);
    assert_eq!(ints(&refused)[0], 0);
    assert_eq!(ints(&r.rw_acquire(name, &r3, true, true))[0], 0, "no writer starvation");
    assert_eq!(r.queued(name), [w1.as_str(), r3.as_str()]);
    // The last reader out hands the lock to the writer, and only to it.
    assert_eq!(r.rw_release(name, &r1, true), [1, 0]);
    assert_eq!(r.cli(&["EXISTS", name]), "0", "one reader still in");
    assert_eq!(r.rw_release(name, &r2, true), [1, 0]);
    assert_eq!(r.cli(&["GET", name]), w1, "reserved for the writer");
    assert_eq!(r.queued(name), [r3.as_str()]);
    assert_eq!(ints(&r.rw_acquire(name, &w1, false, true))[0], 1, "the writer confirms");
    assert_eq!(ints(&r.rw_acquire(name, &token('e', 1), true, false))[0], 0, "no reader beside a writer");
    // The writer's release grants the run of readers queued behind it.
    r.rw_acquire(name, &token('f', 1), true, true);
    assert_eq!(r.rw_release(name, &w1, false), [1, 0]);
    assert_eq!(r.members(&readers).len(), 2, "both queued readers granted");
    assert!(r.queued(name).is_empty());
    assert_eq!(r.rw_release(name, &w1, false), [0, 0], "not the writer any more");
}

impl Redis {
    /// CLAIM_TICKS of `tick` for `claims` (key, token), as lock-core sends it.
    fn claim_ticks(&mut self, tick: i64, claims: &[(&str, &str)]) -> Vec<Value> {
        let mut call = CLAIM_TICKS.prepare_invoke();
        for (key, _) in claims {
            call.key(*key).key(tick_key(key));
        }
        call.arg(tick).arg(LEASE).arg(TICK_TTL.as_millis() as u64);
        for (_, token) in claims {
            call.arg(*token);
        }
        call.invoke(&mut self.con).expect("claim_ticks script")
    }
}

#[test]
fn claim_ticks_takes_free_locks_once_per_tick_and_changes_nothing_else() {
    let mut r = Redis::start();
    let (a, b) = (token('a', 1), token('b', 1));
    let (free, held, done, junk) = ("lock:c1", "lock:{c}2", "lock:c3", "lock:c4");
    r.cli(&["SET", held, &b, "PX", "60000"]);
    r.cli(&["SET", &tick_key(done), "5000", "PX", "60000"]);
    r.cli(&["SET", &tick_key(junk), "not a tick"]);
    let reply = r.claim_ticks(5000, &[(free, &a), (held, &a), (done, &a), (junk, &a)]);
    assert_eq!(ints(&reply[..2]), [1, 0], "a free lock: claimed");
    assert_eq!((ints(&reply[2..3]), text(&reply[3])), (vec![0], b.clone()), "held: the holder's value");
    assert_eq!(ints(&reply[4..6]), [2, 5000], "the tick was claimed before");
    assert_eq!(ints(&reply[6..8]), [1, 0], "an unreadable tick value is replaced");
    // Claimed: the lock holds the token with the lease, the tick is recorded and expires.
    assert_eq!(r.cli(&["GET", free]), a);
    assert!((1..=LEASE as i64).contains(&r.cli(&["PTTL", free]).parse::<i64>().expect("pttl")));
    assert_eq!(r.cli(&["GET", &tick_key(free)]), "5000");
    let ttl: i64 = r.cli(&["PTTL", &tick_key(free)]).parse().expect("pttl");
    assert!(ttl > 60_000 && ttl <= TICK_TTL.as_millis() as i64, "tick TTL {ttl}");
    // Held and done: nothing changed (the lock given back, the tick put back).
    assert_eq!(r.cli(&["GET", held]), b);
    assert_eq!(r.cli(&["EXISTS", &tick_key(held)]), "0");
    assert_eq!(r.cli(&["EXISTS", done]), "0");
    assert_eq!(r.cli(&["GET", &tick_key(done)]), "5000");
    assert_eq!(r.cli(&["GET", &tick_key(junk)]), "5000");
    // No claimant key: a batch is never sent again with the same tokens.
    assert_eq!(r.cli(&["EXISTS", &tick_claimant_key(free)]), "0");
    // Once released, the same tick and an older one are refused; a newer one is claimed.
    r.cli(&["DEL", free]);
    let reply = r.claim_ticks(4000, &[(free, &b)]);
    assert_eq!(ints(&reply), [2, 5000]);
    assert_eq!(r.cli(&["EXISTS", free]), "0");
    assert_eq!(ints(&r.claim_ticks(5000, &[(free, &b)])), [2, 5000]);
    assert_eq!(ints(&r.claim_ticks(6000, &[(free, &b)])), [1, 0]);
    assert_eq!(r.cli(&["GET", free]), b);
    assert_eq!(r.cli(&["GET", &tick_key(free)]), "6000");
}

#[test]
fn release_own_many_deletes_only_its_tokens_and_defers_when_callers_queue() {
    let mut r = Redis::start();
    let (a, b) = (token('a', 1), token('b', 1));
    r.cli(&["SET", "lock:r1", &a, "PX", "60000"]);
    r.cli(&["SET", "lock:r2", &b, "PX", "60000"]);
    r.cli(&["SET", "lock:r3", &format!("{a}|w"), "PX", "60000"]);
    let reply: Vec<Value> = RELEASE_OWN_MANY
        .key("lock:r1")
        .key("lock:r2")
        .key("lock:r3")
        .key("lock:r4")
        .arg(&a)
        .arg(&a)
        .arg(&a)
        .arg(&a)
        .invoke(&mut r.con)
        .expect("release_own_many script");
    assert_eq!(ints(&reply), [1, 0, -1, 0]);
    assert_eq!(r.cli(&["EXISTS", "lock:r1"]), "0", "its own lock: deleted");
    assert_eq!(r.cli(&["GET", "lock:r2"]), b, "another's: kept");
    assert_eq!(r.cli(&["GET", "lock:r3"]), format!("{a}|w"), "callers queued: left to release.lua");
}

/// The key expired with `c` queued; `a` finds it free and hands it to `c` (the oldest live
/// waiter), then queues itself. `c`'s release must hand over to `a`: before the fix the value
/// was left unmarked (nobody else was queued at the hand-off), so `c`'s one-key release
/// deleted the key while `a` waited, with no message (`a` slept to its fallback retry, and a
/// fail-fast caller could take the free key ahead of it).
#[test]
fn a_free_key_handed_to_an_older_waiter_is_marked_for_the_caller_queued_behind_it() {
    let mut r = Redis::start();
    let key = "lock:unmarked";
    let (holder, c, a) = (token('b', 1), token('c', 1), token('a', 1));
    r.cli(&["SET", key, &holder, "PX", "30000"]);
    assert_eq!(ints(&r.acquire(key, &c, false, None, true))[0], 0, "c queues behind the holder");
    r.cli(&["DEL", key]); // the holder's lease ran out (a stalled holder)
    let reply = r.acquire(key, &a, false, None, true);
    assert_eq!((ints(&reply)[0], text(&reply[2])), (0, c.clone()), "handed to c, a refused");
    assert_eq!(r.queued(key), [a.as_str()]);
    assert_eq!(r.cli(&["GET", key]), format!("{c}{QUEUED_MARK}"), "marked: a queues behind c");
    // c confirms, then releases as lock-core does: the one-key release first.
    assert_eq!(ints(&r.acquire(key, &c, false, None, true))[0], 1);
    let own: Value = super::scripts::RELEASE_OWN.key(key).arg(&c).invoke(&mut r.con).expect("release_own");
    assert_eq!(own, Value::Int(-1), "callers queue: the full release is needed");
    assert_eq!(r.release(key, &c, 0, false), Value::Int(2), "handed over");
    assert_eq!(r.cli(&["GET", key]), a, "never freed while a waits");
}

/// A hand-off that empties the queue deletes the list while the tickets zset survives (the
/// waiter's client's hand-off record); the next waiter's RPUSH recreates the list. Before the
/// fix it had no expiry (the zset's was long enough, so neither was lengthened) and outlived
/// a dead waiter forever. Locks, semaphores and read-write locks queue the same way.
#[test]
fn a_queue_recreated_after_a_hand_off_expires() {
    let mut r = Redis::start();
    let key = "lock:ttl";
    let (holder, w1, w2) = (token('a', 1), token('b', 1), token('c', 1));
    r.cli(&["SET", key, &holder, "PX", "30000"]);
    assert_eq!(ints(&r.acquire(key, &w1, false, None, true))[0], 0);
    assert_eq!(r.release(key, &holder, 0, false), Value::Int(2), "handed to w1");
    assert_eq!(r.cli(&["EXISTS", &queue_key(key)]), "0", "the emptied list is gone");
    assert_eq!(r.cli(&["EXISTS", &tickets_key(key)]), "1", "the tickets survive (w1's record)");
    assert_eq!(ints(&r.acquire(key, &w2, false, None, true))[0], 0, "w2 queues behind w1");
    let ttl = |r: &Redis, k: &str| r.cli(&["PTTL", k]).parse::<i64>().expect("PTTL");
    let (list, zset) = (ttl(&r, &queue_key(key)), ttl(&r, &tickets_key(key)));
    assert!(list > 0 && list >= zset, "the queue expires, not before the tickets: {list} vs {zset} ms");

    // A semaphore's and a read-write lock's queue, recreated the same way (the tickets kept
    // alive by a record), get an expiry too.
    let (sem, rw) = ("sem:ttl", "rw:ttl");
    r.cli(&["ZADD", &tickets_key(sem), &(r.now_ms() + 60_000).to_string(), &handoff_record("eeeeeeeeeeee")]);
    r.cli(&["PEXPIRE", &tickets_key(sem), "60000"]);
    assert_eq!(ints(&r.sem_acquire(sem, &holder, 1, false))[0], 1);
    assert_eq!(ints(&r.sem_acquire(sem, &w1, 1, true))[0], 0);
    assert!(ttl(&r, &queue_key(sem)) > 0, "the semaphore's queue expires");
    r.cli(&["ZADD", &tickets_key(rw), &(r.now_ms() + 60_000).to_string(), &handoff_record("eeeeeeeeeeee")]);
    r.cli(&["PEXPIRE", &tickets_key(rw), "60000"]);
    assert_eq!(ints(&r.rw_acquire(rw, &holder, false, false))[0], 1);
    assert_eq!(ints(&r.rw_acquire(rw, &w1, true, true))[0], 0);
    assert!(ttl(&r, &queue_key(rw)) > 0, "the read-write lock's queue expires");
}
