//! Singleton tasks: a long-running async fn that runs on exactly one replica at a time, the
//! leader of its election (lock-core's [`Candidacy`](lock_core::Candidacy)). Declared with
//! `#[singleton]` (found at start-up through `declared`) or built with [`Singleton::new`];
//! `supervisor` starts the body when this replica is elected, drops it when the leadership is
//! lost, asks it to stop (with the scheduler's shutdown grace) on shutdown, and leaves the
//! election so that the next replica starts it at once.

pub(crate) mod args;
pub(crate) mod declared;
mod metrics;
pub(crate) mod supervisor;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use crate::job::JobOutput;
use crate::job_args::{MissingState, StateNeed, States};
use crate::singleton::args::SingletonContext;

/// How long a replica waits, after its singleton's body returned, before it resigns so that
/// the body is started again (on the next candidate, or on itself if it is alone), by
/// default.
pub const DEFAULT_RESTART_DELAY: Duration = Duration::from_secs(1);

pub(crate) type Body = Arc<
    dyn Fn(SingletonContext, &States) -> Result<BoxFuture<'static, Result<(), String>>, MissingState>
        + Send
        + Sync,
>;

/// A task that runs on exactly one replica at a time: the leader of the election
/// `lock:singleton:<name>` (or [`election`](Self::election)). Add it with
/// [`SchedulerBuilder::singleton`](crate::SchedulerBuilder::singleton), or declare it with
/// `#[singleton]` and add every declared one with
/// [`SchedulerBuilder::singletons`](crate::SchedulerBuilder::singletons).
///
/// When this replica is elected, the body starts with the leadership's [`Term`](crate::Term);
/// when the leadership is lost (a renewal refused, Redis unreachable past the lease), the body
/// is dropped at its next await, before another replica can be elected; on shutdown it is
/// asked to stop ([`SingletonContext::stopping`]), dropped after the scheduler's grace, and
/// leadership is handed to the next replica at once. A body that returns is started again
/// after [`restart_delay`](Self::restart_delay), through a resignation (so another replica
/// may start it).
#[derive(Clone)]
pub struct Singleton {
    pub(crate) name: String,
    pub(crate) election: Option<String>,
    pub(crate) restart_delay: Duration,
    pub(crate) body: Body,
    pub(crate) needs: Vec<StateNeed>,
    pub(crate) function: Option<&'static str>,
}

impl Singleton {
    /// The singleton `name` running `body`, which gets its context (term, name, the stop
    /// signal) each time it starts.
    pub fn new<F, Fut>(name: impl Into<String>, body: F) -> Self
    where
        F: Fn(SingletonContext) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: JobOutput,
    {
        let body: Body =
            Arc::new(move |context, _: &States| Ok(body(context).map(JobOutput::into_job_result).boxed()));
        Singleton::from_body(name.into(), body, Vec::new())
    }

    pub(crate) fn from_body(name: String, body: Body, needs: Vec<StateNeed>) -> Self {
        Singleton { name, election: None, restart_delay: DEFAULT_RESTART_DELAY, body, needs, function: None }
    }

    /// The election's name (a lock key); default `lock:singleton:<name>`.
    pub fn election(mut self, key: impl Into<String>) -> Self {
        self.election = Some(key.into());
        self
    }

    /// How long to wait after the body returned before starting it again (default
    /// [`DEFAULT_RESTART_DELAY`]); at most an hour.
    pub fn restart_delay(mut self, delay: Duration) -> Self {
        self.restart_delay = delay;
        self
    }

    /// The singleton's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The election it runs under.
    pub fn election_key(&self) -> String {
        self.election.clone().unwrap_or_else(|| format!("lock:singleton:{}", self.name))
    }
}

impl fmt::Debug for Singleton {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Singleton")
            .field("name", &self.name)
            .field("election", &self.election_key())
            .field("restart_delay", &self.restart_delay)
            .finish_non_exhaustive()
    }
}

/// The longest restart delay accepted.
const MAX_RESTART_DELAY: Duration = Duration::from_secs(60 * 60);

/// Checks the singletons as the scheduler's build does: names (like job names, unique among
/// the jobs' and the singletons'), election keys (lock keys, unique, not a job's lock), the
/// restart delay, and the state each body takes.
pub(crate) fn validate(
    singletons: Vec<Singleton>,
    job_names: &std::collections::HashMap<Arc<str>, Option<&'static str>>,
    lock_keys: &std::collections::HashSet<String>,
    states: &States,
) -> Result<Vec<Singleton>, crate::error::SchedulerError> {
    use crate::error::SchedulerError;
    let origin = |function: Option<&'static str>| {
        function.map_or_else(|| "a job built in code".to_owned(), str::to_owned)
    };
    let mut seen: std::collections::HashMap<String, Option<&'static str>> = std::collections::HashMap::new();
    let mut keys = std::collections::HashSet::new();
    for singleton in &singletons {
        let name = singleton.name.clone();
        if let Some(problem) = crate::schema::job_name_problem(&name) {
            return Err(SchedulerError::InvalidJob {
                job: name,
                reason: format!("invalid singleton name: {problem}"),
            });
        }
        if let Some(first) = job_names.get(name.as_str()).or_else(|| seen.get(&name)) {
            return Err(SchedulerError::DuplicateJob {
                job: name,
                first: origin(*first),
                second: origin(singleton.function),
            });
        }
        let key = singleton.election_key();
        lock_core::validate_key(&key)
            .map_err(|source| SchedulerError::InvalidLock { job: name.clone(), source })?;
        if lock_keys.contains(&key) || !keys.insert(key.clone()) {
            return Err(SchedulerError::InvalidJob {
                job: name,
                reason: format!("election `{key}` is another job's lock or singleton's election"),
            });
        }
        if singleton.restart_delay > MAX_RESTART_DELAY {
            return Err(SchedulerError::InvalidJob {
                job: name,
                reason: format!(
                    "restart_delay {:?} is longer than {MAX_RESTART_DELAY:?}",
                    singleton.restart_delay
                ),
            });
        }
        if let Some(missing) = states.missing(&singleton.needs).first() {
            return Err(SchedulerError::MissingState {
                job: name,
                function: origin(singleton.function),
                type_name: missing.type_name,
            });
        }
        seen.insert(singleton.name.clone(), singleton.function);
    }
    Ok(singletons)
}
