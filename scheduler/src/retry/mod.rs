//! Retries of a failed run, cluster-wide: the policy a job is given ([`RetryPolicy`]) and the
//! pending retries kept in Redis ([`pending`]), where any live replica of the job's group can
//! take one (once) when it comes due.
//!
//! A run that fails (returns an error, panics, loses its lock or times out) while attempts
//! remain adds its next attempt to the group's due set
//! ([`retries_key`](crate::schema::retries_key)): one `ZADD` (with its expiry, one round
//! trip) from the replica whose attempt failed. Every replica already polls its group every
//! [`RUN_POLL`](crate::schema::RUN_POLL) for "run now" requests; the due retries are read in
//! the same pipeline, so waiting retries cost no extra round trip. A due retry is taken with a
//! `ZREM` (one replica gets 1, one round trip for all the retries due in that poll), then runs
//! like a slot, under the job's lock, claiming tick `slot + attempt - 1` so that an attempt runs
//! at most once even if two replicas took it.

pub(crate) mod pending;
pub(crate) mod policy;
