//! Clean-up of an acquisition whose outcome is unknown: a future dropped while its command was
//! out, or a reply lost to a timeout or a dropped connection, may still have taken the lock, so
//! its token is given up in the background (`Releaser::abandon`). When such a
//! clean-up is certain: see `unsettled`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::acquire::Target;
use crate::conn::Sent;
use crate::error::LockError;
use crate::held::release::Releaser;
use crate::held::unsettled::{Settles, Unsettled};

/// Cleans up an acquisition's token in the background unless disarmed once its reply is in:
/// a future dropped while its command was out, or a reply lost to a timeout or a dropped
/// connection, may still have taken the lock. For a single try, the one way its token can take
/// the key ([`Settles::FoundOrAfter`]).
pub(crate) struct CleanupOnDrop<'a> {
    releaser: &'a Arc<Releaser>,
    target: Target<'a>,
    token: &'a str,
    sent_at: Instant,
    lease: Duration,
    sent: &'a Sent,
    /// A second try with the same token (a batched claim sent again after a lost reply): when
    /// it went out, and on which connection.
    again: Option<(Instant, &'a Sent)>,
    armed: bool,
}

impl<'a> CleanupOnDrop<'a> {
    pub(crate) fn new(
        releaser: &'a Arc<Releaser>,
        target: Target<'a>,
        token: &'a str,
        sent_at: Instant,
        lease: Duration,
        sent: &'a Sent,
    ) -> Self {
        CleanupOnDrop { releaser, target, token, sent_at, lease, sent, again: None, armed: true }
    }

    /// The same command was sent again at `at` (recorded in `sent`): two tries may now run, so
    /// finding the token no longer proves the last one did. Only a clean-up on the one
    /// connection both went out on, or the lease counted from the second send, settles it.
    pub(crate) fn sent_again(&mut self, at: Instant, sent: &'a Sent) {
        self.again = Some((at, sent));
    }

    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }

    /// The last try's reply says that try changed nothing (the lock held by another owner, an
    /// error reply, a redirect). Alone, that try ran and there is nothing to clean up. After a
    /// second try, the first may still run, late, and take the lock then: its clean-up stays
    /// armed as if it had been the only try (finding the token proves it ran, since the second
    /// did not put it there), unless the second went out on the first's connection, where
    /// Redis ran the first before it.
    pub(crate) fn answered_unchanged(mut self) {
        self.armed = match self.again.take() {
            None => false,
            Some((_, again)) => again.generation().is_none() || again.generation() != self.sent.generation(),
        };
    }

    /// The command failed with `e`: clean up if the outcome is unknown; a server's error reply
    /// means the last try did nothing ([`answered_unchanged`](Self::answered_unchanged)).
    pub(crate) fn failed(mut self, e: LockError) -> LockError {
        if e.outcome_unknown() {
            self.armed = true;
        } else {
            self.answered_unchanged();
        }
        e
    }
}

impl Drop for CleanupOnDrop<'_> {
    fn drop(&mut self) {
        // Never sent (no connection): nothing can have happened.
        if self.armed
            && let Some(on) = self.sent.generation()
        {
            let token = (self.target.key, self.target.hold, self.token);
            let first = Unsettled { since: self.sent_at, on: Some(on) };
            let (last_sent, settles) = match self.again.and_then(|(at, sent)| Some((at, sent.generation()?)))
            {
                Some((at, again_on)) => (at, Settles::After(Unsettled::and(Some(first), at, again_on))),
                None => (self.sent_at, Settles::FoundOrAfter(first)),
            };
            self.releaser.abandon(token, last_sent, self.lease, settles, false);
        }
    }
}
