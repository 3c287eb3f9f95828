//! A job's runs beyond its latest: the history searched, filtered and paged
//! ([`query`]), the whole history as the console keeps it briefly ([`retained`]) for the
//! counts over time ([`counts`]) and the other runs of a slot, one run in full, and what an
//! operator does with runs from the page: retry a failed one, backfill a range ([`actions`]),
//! served as JSON by [`api`].

pub(crate) mod actions;
pub(crate) mod api;
pub(crate) mod counts;
pub(crate) mod query;
pub(crate) mod retained;
