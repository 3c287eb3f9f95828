//! Property tests of every runtime parser of user input: lock keys, Redis URLs (every scheme),
//! cron expressions and time zones, job names. For arbitrary input: never a panic, the same
//! answer (and the same error text) for the same input, no secret in an error; for generated
//! valid input: accepted, and what is printed back parses to the same value. (The attribute's
//! compile-time parsers, durations and key templates, have theirs in lock-macros.)
//!
//! No Redis needed: building a client validates its configuration and connects lazily.

use std::sync::LazyLock;

use lock_core::{LockClient, LockError, MAX_KEY_LEN, validate_key};
use lock_scheduler::chrono::{DateTime, TimeDelta, Utc};
use lock_scheduler::{Schedule, ScheduleError, chrono_tz};
use proptest::prelude::*;

/// A runtime to build clients in (building one may start its background tasks).
static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime")
});

fn config() -> ProptestConfig {
    ProptestConfig { cases: 512, ..ProptestConfig::default() }
}

/// Text a user might type, with the characters parsers trip on over-represented.
fn messy_text(max: usize) -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => "[a-z0-9:._-]{1,8}",
        1 => Just("{".to_owned()),
        1 => Just("}".to_owned()),
        1 => Just(" ".to_owned()),
        1 => Just("\t".to_owned()),
        1 => Just("\n".to_owned()),
        1 => Just("\u{0}".to_owned()),
        1 => Just("\u{a0}".to_owned()),
        1 => Just("é".to_owned()),
        1 => Just("*".to_owned()),
        1 => Just(",".to_owned()),
        1 => Just("/".to_owned()),
        1 => Just("@".to_owned()),
        1 => any::<char>().prop_map(String::from),
    ];
    prop::collection::vec(piece, 0..max).prop_map(|p| p.concat())
}

// ---------------------------------------------------------------------------------------------
// lock keys

/// The rule, written independently of the implementation's one-pass fast path.
fn key_is_valid(key: &str) -> bool {
    let tag_ok = !key.contains(['{', '}']) || lock_core::schema::hash_tag(key).is_some();
    !key.trim().is_empty() && key.len() <= MAX_KEY_LEN && !key.chars().any(char::is_control) && tag_ok
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_key_is_accepted_exactly_when_the_rule_says(key in messy_text(40)) {
        let first = validate_key(&key);
        prop_assert_eq!(first.is_ok(), key_is_valid(&key), "{:?}: {:?}", key, first);
        // The same answer, in the same words.
        let again = validate_key(&key);
        prop_assert_eq!(first.as_ref().err().map(ToString::to_string), again.err().map(|e| e.to_string()));
        if let Err(e) = first {
            prop_assert!(matches!(e, LockError::InvalidKey { .. }), "{e:?}");
        }
    }

    #[test]
    fn keys_around_the_length_limit(len in (MAX_KEY_LEN - 3)..(MAX_KEY_LEN + 3), c in "[a-z{}é]") {
        let key: String = c.repeat(len).chars().take(len).collect();
        prop_assert_eq!(validate_key(&key).is_ok(), key_is_valid(&key), "{} bytes", key.len());
    }
}

// ---------------------------------------------------------------------------------------------
// Redis URLs

/// A password no message may repeat.
const SECRET: &str = "Zq9Secret";

fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("127.0.0.1".to_owned()),
        Just("redis-0.redis.svc".to_owned()),
        Just("[::1]".to_owned()),
        "[a-z][a-z0-9-]{0,12}",
    ]
}

fn port() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (1u32..=65535).prop_map(|p| format!(":{p}")),
        1 => Just(String::new()),
        1 => (65536u32..10_000_000).prop_map(|p| format!(":{p}")),
        1 => "[a-z]{1,4}".prop_map(|p| format!(":{p}")),
        1 => Just(":".to_owned()),
    ]
}

