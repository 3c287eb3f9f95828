//! One singleton on this replica: join its election, start the body when elected, drop it when
//! the leadership is lost, stop it (with the grace) on shutdown, and leave the election so that
//! the next replica is elected at once.

use std::sync::Arc;

use lock_core::{ErrorChain, LockClient, Role};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::job_args::States;
use crate::singleton::Singleton;
use crate::singleton::args::SingletonContext;
use crate::singleton::metrics;
use crate::state::State;

/// How a singleton's body that ran at shutdown ended: its name, and whether it finished within
/// the grace (else it was dropped).
pub(crate) type SingletonExit = (String, bool);

/// Starts the supervisor of `singleton` (validated), following the scheduler's `state`.
pub(crate) fn spawn(
    client: LockClient,
    states: Arc<States>,
    singleton: Singleton,
    state: watch::Receiver<State>,
) -> JoinHandle<Option<SingletonExit>> {
    let span = tracing::info_span!(
        "singleton",
        singleton = %singleton.name,
        election = %singleton.election_key(),
        instance = %client.instance_id()
    );
    tokio::spawn(Supervisor { client, states, singleton, state }.run().instrument(span))
}

struct Supervisor {
    client: LockClient,
    states: Arc<States>,
    singleton: Singleton,
    state: watch::Receiver<State>,
}

/// How a running body ended.
enum Ended {
    Returned(Result<Result<(), String>, tokio::task::JoinError>),
    Lost,
    Shutdown(Instant),
}

/// When the scheduler starts stopping: its deadline (now, if the handle was dropped).
async fn stopping(state: &mut watch::Receiver<State>) -> Instant {
    match state.wait_for(|s| s.deadline().is_some()).await {
        Ok(s) => s.deadline().unwrap_or_else(Instant::now),
        Err(_) => Instant::now(),
    }
}

impl Supervisor {
    async fn run(mut self) -> Option<SingletonExit> {
        let key = self.singleton.election_key();
        let candidacy = match self.client.election(&key).join().await {
            Ok(candidacy) => candidacy,
            Err(e) => {
                // Validated when the scheduler was built: not expected.
                tracing::error!(error = %ErrorChain(&e), "could not join the singleton's election");
                return None;
            }
        };
        let mut role = candidacy.watch();
        let mut exit = None;
        let name = self.singleton.name.clone();
        loop {
            let term = tokio::select! {
                elected = role.wait_for(Role::is_leader) => match elected.ok().and_then(|r| r.term()) {
                    Some(term) => term,
                    None => break,
                },
                _ = stopping(&mut self.state) => break,
            };
            let (stop_tx, stop_rx) = watch::channel(false);
            let context = SingletonContext {
                name: name.clone(),
                term,
                instance: self.client.instance_id().to_owned(),
                stopping: stop_rx,
            };
            let body = match (self.singleton.body)(context, &self.states) {
                Ok(body) => body,
                Err(missing) => {
                    tracing::error!(term, "singleton not started: {missing}");
                    metrics::stopped(&name, "failed");
                    if self.pause_then_resign(&candidacy, &mut role, term).await {
                        break;
                    }
                    continue;
                }
            };
            let span = tracing::info_span!("singleton_body", term);
            let mut task = tokio::spawn(body.instrument(span));
            metrics::started(&name);
            tracing::info!(term, "singleton started on this replica");
            let ended = tokio::select! {
                result = &mut task => Ended::Returned(result),
                _ = role.wait_for(|r| r.term() != Some(term)) => Ended::Lost,
                deadline = stopping(&mut self.state) => Ended::Shutdown(deadline),
            };
            match ended {
                Ended::Returned(result) => {
                    match result {
                        Ok(Ok(())) => {
                            tracing::info!(
                                term,
                                "singleton returned; starting it again after {:?}",
                                self.singleton.restart_delay
                            );
                            metrics::stopped(&name, "returned");
                        }
                        Ok(Err(error)) => {
                            tracing::warn!(
                                term,
                                error,
                                "singleton failed; starting it again after {:?}",
                                self.singleton.restart_delay
                            );
                            metrics::stopped(&name, "failed");
                        }
                        Err(e) => {
                            tracing::error!(term, "singleton panicked: {e}");
                            metrics::stopped(&name, "failed");
                        }
                    }
                    if self.pause_then_resign(&candidacy, &mut role, term).await {
                        break;
                    }
                }
                Ended::Lost => {
                    // Another replica may be elected from now on: no grace.
                    task.abort();
                    let _ = task.await;
                    metrics::stopped(&name, "lost");
                    tracing::warn!(term, "leadership lost: singleton stopped on this replica");
                }
                Ended::Shutdown(deadline) => {
                    let _ = stop_tx.send(true);
                    let finished = self.wind_down(&mut task, &mut role, term, deadline).await;
                    metrics::stopped(&name, "shutdown");
                    tracing::info!(term, finished, "singleton stopped for the shutdown");
                    exit = Some((name.clone(), finished));
                    break;
                }
            }
        }
        // Steps down (if leading) and hands leadership on to the next replica at once.
        if let Err(e) = candidacy.leave().await {
            tracing::warn!(error = %ErrorChain(&e), "leaving the singleton's election failed; it is released in the background");
        }
        exit
    }

    /// After a body ended by itself: waits the restart delay (still leading), then resigns so
    /// that the body starts again on the next leader. Returns whether the scheduler stops.
    async fn pause_then_resign(
        &mut self,
        candidacy: &lock_core::Candidacy,
        role: &mut watch::Receiver<Role>,
        term: u64,
    ) -> bool {
        tokio::select! {
            () = tokio::time::sleep(self.singleton.restart_delay) => {}
            _ = role.wait_for(|r| r.term() != Some(term)) => return false,
            _ = stopping(&mut self.state) => return true,
        }
        if let Err(e) = candidacy.resign().await {
            tracing::warn!(error = %ErrorChain(&e), "resigning to restart the singleton failed");
        }
        false
    }

    /// Waits for a body asked to stop, until `deadline` (moved to now by a forced shutdown) or
    /// a lost leadership; then drops it. Returns whether it finished by itself.
    async fn wind_down(
        &mut self,
        task: &mut JoinHandle<Result<(), String>>,
        role: &mut watch::Receiver<Role>,
        term: u64,
        mut deadline: Instant,
    ) -> bool {
        loop {
            tokio::select! {
                _ = &mut *task => return true,
                () = tokio::time::sleep_until(deadline) => break,
                _ = role.wait_for(|r| r.term() != Some(term)) => break,
                changed = self.state.changed() => {
                    deadline = match changed {
                        Ok(()) => self.state.borrow().deadline().unwrap_or(deadline),
                        Err(_) => Instant::now(),
                    };
                }
            }
        }
        task.abort();
        let _ = (&mut *task).await;
        false
    }
}
