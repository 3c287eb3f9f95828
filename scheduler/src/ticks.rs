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

/// The last tick claimed with each of `keys` (the lock keys of a replica's deferred slots;
/// `None` for a job whose lock key the scheduler does not know), in one read per Redis node
/// whatever their number ([`LockClient::get_many`]), where a claim attempt is a script call.
/// Per key, `None`: none claimed, forgotten, or unknown. `None` for all: Redis failed.
pub(crate) async fn claimed_ticks(client: &LockClient, keys: &[Option<&str>]) -> Option<Vec<Option<i64>>> {
    // Where each job's tick is among the keys read (invalid keys are refused when the job is
    // added; skipped here rather than trusted).
    let mut read = Vec::with_capacity(keys.len());
    let asked: Vec<Option<usize>> = keys
        .iter()
        .map(|key| {
            key.filter(|key| lock_core::validate_key(key).is_ok()).map(|key| {
                read.push(lock_core::schema::tick_key(key));
                read.len() - 1
            })
        })
        .collect();
    if read.is_empty() {
        return Some(vec![None; keys.len()]);
    }
    let values = crate::command::read_keys(client, "the deferred slots' ticks", &read).await?;
    Some(
        asked
            .into_iter()
            // Unreadable: no tick known (the run's claim decides, and reports).
            .map(|i| i.and_then(|i| values.get(i)).and_then(Option::as_deref).and_then(|t| t.parse().ok()))
            .collect(),
    )
}