/// Strings shaped like Redis URLs, valid and not, some with the secret password.
fn url_like() -> impl Strategy<Value = String> {
    let scheme = prop_oneof![
        Just("redis"),
        Just("rediss"),
        Just("redis+sentinel"),
        Just("rediss+sentinel"),
        Just("redis+cluster"),
        Just("rediss+cluster"),
        Just("redis+unix"),
        Just("http"),
        Just(""),
    ];
    let auth = prop_oneof![
        Just(String::new()),
        Just(format!(":{SECRET}@")),
        Just(format!("app:{SECRET}@")),
        Just(format!("app:{SECRET}:x@")),
    ];
    let nodes =
        prop::collection::vec((host(), port()).prop_map(|(h, p)| h + &p), 0..4).prop_map(|n| n.join(","));
    let path = prop_oneof![
        Just(String::new()),
        Just("/".to_owned()),
        Just("/mymaster".to_owned()),
        Just("/mymaster/3".to_owned()),
        Just("/0".to_owned()),
        Just("/mymaster/x".to_owned()),
        messy_text(6).prop_map(|t| format!("/{t}")),
    ];
    let sep = prop_oneof![8 => Just("://"), 1 => Just(":/"), 1 => Just("")];
    (scheme, sep, auth, nodes, path).prop_map(|(s, sep, a, n, p)| format!("{s}{sep}{a}{n}{p}"))
}

fn build(url: &str) -> Result<LockClient, LockError> {
    let _runtime = RUNTIME.enter();
    LockClient::builder().url(url).instance_id("proptest").build()
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_url_never_panics_answers_the_same_and_never_repeats_a_password(url in url_like()) {
        let first = build(&url).err().map(|e| e.to_string());
        let again = build(&url).err().map(|e| e.to_string());
        prop_assert_eq!(&first, &again, "{}", url);
        if let Some(message) = &first {
            prop_assert!(!message.contains(SECRET), "{url}: {message}");
        }
        let builder = format!("{:?}", LockClient::builder().url(url.as_str()));
        prop_assert!(!builder.contains(SECRET), "{}", builder);
    }

    #[test]
    fn well_formed_sentinel_and_cluster_urls_are_accepted(
        tls in any::<bool>(),
        nodes in prop::collection::vec((host(), 1u32..=65535), 1..4),
        master in "[a-z][a-z0-9_-]{0,15}",
        db in prop::option::of(0u32..16),
        password in prop::option::of("[A-Za-z0-9]{1,12}"),
    ) {
        let s = if tls { "s" } else { "" };
        let auth = password.map(|p| format!(":{p}@")).unwrap_or_default();
        let list = nodes.iter().map(|(h, p)| format!("{h}:{p}")).collect::<Vec<_>>().join(",");
        let db = db.map(|d| format!("/{d}")).unwrap_or_default();
        let sentinel = format!("redis{s}+sentinel://{auth}{list}/{master}{db}");
        prop_assert!(build(&sentinel).is_ok(), "{sentinel}: {:?}", build(&sentinel).err());
        let cluster = format!("redis{s}+cluster://{auth}{list}");
        prop_assert!(build(&cluster).is_ok(), "{cluster}: {:?}", build(&cluster).err());
    }
}

// ---------------------------------------------------------------------------------------------
// cron expressions and time zones

/// One valid field: `*`, a value, a range, a step, or a list, within `lo..=hi`.
fn cron_field(lo: u32, hi: u32) -> impl Strategy<Value = String> {
    let value = lo..=hi;
    prop_oneof![
        Just("*".to_owned()),
        value.clone().prop_map(|v| v.to_string()),
        (value.clone(), value.clone()).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
        (1..=hi.max(1)).prop_map(|s| format!("*/{s}")),
        prop::collection::btree_set(value, 1..4).prop_map(|v| v
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")),
    ]
}

fn valid_cron() -> impl Strategy<Value = String> {
    // Day of month up to 28 and any month: every generated expression has real dates.
    (
        cron_field(0, 59),
        cron_field(0, 59),
        cron_field(0, 23),
        cron_field(1, 28),
        cron_field(1, 12),
        cron_field(0, 6),
    )
        .prop_map(|(s, m, h, dom, mon, dow)| format!("{s} {m} {h} {dom} {mon} {dow}"))
}

/// Cron-shaped text: fields from valid ones, numbers out of range, junk, and messy text.
fn cron_like() -> impl Strategy<Value = String> {
    let field = prop_oneof![
        4 => cron_field(0, 59),
        1 => (60u32..100_000).prop_map(|v| v.to_string()),
        1 => Just("-1".to_owned()),
        1 => Just("*/0".to_owned()),
        1 => Just("L".to_owned()),
        1 => Just("?".to_owned()),
        1 => Just("MON-FRI".to_owned()),
        1 => Just("5-1".to_owned()),
        1 => messy_text(3),
    ];
    prop::collection::vec(field, 0..8).prop_map(|f| f.join(" "))
}

fn tz_like() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        1 => Just(None),
        3 => prop::sample::select(chrono_tz::TZ_VARIANTS.to_vec()).prop_map(|tz| Some(tz.name().to_owned())),
        1 => messy_text(12).prop_map(Some),
    ]
}

