//! What happens to a slot that comes while the job's previous run is still going on somewhere
//! ([`Overlap`]). The policy only: what `BufferOne` and `Replace` do at run time is in the
//! run's own modules (`run::buffer`, `run::replace`).

/// What a slot does when it comes while the job's previous run (or retry) is still running,
/// on this replica or another: [`Job::overlap`](crate::job::Job::overlap). Needs the
/// scheduler to know the job's lock ([`Job::lock`](crate::job::Job::lock)), except `Skip`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Overlap {
    /// The slot is skipped (reported as `skipped: held` or `skipped: still running`). The
    /// default. No Redis cost beyond the slot's claim.
    #[default]
    Skip,
    /// The slot runs alongside the previous run: each slot still runs once across the
    /// replicas (its tick is claimed, without the job's lock, which an `Allow` job does not
    /// take). Cost: the claim is one script call in the wake's claim round trip, and no release
    /// (cheaper than `Skip`'s lock). A retry of an `Allow` job is not claimed by tick: taking it
    /// from the pending retries is what makes it run once.
    Allow,
    /// The slot is kept (one at most: a later one replaces it) and runs right after the current
    /// run ends, on the replica that ran it. Reported as `buffered` (metrics, logs, one history
    /// entry). Cost: one round trip per run end (`GETDEL` of the buffer), and one when a slot
    /// is buffered (`SET` of the buffer and a look at the lock, pipelined).
    BufferOne,
    /// The slot stops the running run (on this replica or another) and runs once it has
    /// stopped: the old run is cancelled as for a lost lock (its body dropped at its next
    /// `.await`, [`lock_core::current`] inside it reporting the loss,
    /// [`LossReason::Revoked`](lock_core::LossReason::Revoked)), reported and recorded as
    /// `replaced`, and its lock handed to the new slot's run, which claims the slot's tick (so
    /// each slot still runs once across the replicas, one run at a time). The running replica
    /// sees the request within [`RUN_POLL`](crate::schema::RUN_POLL) (at once on the same
    /// replica); the new slot waits for the lock up to
    /// [`REPLACE_WAIT`](crate::schema::REPLACE_WAIT) (or the job's lock wait, if longer), then is
    /// skipped as held. A body that does not `.await` cannot be stopped; with
    /// [`OnLost::Continue`](lock_core::OnLost::Continue) the old run is told (its lock reads lost) but
    /// finishes, and the new one starts after it. Cost: nothing while runs do not overlap; per
    /// replacing slot, one round trip for the request (a script), then the waiting acquisition's
    /// (one or two); the running replica reads the request in the poll it already sends every
    /// `RUN_POLL` (one `MGET` more in it, only while a `Replace` run is in flight there).
    Replace,
}
