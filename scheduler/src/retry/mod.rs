//! Retries of a failed run, cluster-wide: the policy a job is given ([`RetryPolicy`]) and the
//! pending retries kept in Redis ([`pending`]), where any live replica of the job's group can
//! take one (once) when it comes due.
//!
//! A run that fails (returns an error, panics, loses its lock or times out) while attempts
//! remain adds its next attempt to the group's due set
//! ([`retries_key`](crate::schema::retries_key)): one `ZADD` (with its expiry, one round
//! trip, announced on the group's channel [`group_channel`](crate::schema::group_channel))
//! from the replica whose attempt failed. Every replica looks at its group when told of a "run
//! now" request or retry, and reads the due retries and the next one's due time in that same
//! pipeline, so it wakes when the next retry comes due (or within
//! [`RUN_POLL`](crate::schema::RUN_POLL) if the announcement was lost). A due retry is taken with a
//! script that removes it and marks it taken by the caller in one step (`take_retries.lua`: one
//! replica gets it, one round trip for all the retries due in that look; a take whose reply was
//! lost is sent again with the next look and answers the same), then runs
//! like a slot, under the job's lock. Taking the entry is the attempt's claim: it claims nothing
//! on the job's tick line, which only the slots' first attempts claim (a retry that comes due
//! after the next slot claimed its tick still runs).

pub(crate) mod pending;
pub(crate) mod policy;