/// A fixed instant, so that the comparisons do not depend on when the test runs.
fn base() -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH + TimeDelta::days(365 * 56)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_cron_expression_never_panics_and_errors_echo_the_input(expr in cron_like(), tz in tz_like()) {
        let first = Schedule::new(&expr, tz.as_deref());
        let again = Schedule::new(&expr, tz.as_deref());
        prop_assert_eq!(first.as_ref().err().map(ToString::to_string), again.as_ref().err().map(ToString::to_string));
        match first {
            Ok(schedule) => {
                prop_assert_eq!(schedule.expression(), expr.as_str());
                prop_assert!(schedule.next_after(base()).is_some(), "an accepted schedule fires");
            }
            Err(ScheduleError::InvalidCron { expr: echoed, .. } | ScheduleError::NeverFires { expr: echoed }) => {
                prop_assert_eq!(echoed, expr);
            }
            Err(ScheduleError::InvalidTimeZone { tz: echoed }) => prop_assert_eq!(Some(echoed), tz),
            Err(other) => prop_assert!(false, "unexpected error {other:?}"),
        }
    }

    #[test]
    fn a_valid_cron_expression_is_accepted_and_round_trips(expr in valid_cron(), tz in tz_like()) {
        let tz = tz.filter(|name| name.parse::<chrono_tz::Tz>().is_ok());
        let schedule = Schedule::new(&expr, tz.as_deref());
        prop_assert!(schedule.is_ok(), "{expr} in {tz:?}: {:?}", schedule.err());
        let schedule = schedule.expect("checked");
        let tz_name = schedule.time_zone().name().to_owned();
        if let Some(tz) = &tz {
            prop_assert_eq!(&tz_name, tz);
        }
        // What it prints (expression and zone) parses back to the same slots.
        let again = Schedule::new(schedule.expression(), Some(&tz_name)).expect("printed form parses");
        let mut at = base();
        for _ in 0..5 {
            let (a, b) = (schedule.next_after(at), again.next_after(at));
            prop_assert_eq!(a, b);
            match a {
                Some(next) => at = next.with_timezone(&Utc),
                None => break,
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// job names

fn name_is_valid(name: &str) -> bool {
    !name.trim().is_empty()
        && !name.chars().any(char::is_control)
        && name.len() <= lock_scheduler::schema::MAX_JOB_NAME_LEN
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_job_name_is_judged_by_one_rule_and_its_keys_give_it_back(name in messy_text(30)) {
        let problem = lock_scheduler::schema::job_name_problem(&name);
        prop_assert_eq!(problem.is_none(), name_is_valid(&name), "{:?}: {:?}", name, problem);
        let (pause, history) = (lock_scheduler::pause_key(&name), lock_scheduler::history_key(&name));
        prop_assert_eq!(pause.is_ok(), problem.is_none());
        prop_assert_eq!(history.is_ok(), problem.is_none());
        if let (Ok(pause), Ok(history)) = (pause, history) {
            prop_assert_eq!(lock_scheduler::schema::job_of_key(&pause), Some(name.as_str()));
            prop_assert_eq!(lock_scheduler::schema::job_of_key(&history), Some(name.as_str()));
        }
    }

    #[test]
    fn job_names_around_the_length_limit(
        len in (lock_scheduler::schema::MAX_JOB_NAME_LEN - 2)..(lock_scheduler::schema::MAX_JOB_NAME_LEN + 2),
    ) {
        let name = "j".repeat(len);
        prop_assert_eq!(lock_scheduler::schema::job_name_problem(&name).is_none(), name_is_valid(&name));
    }
}
