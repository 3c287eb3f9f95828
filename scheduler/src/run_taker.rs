//! Taking "run now" requests and due retries on a replica. The replica subscribes to its
//! group's channel ([`schema::group_channel`]), on which every request, retry and backfill slot
//! is announced as it is written, and looks when told: one pipelined round trip whatever the
//! number of jobs ([`schema::runs_key`], whether [`schema::jobs_key`] exists, the due retries and
//! the next one's due time), then takes those for its jobs (one replica wins each:
//! `take_run.lua`, `take_retries.lua`) and runs them; a take of retries whose reply was lost is
//! sent again with the next look (it answers the same), so a taken retry is never left to
//! nobody. It also looks when the next pending retry comes due,
//! right after (re)subscribing, and every [`RUN_POLL`] in case a message was lost; and keeps the
//! group's job registry current. The requests are made by
//! [`control::run_now`](crate::control::run_now::run_now).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{ErrorChain, Subscription, redis};
use tokio::sync::watch;
use tracing::Instrument;

use crate::command::{self, TIMEOUT};
use crate::error::ControlError;
use crate::retry::pending::{self, DUE_PER_POLL};
use crate::run;
use crate::run::replace;
use crate::schema::{self, MEMBER_TTL, RUN_POLL, TAKE_RUN};
use crate::shared::{JobEntry, Manual, Shared};
use crate::state::State;

/// How soon a look that failed is tried again (only while failing: Redis unreachable, say), or
/// one that read a full page of due retries.
const RETRY_LOOK: Duration = Duration::from_millis(500);

