//! Reading, for a scheduler's timer, what lock-core's tick claims and locks say: the last
//! tick claimed per lock key and which locks are held.

use lock_core::LockClient;
use lock_core::redis;

use crate::command::query;
use crate::error::ControlError;

/// The last ticks claimed with the locks `keys`, in one pipelined round trip (`None`: none, or
/// forgotten after [`TICK_TTL`](lock_core::tick::TICK_TTL)).
pub(crate) async fn last_ticks(client: &LockClient, keys: &[&str]) -> Result<Vec<Option<i64>>, ControlError> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for key in keys {
        lock_core::validate_key(key)
            .map_err(|_| ControlError::InvalidJob("the job's lock key is invalid"))?;
        pipe.cmd("GET").arg(lock_core::schema::tick_key(key));
    }
    query(client, "reading the jobs' last claimed ticks", &pipe).await
}

/// Which of `keys` are locked right now, in one pipelined round trip (`None`: Redis failed).
pub(crate) async fn held_among(client: &LockClient, keys: &[String]) -> Option<Vec<bool>> {
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("EXISTS").arg(key);
    }
    let held: Vec<i64> = query(client, "checking which locks are held", &pipe).await.ok()?;
    Some(held.into_iter().map(|n| n == 1).collect())
}

/// What a replica needs to know about a slot it was not preferred for, once the claim grace
/// is over: whether the job is paused, and the last tick claimed with its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlotState {
    pub(crate) paused: bool,
    /// `None`: none claimed (or forgotten), or the scheduler does not know the job's lock key.
    pub(crate) last_tick: Option<i64>,
}

/// The [`SlotState`] of each job — its name and, if the scheduler knows it, its lock key — in
/// one read per Redis node whatever their number ([`LockClient::get_many`] of the pause flags
/// and claimed ticks), where a claim attempt is a script call. `None`: Redis failed.
pub(crate) async fn slot_states(
    client: &LockClient,
    jobs: &[(&str, Option<&str>)],
) -> Option<Vec<SlotState>> {
    // Per job: where its pause flag and its tick are among the keys read (invalid names and
    // keys are refused when the job is added; skipped here rather than trusted).
    let mut keys = Vec::with_capacity(jobs.len() * 2);
    let mut asked = Vec::with_capacity(jobs.len());
    for (name, key) in jobs {
        let pause = crate::schema::pause_key(name).ok().map(|pause| {
            keys.push(pause);
            keys.len() - 1
        });
        let tick = key.filter(|key| lock_core::validate_key(key).is_ok()).map(|key| {
            keys.push(lock_core::schema::tick_key(key));
            keys.len() - 1
        });
        asked.push((pause, tick));
    }
    let values =
        crate::command::read_keys(client, "the deferred slots' pause flags and ticks", &keys).await?;
    let value = |i: Option<usize>| i.and_then(|i| values.get(i)).and_then(Option::as_deref);
    Some(
        asked
            .into_iter()
            .map(|(pause, tick)| SlotState {
                paused: value(pause).is_some(),
                // Unreadable: no tick known (the run's claim decides, and reports).
                last_tick: value(tick).and_then(|t| t.parse().ok()),
            })
            .collect(),
    )
}
