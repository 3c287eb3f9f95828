//! What a `#[scheduled]` function can take as arguments: its [`RunContext`], and application
//! state given to the scheduler once ([`State<T>`], filled from
//! [`SchedulerBuilder::state`](crate::scheduler::SchedulerBuilder::state)), the way axum
//! handlers take `State<T>`: no globals, and a missing value is an error when the scheduler is
//! built, naming the job and the type, not at 2 a.m. when the job first runs.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::run_context::RunContext;

/// Application state a job takes as an argument: a database pool, a mailer, a service. Given
/// once to [`SchedulerBuilder::state`](crate::scheduler::SchedulerBuilder::state); each run gets
/// a clone (so make it cheap to clone: an `Arc`, or a pool that is one inside).
///
/// ```
/// use lock_scheduler::{RunContext, State};
///
/// #[derive(Clone)]
/// struct Mailer;
///
/// // `#[scheduled(cron = "0 0 8 * * MON-FRI")]` on it fills both arguments at each run.
/// async fn send_digest(State(mailer): State<Mailer>, run: RunContext) -> anyhow::Result<()> {
///     let _ = (mailer, run.slot());
///     Ok(())
/// }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct State<T>(pub T);

/// The state values given to a scheduler, by type.
#[derive(Default, Clone)]
pub struct States {
    values: HashMap<TypeId, (Arc<dyn Any + Send + Sync>, &'static str)>,
}

impl States {
    /// Adds `value`, replacing a value of the same type.
    pub(crate) fn insert<T: Clone + Send + Sync + 'static>(&mut self, value: T) {
        self.values.insert(TypeId::of::<T>(), (Arc::new(value), std::any::type_name::<T>()));
    }

    /// A clone of the value of type `T`, if one was given.
    pub fn get<T: Clone + Send + Sync + 'static>(&self) -> Option<T> {
        self.values.get(&TypeId::of::<T>()).and_then(|(value, _)| value.downcast_ref::<T>()).cloned()
    }

    fn has(&self, need: &StateNeed) -> bool {
        self.values.contains_key(&need.type_id)
    }

    /// The needs of `needs` that no value was given for.
    pub(crate) fn missing<'n>(&self, needs: &'n [StateNeed]) -> Vec<&'n StateNeed> {
        needs.iter().filter(|need| !self.has(need)).collect()
    }
}

impl fmt::Debug for States {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.values.values().map(|(_, name)| name)).finish()
    }
}

/// A type of state a job takes, which the scheduler must have been given.
#[derive(Debug, Clone, Copy)]
pub struct StateNeed {
    type_id: TypeId,
    /// The type's name, for the error that says it is missing.
    pub type_name: &'static str,
}

/// A state value a job needed at a run and did not find (the scheduler checks this at build,
/// so it only happens to jobs whose state was taken away by hand).
#[derive(Debug, Clone, thiserror::Error)]
#[error("no state of type `{type_name}` was given to the scheduler (`SchedulerBuilder::state`)")]
pub struct MissingState {
    /// The type's name.
    pub type_name: &'static str,
}

/// An argument a `#[scheduled]` function can take: filled at each run from the run's context
/// and the scheduler's state. Implemented by [`RunContext`] and [`State<T>`].
#[diagnostic::on_unimplemented(
    message = "a `#[scheduled]` function cannot take an argument of type `{Self}`",
    label = "the scheduler cannot supply this argument",
    note = "a scheduled job takes `RunContext` (its slot, tick and instance) and `State<T>` arguments, \
            with each `T` given to the scheduler once with `SchedulerBuilder::state`"
)]
pub trait FromRun: Sized {
    /// The argument for a run with context `run`, from `states`.
    fn from_run(run: &RunContext, states: &States) -> Result<Self, MissingState>;

    /// The state this argument needs, checked when the scheduler is built.
    fn need() -> Option<StateNeed> {
        None
    }
}

impl FromRun for RunContext {
    fn from_run(run: &RunContext, _: &States) -> Result<Self, MissingState> {
        Ok(run.clone())
    }
}

impl<T: Clone + Send + Sync + 'static> FromRun for State<T> {
    fn from_run(_: &RunContext, states: &States) -> Result<Self, MissingState> {
        states.get::<T>().map(State).ok_or(MissingState { type_name: std::any::type_name::<T>() })
    }

    fn need() -> Option<StateNeed> {
        Some(StateNeed { type_id: TypeId::of::<T>(), type_name: std::any::type_name::<T>() })
    }
}
