//! The scheduler's Redis schema, in one place: every key it writes besides lock-core's (the
//! tick claims live in [`lock_core::schema`]), their expiries, the fields of a history entry,
//! the job-name rule, and the Lua scripts (`schema/lua/*.lua`). Nothing else in the workspace
//! spells these keys: `lockctl` and the tests use these functions.
//!
//! Keys of one job share a Redis Cluster slot (hash tag `{job:<name>}`); every key expires:
//!
//! | key | type | content | expiry |
//! |---|---|---|---|
//! | [`pause_key`] `scheduler:{job:<name>}:paused` | string | who paused it and when | none while paused (deleted by resume) |
//! | [`missed_key`] `scheduler:{job:<name>}:missed` | string | the latest missed slot recorded (so replicas record it once) | [`MISSED_TTL`] |
//! | [`history_key`] `scheduler:{job:<name>}:history` | stream | one entry per run, fields in [`field`] | [`HISTORY_TTL`] after the last entry; capped at about [`HISTORY_LEN`] entries |
//! | [`members_key`] `scheduler:{group:<name>}:members` | zset | instance id -> when its announcement lapses (server clock, ms) | [`MEMBER_TTL`] after the last announcement |

#[cfg(test)]
mod script_tests;

use std::sync::LazyLock;
use std::time::Duration;

use lock_core::redis::Script;

use crate::error::ControlError;

/// Entries kept per job in the run history (approximately: `XADD MAXLEN ~`).
pub const HISTORY_LEN: usize = 1000;

/// How long a job's run history outlives its last entry.
pub const HISTORY_TTL: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// How long a job's missed-slots marker is kept: as long as a claimed tick
/// ([`lock_core::schema::TICK_TTL`]), since no older slot is ever reported missed.
pub const MISSED_TTL: Duration = lock_core::schema::TICK_TTL;

/// How long a replica's announcement in its group lasts: a replica that stopped renewing
/// (crashed, partitioned) stops being preferred for runs after at most this.
pub const MEMBER_TTL: Duration = Duration::from_secs(10);

/// Longest job name, in bytes (it is part of three keys).
pub const MAX_JOB_NAME_LEN: usize = 512;

/// Longest group name, in bytes.
pub const MAX_GROUP_NAME_LEN: usize = 256;

const JOB_PREFIX: &str = "scheduler:{job:";
const PAUSED: &str = "}:paused";
const HISTORY: &str = "}:history";
const MISSED: &str = "}:missed";

/// The fields of a run history entry.
pub mod field {
    /// The slot, epoch milliseconds (the tick claimed in Redis).
    pub const TICK: &str = "tick";
    /// The instance that recorded the run.
    pub const INSTANCE: &str = "instance";
    /// The outcome's label ([`RunOutcome::label`](crate::RunOutcome::label)).
    pub const OUTCOME: &str = "outcome";
    /// How long the run took, ms.
    pub const DURATION_MS: &str = "duration_ms";
    /// The error of a failed run, or what a missed record counts (absent otherwise).
    pub const ERROR: &str = "error";
}

/// Why `name` cannot name a job, if it cannot: the one rule the scheduler (at build time) and
/// the control functions (pause, history, ...) apply.
pub fn job_name_problem(name: &str) -> Option<&'static str> {
    if name.trim().is_empty() {
        Some("the job name is empty")
    } else if name.chars().any(char::is_control) {
        Some("the job name contains control characters")
    } else if name.len() > MAX_JOB_NAME_LEN {
        Some("the job name is longer than 512 bytes")
    } else {
        None
    }
}

fn job_key(job: &str, suffix: &str) -> Result<String, ControlError> {
    match job_name_problem(job) {
        Some(problem) => Err(ControlError::InvalidJob(problem)),
        None => Ok(format!("{JOB_PREFIX}{job}{suffix}")),
    }
}

/// The Redis key of `job`'s pause flag.
pub fn pause_key(job: &str) -> Result<String, ControlError> {
    job_key(job, PAUSED)
}

/// The Redis key of `job`'s run history stream.
pub fn history_key(job: &str) -> Result<String, ControlError> {
    job_key(job, HISTORY)
}

/// The Redis key of `job`'s missed-slots marker.
pub fn missed_key(job: &str) -> Result<String, ControlError> {
    job_key(job, MISSED)
}

/// The `SCAN` pattern matching every job's keys.
pub fn job_keys_pattern() -> String {
    format!("{JOB_PREFIX}*")
}

/// The job a pause flag or history key belongs to (`None` for any other key).
pub fn job_of_key(key: &str) -> Option<&str> {
    let rest = key.strip_prefix(JOB_PREFIX)?;
    rest.strip_suffix(HISTORY).or_else(|| rest.strip_suffix(PAUSED))
}

/// Why `group` cannot name a scheduler group, if it cannot.
pub fn group_name_problem(group: &str) -> Option<&'static str> {
    let trimmed = group.trim();
    if trimmed.is_empty() || trimmed.chars().any(char::is_control) || trimmed.len() > MAX_GROUP_NAME_LEN {
        Some("it must be 1 to 256 bytes without control characters")
    } else {
        None
    }
}

/// The Redis key of `group`'s member set.
pub fn members_key(group: &str) -> String {
    format!("scheduler:{{group:{group}}}:members")
}

/// The scripts' source text (each file's header states its KEYS, ARGV and reply).
pub mod lua {
    /// `announce.lua`: announce a replica, drop lapsed ones, read the live ones.
    pub const ANNOUNCE: &str = include_str!("lua/announce.lua");
    /// `record_missed.lua`: agree on the one replica that records missed slots.
    pub const RECORD_MISSED: &str = include_str!("lua/record_missed.lua");
}

/// See [`lua::ANNOUNCE`].
pub(crate) static ANNOUNCE: LazyLock<Script> = LazyLock::new(|| Script::new(lua::ANNOUNCE));

/// See [`lua::RECORD_MISSED`].
pub(crate) static RECORD_MISSED: LazyLock<Script> = LazyLock::new(|| Script::new(lua::RECORD_MISSED));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_a_job_share_a_slot_and_list_back_to_it() {
        assert_eq!(pause_key("daily-report").ok().as_deref(), Some("scheduler:{job:daily-report}:paused"));
        assert_eq!(history_key("daily-report").ok().as_deref(), Some("scheduler:{job:daily-report}:history"));
        assert_eq!(missed_key("daily-report").ok().as_deref(), Some("scheduler:{job:daily-report}:missed"));
        for key in [pause_key("a:b}c"), history_key("a:b}c")] {
            assert_eq!(job_of_key(&key.expect("valid")), Some("a:b}c"));
        }
        assert_eq!(job_of_key(&missed_key("x").expect("valid")), None);
        assert_eq!(job_of_key("lock:x"), None);
        assert_eq!(members_key("g"), "scheduler:{group:g}:members");
    }

    #[test]
    fn one_job_name_rule() {
        assert!(matches!(pause_key(" "), Err(ControlError::InvalidJob(_))));
        assert!(matches!(history_key("a\nb"), Err(ControlError::InvalidJob(_))));
        assert!(job_name_problem(&"x".repeat(MAX_JOB_NAME_LEN)).is_none());
        assert!(job_name_problem(&"x".repeat(MAX_JOB_NAME_LEN + 1)).is_some());
        assert!(group_name_problem("").is_some());
        assert!(group_name_problem(&"g".repeat(257)).is_some());
        assert!(group_name_problem("payments").is_none());
    }
}
