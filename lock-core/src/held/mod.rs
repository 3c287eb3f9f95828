//! What a holder has and keeps: the state of a held lock and its guard, the re-entrancy scope,
//! the client's liveness lease, the record of what it holds (for operators' tools), the watchdog that renews, and the releaser that gives locks
//! back (and cleans up tokens whose acquisitions' outcomes are unknown).

pub(crate) mod background;
pub(crate) mod guard;
pub(crate) mod holdings;
pub(crate) mod liveness;
pub(crate) mod release;
pub(crate) mod scope;
pub(crate) mod state;
pub(crate) mod unsettled;
pub(crate) mod watchdog;