/// Looks for "run now" requests and due retries when told, when a retry comes due and every
/// [`RUN_POLL`]; runs the ones this replica takes; keeps the group's job registry current.
/// Ends when the scheduler stops.
pub(crate) fn spawn_taker(
    shared: Arc<Shared>,
    mut state: watch::Receiver<State>,
) -> tokio::task::JoinHandle<()> {
    let span = tracing::debug_span!(parent: None, "scheduler_run_requests", instance = %shared.instance);
    tokio::spawn(
        async move {
            let mut registered: BTreeSet<Arc<str>> = BTreeSet::new();
            // Retries whose take did not answer: taken again with the next look.
            let mut unsettled: Vec<String> = Vec::new();
            let mut failing = false;
            let mut subscription: Option<Subscription> = None;
            loop {
                // Subscribed before looking: a request written after the subscription is heard,
                // one written before is found by this look.
                subscribe(&shared, &mut subscription).await;
                let wait = match poll(&shared, &mut registered, &mut unsettled).await {
                    Ok(next) => {
                        failing = false;
                        next
                    }
                    Err(e) => {
                        if !failing {
                            failing = true;
                            tracing::warn!(error = %ErrorChain(&e), "could not look for run-now requests; retrying");
                        }
                        RETRY_LOOK
                    }
                };
                let notice = async {
                    match &subscription {
                        Some(s) => {
                            let notice = s.next().await;
                            tracing::trace!(?notice, "told to look for run-now requests");
                        }
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = notice => {}
                    () = shared.registry_changed.notified() => {}
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

/// Subscribes to the group's channel if not yet, or again if the subscription's connection was
/// lost for good. A failure is logged and left to the next look: the poll still finds
/// everything, only later.
async fn subscribe(shared: &Shared, subscription: &mut Option<Subscription>) {
    let result = match subscription {
        Some(s) => s.ensure().await.map(|_| ()),
        None => match shared.client.subscribe(&schema::group_channel(shared.members.group())).await {
            Ok(s) => {
                *subscription = Some(s);
                Ok(())
            }
            Err(e) => Err(e),
        },
    };
    if let Err(e) = result {
        tracing::debug!(error = %ErrorChain(&e), "could not subscribe to the group's channel; polling every {RUN_POLL:?} meanwhile");
    }
}

/// One look: the pending requests, whether the registry exists and the retries due or next, in
/// one round trip; then the registry rewritten if it is gone or the jobs changed, and each
/// request and due retry for one of our jobs taken (one replica wins each) and run. Returns how
/// long until the next look: [`RUN_POLL`], or less if a pending retry comes due sooner.
async fn poll(
    shared: &Arc<Shared>,
    registered: &mut BTreeSet<Arc<str>>,
    unsettled: &mut Vec<String>,
) -> Result<Duration, ControlError> {
    let (jobs_key, runs_key) = (shared.members.jobs_key(), shared.members.runs_key());
    let retries_key = shared.members.retries_key();
    let now = shared.clock.now();
    let jobs = shared.jobs();
    let mut pipe = redis::pipe();
    pipe.cmd("HGETALL").arg(runs_key).cmd("EXISTS").arg(jobs_key);
    // The retries due and the next one, in the same round trip: waiting retries cost none.
    pending::read_due(&mut pipe, retries_key, now);
    // So are the requests to stop the Replace runs in flight here, if any.
    let replacing = replace::read(&mut pipe, shared.members.replace_key(), &jobs);
    type Look = (HashMap<String, String>, bool, Vec<String>, Vec<(String, f64)>);
    let action = "looking for run-now requests";
    let (requests, exists, due, next): Look = if replacing.is_empty() {
        command::query_within(&shared.client, action, &pipe, TIMEOUT).await?
    } else {
        let (requests, exists, due, next, asked): (_, _, _, _, Vec<Option<f64>>) =
            command::query_within(&shared.client, action, &pipe, TIMEOUT).await?;
        replace::noted(&replacing, &asked);
        (requests, exists, due, next)
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
        // A replica with no jobs (only singletons, say) and none to unregister sends nothing.
        if !jobs.is_empty() || registered.difference(&now).next().is_some() {
            command::query_within::<()>(&shared.client, "registering this replica's jobs", &pipe, TIMEOUT)
                .await?;
        }
        *registered = now;
    }
    if shared.is_stopping() {
        // A stopping replica starts nothing: the other replicas take what is due.
        return Ok(RUN_POLL);
    }
    take_retries(shared, &jobs, &due, unsettled).await?;
    for (name, stored) in requests {
        let Some(job) = jobs.iter().find(|j| *j.name == *name) else { continue };
        let Some((id, by, at_ms)) = schema::parse_run_request(&stored) else { continue };
        let mut invocation = TAKE_RUN.key(runs_key);
        invocation.arg(&name).arg(&stored);
        let taken: i64 =
            command::run_script(&shared.client, "taking a run-now request", &TAKE_RUN, &invocation, TIMEOUT)
                .await?;
        if taken == 1 {
            tracing::info!(job = %name, request = id, by, "took a run-now request");
            let manual = Manual { id: id.into(), by: by.into(), at_ms };
            // Waited for (or cancelled) at shutdown; if the timer is already gone, the run
            // goes on detached, as the shutdown it missed had nothing to wait for.
            if !shared.start_outside_timer(job, || run::spawn_manual(shared, job, manual)) {
                give_back_request(shared, &name, &stored).await;
            }
        }
    }
    if due.len() >= DUE_PER_POLL {
        // More may be due than were read (or they are other replicas' jobs): look again soon.
        return Ok(RETRY_LOOK);
    }
    // Woken when the next retry comes due (on this replica's clock, as the due times were
    // written), if before the next poll.
    let until_next =
        next.first().map(|(_, at)| (*at as i64 - shared.clock.now().timestamp_millis()).max(0) as u64);
    Ok(until_next.map_or(RUN_POLL, |ms| Duration::from_millis(ms).min(RUN_POLL)))
}

/// Takes the due retries (`due`, as read) of this replica's jobs, with those whose take did
/// not answer before (`unsettled`), all in one round trip, and runs those it took. Retries of
/// jobs this replica does not have are left to the replicas that do. If the take does not
/// answer, its members are kept in `unsettled` for the next look.
async fn take_retries(
    shared: &Arc<Shared>,
    jobs: &[Arc<JobEntry>],
    due: &[String],
    unsettled: &mut Vec<String>,
) -> Result<(), ControlError> {
    let mut asked: Vec<String> = std::mem::take(unsettled);
    for member in due {
        if !asked.contains(member) {
            asked.push(member.clone());
        }
    }
    let ours: Vec<(&str, &Arc<JobEntry>, i64, u32)> = asked
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
    let retries = shared.members.retries_key();
    let taken = match pending::take(&shared.client, retries, &shared.instance, &members, TIMEOUT).await {
        Ok(taken) => taken,
        Err(e) => {
            // It may have run: the same take, sent again with the next look, says which.
            *unsettled = members.iter().map(|m| (*m).to_owned()).collect();
            return Err(e);
        }
    };
    for ((_, job, tick, attempt), taken) in ours.into_iter().zip(taken) {
        let Some(slot) = chrono::DateTime::from_timestamp_millis(tick).filter(|_| taken) else { continue };
        // Waited for (or cancelled) at shutdown, as a "run now" run.
        let started = shared.start_outside_timer(job, || {
            if attempt == schema::BACKFILL_ATTEMPT {
                tracing::info!(job = %job.name, tick, "took a backfill slot");
                run::spawn_backfill(shared, job, slot)
            } else {
                tracing::info!(job = %job.name, tick, attempt, "took a due retry");
                run::spawn_retry(shared, job, slot, attempt)
            }
        });
        if !started {
            // Stopping since the look: put back, due now, for another replica.
            let (now, retries) = (shared.clock.now(), shared.members.retries_key());
            if let Err(e) = pending::add(&shared.client, retries, &job.name, tick, attempt, now, now).await {
                tracing::warn!(job = %job.name, tick, attempt, error = %ErrorChain(&e), "stopping: could not give a taken retry back; it is not run");
            }
        }
    }
    Ok(())
}

/// Gives back a run-now request taken while the scheduler started stopping (`stored`, as
/// read), unless another was made meanwhile, and tells the group: another replica runs it.
async fn give_back_request(shared: &Shared, job: &str, stored: &str) {
    let mut pipe = redis::pipe();
    pipe.cmd("HSETNX").arg(shared.members.runs_key()).arg(job).arg(stored).ignore();
    pipe.cmd("PEXPIRE")
        .arg(shared.members.runs_key())
        .arg(schema::RUN_REQUEST_TTL.as_millis() as u64)
        .ignore();
    pending::announce(&mut pipe, &shared.client, shared.members.group(), "run");
    if let Err(e) = command::query::<()>(&shared.client, "giving a run-now request back", &pipe).await {
        tracing::warn!(job, error = %ErrorChain(&e), "stopping: could not give a run-now request back; it is not run");
    }
}
