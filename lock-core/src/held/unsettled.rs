//! What may still run of a token's commands whose replies never came, and when a clean-up of
//! that token is certain.
//!
//! A command whose reply never came may still run later (a stalled Redis resumes, a dropped
//! connection's bytes are still delivered). Every belief about it rests on what can order a
//! clean-up after it: the connection it went out on (Redis runs one connection's commands in
//! order), or the end of the lease it could set, counted from its send. Finding the token in
//! the key proves that *a* command of the token ran, which settles it only when that command
//! is the one way the token could get there (a fail-fast acquisition's single try): a waiter's
//! token also gets there by hand-off, and a waiter may have several tries out.

use tokio::time::Instant;

/// Commands of one token whose replies never came, and that may still run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unsettled {
    /// When the last of them was sent.
    pub(crate) since: Instant,
    /// The connection generation every one of them went out on, if they share one: a clean-up
    /// that runs there runs after them. `None`: they went out on several connections.
    pub(crate) on: Option<u64>,
}

impl Unsettled {
    /// `earlier` (if any) and one more command sent at `since` on connection `on`.
    pub(crate) fn and(earlier: Option<Unsettled>, since: Instant, on: u64) -> Unsettled {
        let on = match earlier {
            Some(earlier) if earlier.on != Some(on) => None,
            _ => Some(on),
        };
        Unsettled { since: earlier.map_or(since, |e| e.since.max(since)), on }
    }

    /// What is left unsettled once a command sent later on connection `answered` got its reply:
    /// nothing, if every unsettled command went out on that connection before it.
    pub(crate) fn after_reply(unsettled: Option<Unsettled>, answered: Option<u64>) -> Option<Unsettled> {
        unsettled.filter(|u| u.on.is_none() || u.on != answered)
    }
}

/// When a clean-up of a token is certain, so that it stops retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settles {
    /// Every command of the token was answered: one clean-up that runs is enough.
    Once,
    /// Commands whose replies were lost may still run (see [`Unsettled`]): certain when a
    /// clean-up runs on their one connection, else when the lease counted from the last one's
    /// send has passed.
    After(Unsettled),
    /// One command whose reply was lost, the only one that could put the token in the key (a
    /// fail-fast try, a batched claim): finding the token there proves it ran, as does a
    /// clean-up on its connection.
    FoundOrAfter(Unsettled),
}

impl Settles {
    /// A waiter's or a guard's clean-up: [`Once`](Self::Once) unless something is unsettled.
    pub(crate) fn unless(unsettled: Option<Unsettled>) -> Settles {
        unsettled.map_or(Settles::Once, Settles::After)
    }

    /// Whether a clean-up that ran on connection `ran_on` (`held`: it found the token holding
    /// the key, or a permit or hold) settles the token's fate.
    pub(crate) fn settled_by(self, held: bool, ran_on: Option<u64>) -> bool {
        match self {
            Settles::Once => true,
            Settles::After(u) => u.on.is_some() && u.on == ran_on,
            Settles::FoundOrAfter(u) => held || (u.on.is_some() && u.on == ran_on),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn commands_on_one_connection_are_settled_by_a_later_reply_there() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(5);
        let one = Unsettled::and(None, t0, 3);
        assert_eq!(one, Unsettled { since: t0, on: Some(3) });
        assert_eq!(Unsettled::after_reply(Some(one), Some(3)), None, "ordered after it");
        assert_eq!(Unsettled::after_reply(Some(one), Some(4)), Some(one), "another connection");
        let two = Unsettled::and(Some(one), t1, 3);
        assert_eq!(two, Unsettled { since: t1, on: Some(3) });
        let spread = Unsettled::and(Some(two), t0, 4);
        assert_eq!(spread, Unsettled { since: t1, on: None }, "the latest send, no one connection");
        assert_eq!(Unsettled::after_reply(Some(spread), Some(4)), Some(spread));
        assert_eq!(Unsettled::and(Some(spread), t1, 4).on, None, "several connections stay several");
    }

    #[test]
    fn finding_the_token_settles_only_a_single_try() {
        let u = Unsettled { since: Instant::now(), on: Some(7) };
        assert!(Settles::Once.settled_by(false, Some(1)));
        assert!(!Settles::After(u).settled_by(true, Some(8)), "a waiter's token also gets there by hand-off");
        assert!(Settles::After(u).settled_by(false, Some(7)));
        assert!(!Settles::After(Unsettled { on: None, ..u }).settled_by(true, None));
        assert!(Settles::FoundOrAfter(u).settled_by(true, Some(8)));
        assert!(!Settles::FoundOrAfter(u).settled_by(false, Some(8)));
        assert_eq!(Settles::unless(None), Settles::Once);
        assert_eq!(Settles::unless(Some(u)), Settles::After(u));
    }
}
