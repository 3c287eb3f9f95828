//! Taking "run now" requests on a replica: every [`RUN_POLL`] it looks for the requests of its
//! group ([`schema::runs_key`]), in one pipelined round trip whatever the number of jobs, takes
//! those for its jobs (one replica wins each: `take_run.lua`) and runs them; it also keeps the
//! group's job registry ([`schema::jobs_key`]) current. The requests are made by
//! [`control::run_now`](crate::control::run_now::run_now).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use lock_core::{ErrorChain, redis};
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use crate::command;
use crate::error::ControlError;
use crate::overlap::replace;
use crate::retry::pending;
use crate::run;
use crate::schema::{self, MEMBER_TTL, RUN_POLL, TAKE_RUN};
use crate::shared::{JobEntry, Manual, Shared};
use crate::state::State;
use crate::timer::jobs::Command;

/// Looks for "run now" requests every [`RUN_POLL`] and runs the ones this replica takes;
/// keeps the group's job registry current. Ends when the scheduler stops.
pub(crate) fn spawn_taker(
    shared: Arc<Shared>,
    mut state: watch::Receiver<State>,
    timer: mpsc::UnboundedSender<Command>,
) -> tokio::task::JoinHandle<()> {
    let span = tracing::debug_span!(parent: None, "scheduler_run_requests", instance = %shared.instance);
    tokio::spawn(
        async move {
            let mut registered: BTreeSet<Arc<str>> = BTreeSet::new();
            let mut failing = false;
            loop {
                match poll(&shared, &mut registered, &timer).await {
                    Ok(()) => failing = false,
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(error = %ErrorChain(&e), "could not look for run-now requests; retrying");
                    }
                    Err(_) => {}
                }
                tokio::select! {
                    () = tokio::time::sleep(RUN_POLL) => {}
                    changed = state.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        let stopping = state.borrow().deadline();
                        if let Some(deadline) = stopping {
                            // Runs still going may be asked to stop by a later slot elsewhere.
                            replace::read_while_stopping(&shared, deadline).await;
                            return;
                        }
                    }
                }
            }
        }
        .instrument(span),
    )
}

/// One look: the pending requests and whether the registry exists, in one round trip; then
/// the registry rewritten if it is gone or the jobs changed, and each request for one of our
/// jobs taken (one replica wins it) and run.
async fn poll(
    shared: &Arc<Shared>,
    registered: &mut BTreeSet<Arc<str>>,
    timer: &mpsc::UnboundedSender<Command>,
) -> Result<(), ControlError> {
    let (jobs_key, runs_key) = (shared.members.jobs_key(), shared.members.runs_key());
    let retries_key = shared.members.retries_key();
    let jobs = shared.jobs();
    let mut pipe = redis::pipe();
    pipe.cmd("HGETALL").arg(runs_key).cmd("EXISTS").arg(jobs_key);
    // The due retries, in the same round trip: waiting retries cost no extra one.
    pending::read_due(&mut pipe, retries_key, shared.clock.now());
    // So are the requests to stop the Replace runs in flight here, if any.
    let replacing = replace::read(&mut pipe, shared.members.replace_key(), &jobs);
    let (requests, exists, due) = if replacing.is_empty() {
        let (requests, exists, due): (HashMap<String, String>, bool, Vec<String>) =
            command::query_within(&shared.client, "looking for run-now requests", &pipe, RUN_POLL * 4)
                .await?;
        (requests, exists, due)
    } else {
        let (requests, exists, due, asked): (HashMap<String, String>, bool, Vec<String>, Vec<Option<f64>>) =
            command::query_within(&shared.client, "looking for run-now requests", &pipe, RUN_POLL * 4)
                .await?;
        replace::noted(&replacing, &asked);
        (requests, exists, due)
    };
    let now: BTreeSet<Arc<str>> = jobs.iter().map(|j| j.name.clone()).collect();
    if !exists || now != *registered {
        let mut pipe = redis::pipe();
        for gone in registered.difference(&now) {
            pipe.cmd("HDEL").arg(jobs_key).arg(&**gone).ignore();
        }
        if !jobs.is_empty() {
            let hset = pipe.cmd("HSET").arg(jobs_key);
            for job in &jobs {
                let origin = job.origin.to_string();
                let entry = schema::registry_entry(
                    job.schedule.expression(),
                    job.schedule.time_zone().name(),
                    &origin,
                );
                hset.arg(&*job.name).arg(entry);
            }
            hset.ignore();
            pipe.cmd("PEXPIRE").arg(jobs_key).arg(MEMBER_TTL.as_millis() as u64).ignore();
        }
        command::query_within::<()>(&shared.client, "registering this replica's jobs", &pipe, RUN_POLL * 4)
            .await?;
        *registered = now;
    }
    take_retries(shared, &jobs, &due, timer).await?;
    for (name, stored) in requests {
        let Some(job) = jobs.iter().find(|j| *j.name == *name) else { continue };
        let Some((id, by, at_ms)) = schema::parse_run_request(&stored) else { continue };
        let mut invocation = TAKE_RUN.key(runs_key);
        invocation.arg(&name).arg(&stored);
        let taken: i64 = command::run_script(
            &shared.client,
            "taking a run-now request",
            &TAKE_RUN,
            &invocation,
            RUN_POLL * 4,
        )
        .await?;
        if taken == 1 {
            tracing::info!(job = %name, request = id, by, "took a run-now request");
            let manual = Manual { id: id.into(), by: by.into(), at_ms };
            let run = run::spawn_manual(shared, job, manual);
            // Waited for (or cancelled) at shutdown; if the timer is already gone, the run
            // goes on detached, as the shutdown it missed had nothing to wait for.
            let _ = timer.send(Command::Adopt(job.clone(), run));
        }
    }
    Ok(())
}

/// Takes the due retries (`due`, as read) of this replica's jobs, all in one round trip, and
/// runs those it took. Retries of jobs this replica does not have are left to the replicas
/// that do.
async fn take_retries(
    shared: &Arc<Shared>,
    jobs: &[Arc<JobEntry>],
    due: &[String],
    timer: &mpsc::UnboundedSender<Command>,
) -> Result<(), ControlError> {
    let ours: Vec<(&str, &Arc<JobEntry>, i64, u32)> = due
        .iter()
        .filter_map(|member| {
            let (name, tick, attempt) = schema::parse_retry_member(member)?;
            let job = jobs.iter().find(|j| *j.name == *name)?;
            Some((member.as_str(), job, tick, attempt))
        })
        .collect();
    if ours.is_empty() {
        return Ok(());
    }
    let members: Vec<&str> = ours.iter().map(|(member, ..)| *member).collect();
    let taken = pending::take(&shared.client, shared.members.retries_key(), &members, RUN_POLL * 4).await?;
    for ((_, job, tick, attempt), taken) in ours.into_iter().zip(taken) {
        let Some(slot) = chrono::DateTime::from_timestamp_millis(tick).filter(|_| taken) else { continue };
        let run = if attempt == schema::BACKFILL_ATTEMPT {
            tracing::info!(job = %job.name, tick, "took a backfill slot");
            run::spawn_backfill(shared, job, slot)
        } else {
            tracing::info!(job = %job.name, tick, attempt, "took a due retry");
            run::spawn_retry(shared, job, slot, attempt)
        };
        // Waited for (or cancelled) at shutdown, as a "run now" run.
        let _ = timer.send(Command::Adopt(job.clone(), run));
    }
    Ok(())
}
