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
/// one pipelined round trip: a pause flag read (`EXISTS`) and a claimed-tick read (`GET`) per
/// job, where a claim attempt is a script call. `None`: Redis failed.
pub(crate) async fn slot_states(
    client: &LockClient,
    jobs: &[(&str, Option<&str>)],
) -> Option<Vec<SlotState>> {
    let mut pipe = redis::pipe();
    // Per job: whether its pause flag and its tick were asked for (invalid names and keys are
    // refused when the job is added; skipped here rather than trusted).
    let mut asked = Vec::with_capacity(jobs.len());
    for (name, key) in jobs {
        let pause = crate::schema::pause_key(name).ok();
        if let Some(pause) = &pause {
            pipe.cmd("EXISTS").arg(pause);
        }
        let key = key.filter(|key| lock_core::validate_key(key).is_ok());
        if let Some(key) = key {
            pipe.cmd("GET").arg(lock_core::schema::tick_key(key));
        }
        asked.push((pause.is_some(), key.is_some()));
    }
    // One bad reply (a key of the wrong type) spoils only its own job's state.
    pipe.ignore_errors();
    let replies: Vec<redis::Value> = query(client, "reading the slots' pause flags and claimed ticks", &pipe)
        .await
        .map_err(|e| tracing::debug!(error = %e, "could not read the deferred slots' state; trying them"))
        .ok()?;
    let mut replies = replies.into_iter();
    let mut states = Vec::with_capacity(jobs.len());
    for (pause, tick) in asked {
        // Unreadable: not paused, and no tick known (the run's claim decides, and reports).
        let paused = pause && redis::from_redis_value::<i64>(replies.next()?).is_ok_and(|n| n == 1);
        let last_tick =
            if tick { redis::from_redis_value::<Option<i64>>(replies.next()?).ok().flatten() } else { None };
        states.push(SlotState { paused, last_tick });
    }
    Some(states)
}
