//! What a singleton's function can take as arguments: its [`SingletonContext`], the [`Term`]
//! of the leadership it runs under, and [`State<T>`](crate::State) given to the scheduler.

use tokio::sync::watch;

use crate::job_args::{FromRun, MissingState, State, StateNeed, States};

/// The term of the leadership a singleton's body runs under: it strictly increases with every
/// new leader, so a store that remembers the highest term it accepted can refuse writes from a
/// replica that no longer leads (like a lock's fence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Term(pub u64);

/// What a singleton's body is told: its name, its term, and when to wind down.
#[derive(Debug, Clone)]
pub struct SingletonContext {
    pub(crate) name: String,
    pub(crate) term: u64,
    pub(crate) instance: String,
    pub(crate) stopping: watch::Receiver<bool>,
}

impl SingletonContext {
    /// The singleton's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The term of the leadership this body runs under.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// This replica's instance id.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Whether the body has been asked to stop (the scheduler shuts down, or the body's
    /// replica resigns): finish the current step and return within the scheduler's shutdown
    /// grace, after which the body is dropped.
    pub fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Resolves when the body is asked to stop (see [`is_stopping`](Self::is_stopping)). A lost
    /// leadership does not ask: the body is dropped at once, since another replica may lead.
    pub async fn stopping(&self) {
        let mut stopping = self.stopping.clone();
        let _ = stopping.wait_for(|s| *s).await;
    }
}

/// An argument a `#[singleton]` function can take. Implemented by [`SingletonContext`],
/// [`Term`] and [`State<T>`](crate::State).
#[diagnostic::on_unimplemented(
    message = "a `#[singleton]` function cannot take an argument of type `{Self}`",
    label = "the scheduler cannot supply this argument",
    note = "a singleton takes `SingletonContext`, `Term` and `State<T>` arguments, with each `T` given \
            to the scheduler once with `SchedulerBuilder::state`"
)]
pub trait FromSingleton: Sized {
    /// The argument for a body started with `context`, from `states`.
    fn from_singleton(context: &SingletonContext, states: &States) -> Result<Self, MissingState>;

    /// The state this argument needs, checked when the scheduler is built.
    fn need() -> Option<StateNeed> {
        None
    }
}

impl FromSingleton for SingletonContext {
    fn from_singleton(context: &SingletonContext, _: &States) -> Result<Self, MissingState> {
        Ok(context.clone())
    }
}

impl FromSingleton for Term {
    fn from_singleton(context: &SingletonContext, _: &States) -> Result<Self, MissingState> {
        Ok(Term(context.term))
    }
}

impl<T: Clone + Send + Sync + 'static> FromSingleton for State<T> {
    fn from_singleton(_: &SingletonContext, states: &States) -> Result<Self, MissingState> {
        states.get::<T>().map(State).ok_or(MissingState { type_name: std::any::type_name::<T>() })
    }

    fn need() -> Option<StateNeed> {
        <State<T> as FromRun>::need()
    }
}
