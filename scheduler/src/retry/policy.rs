//! [`RetryPolicy`]: how often, and how long after a failure, a failed run is tried again.

use std::time::Duration;

use crate::spread;

/// Most attempts a policy may make.
pub const MAX_ATTEMPTS: u32 = 100;

/// Retries of a failed run with exponential backoff, for [`Job::retry`](crate::job::Job::retry).
/// Off unless a job is given one.
///
/// A run fails when it returns an error, panics, times out
/// ([`Job::max_run_time`](crate::job::Job::max_run_time)) or loses its lock. While attempts
/// remain, the next one is due `base_delay × factor^(n - 2)` after attempt `n - 1` failed
/// (capped at `max_delay`, then shortened by up to `jitter` of itself), and any live replica
/// of the job's group may run it, once: the pending retry is kept in Redis, not in the
/// replica's memory, so a replica stopped or killed during the backoff loses nothing.
///
/// Defaults: 3 attempts in all, 10 s, ×2, at most 10 minutes, 10 % jitter.
///
/// ```
/// use std::time::Duration;
/// use lock_scheduler::RetryPolicy;
///
/// // Four attempts in all: retried 5 s, 10 s and 20 s after each failure.
/// let policy = RetryPolicy::attempts(4).base_delay(Duration::from_secs(5)).jitter(0.0);
/// assert_eq!(policy.delay_before(2), Duration::from_secs(5));
/// assert_eq!(policy.delay_before(4), Duration::from_secs(20));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts in all, the first run included (at least 1, at most [`MAX_ATTEMPTS`]).
    pub attempts: u32,
    /// The wait before the second attempt.
    pub base_delay: Duration,
    /// What each wait is multiplied by for the next (at least 1).
    pub factor: f64,
    /// The longest wait.
    pub max_delay: Duration,
    /// The fraction (0 to 1) by which a wait may be shortened, the same for a given job, slot
    /// and attempt on every replica: failures of many jobs in the same second do not retry in
    /// the same second either.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 3,
            base_delay: Duration::from_secs(10),
            factor: 2.0,
            max_delay: Duration::from_secs(600),
            jitter: 0.1,
        }
    }
}

impl RetryPolicy {
    /// The default policy with `attempts` attempts in all (the first run included).
    pub fn attempts(attempts: u32) -> Self {
        RetryPolicy { attempts, ..RetryPolicy::default() }
    }

    /// The wait before the second attempt (default 10 s).
    #[must_use]
    pub fn base_delay(mut self, delay: Duration) -> Self {
        self.base_delay = delay;
        self
    }

    /// What each wait is multiplied by for the next (default 2; 1 for a constant wait).
    #[must_use]
    pub fn factor(mut self, factor: f64) -> Self {
        self.factor = factor;
        self
    }

    /// The longest wait (default 10 minutes).
    #[must_use]
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// The fraction (0 to 1) by which each wait may be shortened (default 0.1; 0 for exact
    /// waits).
    #[must_use]
    pub fn jitter(mut self, fraction: f64) -> Self {
        self.jitter = fraction;
        self
    }

    /// The wait, before jitter, between the failure of attempt `attempt - 1` and attempt
    /// `attempt` (2 and up).
    pub fn delay_before(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(2).min(64) as i32;
        let secs = self.base_delay.as_secs_f64() * self.factor.powi(exponent);
        let capped = secs.min(self.max_delay.as_secs_f64());
        Duration::try_from_secs_f64(capped).unwrap_or(self.max_delay)
    }

    /// The jittered wait before `attempt` of `job`'s slot `tick`: the same on every replica.
    pub(crate) fn jittered_delay(&self, job: &str, tick: i64, attempt: u32) -> Duration {
        let delay = self.delay_before(attempt);
        let cut = self.jitter * spread::unit(job, &[tick, i64::from(attempt)]);
        delay.mul_f64((1.0 - cut).clamp(0.0, 1.0))
    }

    /// What is wrong with the policy, if anything: checked when the job is validated.
    pub(crate) fn problem(&self) -> Option<String> {
        if self.attempts == 0 || self.attempts > MAX_ATTEMPTS {
            return Some(format!(
                "retry attempts is {}: give 1 to {MAX_ATTEMPTS} (attempts in all, the first run included)",
                self.attempts
            ));
        }
        if self.base_delay < Duration::from_millis(1) {
            return Some("the retry base delay is zero: give at least a millisecond".into());
        }
        if !self.factor.is_finite() || self.factor < 1.0 {
            return Some(format!("the retry factor is {}: give a finite number of at least 1", self.factor));
        }
        if self.max_delay < self.base_delay {
            return Some(format!(
                "the retry maximum delay ({:?}) is shorter than its base delay ({:?}): raise it",
                self.max_delay, self.base_delay
            ));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Some(format!("the retry jitter is {}: give a fraction from 0 to 1", self.jitter));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_by_the_factor_up_to_the_maximum() {
        let p = RetryPolicy::attempts(10)
            .base_delay(Duration::from_secs(1))
            .factor(3.0)
            .max_delay(Duration::from_secs(20))
            .jitter(0.0);
        let delays: Vec<u64> = (2..=6).map(|n| p.delay_before(n).as_secs()).collect();
        assert_eq!(delays, [1, 3, 9, 20, 20]);
        assert_eq!(p.jittered_delay("j", 0, 3), Duration::from_secs(3));
    }

    #[test]
    fn jitter_shortens_within_its_fraction_and_is_agreed() {
        let p = RetryPolicy::attempts(3).base_delay(Duration::from_secs(10)).jitter(0.5);
        for tick in 0..200 {
            let d = p.jittered_delay("job", tick * 1000, 2);
            assert!(d <= Duration::from_secs(10) && d >= Duration::from_secs(5), "{d:?}");
            assert_eq!(d, p.jittered_delay("job", tick * 1000, 2));
        }
    }

    #[test]
    fn bad_policies_say_what_to_fix() {
        assert!(RetryPolicy::default().problem().is_none());
        for (p, says) in [
            (RetryPolicy::attempts(0), "attempts is 0"),
            (RetryPolicy::attempts(101), "attempts is 101"),
            (RetryPolicy::attempts(2).base_delay(Duration::ZERO), "base delay is zero"),
            (RetryPolicy::attempts(2).factor(0.5), "factor is 0.5"),
            (RetryPolicy::attempts(2).factor(f64::NAN), "factor is NaN"),
            (RetryPolicy::attempts(2).max_delay(Duration::from_secs(1)), "shorter than its base"),
            (RetryPolicy::attempts(2).jitter(1.5), "jitter is 1.5"),
        ] {
            let problem = p.problem().expect("refused");
            assert!(problem.contains(says), "{problem}");
        }
    }
}
