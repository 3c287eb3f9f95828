//! [`Overlap::Replace`](crate::overlap::Overlap::Replace): a slot that finds the job's lock held asks the
//! running run to stop, at once on this replica and in the group's requests
//! ([`replace_key`](crate::schema::replace_key), moved only forward) for the others, then
//! waits for the lock. The request is announced on the group's channel; a replica running such
//! a job reads the requests in the look that follows ([`read`]; while it shuts down,
//! [`read_while_stopping`]); the run
//! ([`stop_when_replaced`]) revokes its lock, which cancels it as a lost lock is cancelled
//! and frees the lock for the slot that asked.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lock_core::{LockOptions, redis};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::command::{self, TIMEOUT};
use crate::retry::pending;
use crate::schema::{REPLACE_TTL, REPLACE_WAIT};

/// How often a replica shutting down reads the requests to stop its `Replace` runs still
/// going (it no longer listens on the group's channel).
const STOPPING_POLL: Duration = Duration::from_millis(500);
use crate::shared::{JobEntry, Shared};

/// Asks `job`'s running run (here or on another replica) to stop for the slot `tick`: noted here
/// at once, and in the group's requests for the others, in one round trip. `false`: Redis did
/// not take the request (the slot still waits for the lock, for a run on this replica).
pub(crate) async fn request(shared: &Shared, job: &JobEntry, tick: i64) -> bool {
    note(job, tick);
    let key = shared.members.replace_key();
    let mut pipe = redis::pipe();
    // GT: a late request of an older slot never lowers a newer one.
    pipe.cmd("ZADD").arg(key).arg("GT").arg(tick).arg(&*job.name).ignore();
    pipe.cmd("ZREMRANGEBYSCORE")
        .arg(key)
        .arg("-inf")
        .arg(format!("({}", tick.saturating_sub(REPLACE_TTL.as_millis() as i64)))
        .ignore();
    pipe.cmd("PEXPIRE").arg(key).arg(REPLACE_TTL.as_millis() as u64).ignore();
    // The replica running it looks at once (its fallback poll is slow).
    pending::announce(&mut pipe, &shared.client, shared.members.group(), "replace");
    match command::query::<()>(&shared.client, "asking the running run to stop", &pipe).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %lock_core::ErrorChain(&e), "could not ask the running run to stop");
            false
        }
    }
}

/// Notes that slot `tick` of `job` asked the job's runs of earlier slots to stop.
pub(crate) fn note(job: &JobEntry, tick: i64) {
    job.replace.send_if_modified(|requested| {
        let later = tick > *requested;
        if later {
            *requested = tick;
        }
        later
    });
}

/// The lock options a replacing slot takes the job's lock with: its own, waiting up to
/// [`REPLACE_WAIT`] (or the job's wait, if longer) for the replaced run to give it back.
pub(crate) fn wait_options(options: &LockOptions) -> (LockOptions, Duration) {
    let wait = options.wait.map_or(REPLACE_WAIT, |own| own.max(REPLACE_WAIT));
    (options.clone().wait(wait), wait)
}

/// The `Replace` jobs of `jobs` with a run in flight on this replica, whose requests the poll
/// reads: adds one `ZMSCORE` of the group's requests (`key`) for them to `pipe`, if any.
pub(crate) fn read<'a>(
    pipe: &mut redis::Pipeline,
    key: &str,
    jobs: &'a [Arc<JobEntry>],
) -> Vec<&'a Arc<JobEntry>> {
    let running: Vec<&Arc<JobEntry>> = jobs
        .iter()
        .filter(|job| {
            job.overlap == crate::overlap::Overlap::Replace && job.running.load(Ordering::SeqCst) > 0
        })
        .collect();
    if !running.is_empty() {
        let cmd = pipe.cmd("ZMSCORE").arg(key);
        for job in &running {
            cmd.arg(&*job.name);
        }
    }
    running
}

/// While this replica shuts down (until `deadline`), keeps reading the requests to stop its
/// `Replace` runs still going, every [`STOPPING_POLL`]: a later slot on a replica still up then
/// replaces them as usual, instead of waiting for them to end. Returns once none is left.
pub(crate) async fn read_while_stopping(shared: &Shared, deadline: Instant) {
    loop {
        let jobs = shared.jobs();
        let mut pipe = redis::pipe();
        let running = read(&mut pipe, shared.members.replace_key(), &jobs);
        if running.is_empty() || Instant::now() >= deadline {
            return;
        }
        let asked = command::query_within::<(Vec<Option<f64>>,)>(
            &shared.client,
            "reading requests to stop a run",
            &pipe,
            TIMEOUT,
        )
        .await;
        if let Ok((asked,)) = asked {
            noted(&running, &asked);
        }
        tokio::time::sleep(STOPPING_POLL).await;
    }
}

/// Notes the requests read for `jobs` (the poll's `ZMSCORE` reply).
pub(crate) fn noted(jobs: &[&Arc<JobEntry>], requested: &[Option<f64>]) {
    for (job, tick) in jobs.iter().zip(requested) {
        if let Some(tick) = tick {
            note(job, *tick as i64);
        }
    }
}

/// Runs `run`, the body of a run of slot `slot` (epoch ms) of `job`, inside its locked section;
/// once a later slot asks it to stop, revokes the section's lock: the section then cancels the
/// body as for a lost lock (or, with `OnLost::Continue`, lets it finish, its lock reading
/// lost). `fresh`: a request made before the run started counts (a slot's first attempt); a
/// retry or backfill of an old slot only yields to requests made while it runs. Returns the
/// body's output, and whether it was asked to stop (a body that returns once it sees its lock
/// lost was replaced all the same).
pub(crate) async fn stop_when_replaced<F: Future>(
    mut requests: watch::Receiver<i64>,
    slot: i64,
    fresh: bool,
    run: F,
) -> (F::Output, bool) {
    let lock = lock_core::current();
    tokio::pin!(run);
    let asked = async {
        if fresh && *requests.borrow_and_update() > slot {
            return;
        }
        loop {
            if requests.changed().await.is_err() {
                // The job is gone: nobody asks any more.
                std::future::pending::<()>().await;
            }
            if *requests.borrow_and_update() > slot {
                return;
            }
        }
    };
    tokio::select! {
        biased;
        output = &mut run => return (output, false),
        () = asked => {}
    }
    if lock.is_some_and(|lock| lock.revoke()) {
        tracing::info!("a later slot replaces this run: its lock is given up and the run cancelled");
    }
    (run.await, true)
}
