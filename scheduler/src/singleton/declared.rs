//! Singletons declared with `#[singleton]`, found at start-up like `#[scheduled]` jobs (see
//! `crate::declared`): each expansion submits a [`SingletonRegistration`], and
//! [`SchedulerBuilder::singletons`](crate::SchedulerBuilder::singletons) adds those of its
//! group.

use crate::singleton::Singleton;

/// One singleton declared with `#[singleton]`; made by the attribute's expansion.
#[derive(Debug)]
#[non_exhaustive]
pub struct SingletonRegistration {
    /// The singleton's name.
    pub name: &'static str,
    /// The declaring function's path, for messages.
    pub function: &'static str,
    /// The scheduler group it belongs to (`None`: any builder's group).
    pub group: Option<&'static str>,
    /// Builds the singleton.
    pub singleton: fn() -> Singleton,
}

impl SingletonRegistration {
    /// A registration (for the attribute's expansion).
    pub const fn new(
        name: &'static str,
        function: &'static str,
        group: Option<&'static str>,
        singleton: fn() -> Singleton,
    ) -> Self {
        SingletonRegistration { name, function, group, singleton }
    }
}

inventory::collect!(SingletonRegistration);

/// The singletons declared for `group` (and for any group), by name then function.
pub(crate) fn declared_singletons(group: &str) -> Vec<&'static SingletonRegistration> {
    let mut found: Vec<&'static SingletonRegistration> = inventory::iter::<SingletonRegistration>
        .into_iter()
        .filter(|r| r.group.is_none_or(|g| g == group))
        .collect();
    found.sort_by_key(|r| (r.name, r.function));
    found
}
