//! Jobs declared with `#[scheduled]` on their functions, found at start-up without a list in
//! `main`: each expansion submits a [`Registration`] to a registry the linker assembles
//! (`inventory`), and [`SchedulerBuilder::scheduled_jobs`](crate::scheduler::SchedulerBuilder::scheduled_jobs)
//! adds those of its group.
//!
//! `inventory` rather than `linkme`: its registrations compile in crates that
//! `#![forbid(unsafe_code)]` (`linkme`'s link-section statics are refused there), and it works
//! with every linker and platform the standard library supports. Like any link-time registry,
//! it sees the jobs of the crates the binary links: a library whose only job declarations are
//! never referenced may be left out by the linker (name any item of it, e.g. one job's
//! `job()`, to keep it).

use crate::job::Job;

/// One job declared with `#[scheduled]`; made by the attribute's expansion, not by hand.
#[derive(Debug)]
#[non_exhaustive]
pub struct Registration {
    /// The job's name.
    pub name: &'static str,
    /// The declaring function's path (`crate::jobs::send_digest`), for messages.
    pub function: &'static str,
    /// The scheduler group it belongs to (`None`: any builder's group).
    pub group: Option<&'static str>,
    /// Builds the job.
    pub job: fn() -> Job,
}

impl Registration {
    /// A registration (for the attribute's expansion).
    pub const fn new(
        name: &'static str,
        function: &'static str,
        group: Option<&'static str>,
        job: fn() -> Job,
    ) -> Self {
        Registration { name, function, group, job }
    }
}

inventory::collect!(Registration);

/// The jobs declared for `group` (and those declared for any group), in a stable order: by
/// name, then function.
pub(crate) fn declared_jobs(group: &str) -> Vec<&'static Registration> {
    let mut found: Vec<&'static Registration> =
        inventory::iter::<Registration>.into_iter().filter(|r| r.group.is_none_or(|g| g == group)).collect();
    found.sort_by_key(|r| (r.name, r.function));
    found
}
