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
