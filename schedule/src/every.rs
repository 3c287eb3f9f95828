//! [`Every`]: an interval schedule, its slots aligned to the Unix epoch so that every replica
//! computes the same ones.

use std::fmt;
use std::time::Duration;

use crate::duration::format_duration;
use crate::error::ScheduleError;

/// Slots every `period`, `offset` after each multiple of the period since the Unix epoch:
/// `every 30s` fires at :00 and :30 of each minute, `every 1h offset 5m` at five past each
/// hour (UTC). Whole seconds, as all slots are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Every {
    period: Duration,
    offset: Duration,
}

impl Every {
    /// An interval of `period` (at least a second) shifted by `offset` (less than the period),
    /// both whole seconds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use lock_schedule::Every;
    ///
    /// let every = Every::new(Duration::from_secs(30), Duration::from_secs(5)).unwrap();
    /// assert_eq!(every.to_string(), "every 30s offset 5s");
    /// assert_eq!(every.next_after_ms(0), 5_000);
    /// assert_eq!(every.next_after_ms(5_000), 35_000);
    /// assert!(Every::new(Duration::from_millis(1500), Duration::ZERO).is_err());
    /// ```
    pub fn new(period: Duration, offset: Duration) -> Result<Every, ScheduleError> {
        let invalid = |reason: String| ScheduleError::InvalidInterval { reason };
        if period < Duration::from_secs(1) || period.subsec_nanos() != 0 {
            return Err(invalid(format!(
                "the period is {}: give whole seconds, at least 1s",
                format_duration(period)
            )));
        }
        if offset.subsec_nanos() != 0 || offset >= period {
            return Err(invalid(format!(
                "the offset is {}: give whole seconds, less than the period ({})",
                format_duration(offset),
                format_duration(period)
            )));
        }
        Ok(Every { period, offset })
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The offset from each multiple of the period.
    pub fn offset(&self) -> Duration {
        self.offset
    }

    fn period_ms(&self) -> i64 {
        i64::try_from(self.period.as_millis()).unwrap_or(i64::MAX)
    }

    fn offset_ms(&self) -> i64 {
        i64::try_from(self.offset.as_millis()).unwrap_or(0)
    }

    /// The first slot strictly after `after_ms` (epoch milliseconds), in epoch milliseconds.
    pub fn next_after_ms(&self, after_ms: i64) -> i64 {
        let (period, offset) = (self.period_ms(), self.offset_ms());
        let k = (after_ms - offset).div_euclid(period) + 1;
        k.saturating_mul(period).saturating_add(offset)
    }

    /// The last slot at or before `at_ms` (epoch milliseconds), in epoch milliseconds.
    pub fn latest_at_or_before_ms(&self, at_ms: i64) -> i64 {
        let (period, offset) = (self.period_ms(), self.offset_ms());
        (at_ms - offset).div_euclid(period).saturating_mul(period).saturating_add(offset)
    }
}

impl fmt::Display for Every {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "every {}", format_duration(self.period))?;
        if !self.offset.is_zero() {
            write!(f, " offset {}", format_duration(self.offset))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_aligned_to_the_epoch_whatever_the_instant() {
        let every = Every::new(Duration::from_secs(30), Duration::ZERO).unwrap();
        assert_eq!(every.next_after_ms(1_700_000_000_123), 1_700_000_010_000);
        assert_eq!(every.next_after_ms(1_700_000_010_000), 1_700_000_040_000, "strictly after");
        assert_eq!(every.latest_at_or_before_ms(1_700_000_010_000), 1_700_000_010_000);
        assert_eq!(every.latest_at_or_before_ms(1_700_000_009_999), 1_699_999_980_000);
        assert_eq!(every.next_after_ms(-1), 0, "before the epoch too");
    }

    proptest::proptest! {
        #[test]
        fn next_is_the_smallest_slot_after(period in 1u64..100_000, offset_frac in 0.0f64..1.0, at in -10i64.pow(12)..10i64.pow(12)) {
            let offset = (period as f64 * offset_frac) as u64;
            let every = Every::new(Duration::from_secs(period), Duration::from_secs(offset)).unwrap();
            let next = every.next_after_ms(at);
            proptest::prop_assert!(next > at);
            proptest::prop_assert!(next - at <= every.period_ms());
            proptest::prop_assert_eq!((next - every.offset_ms()).rem_euclid(every.period_ms()), 0);
            let latest = every.latest_at_or_before_ms(at);
            proptest::prop_assert!(latest <= at && at - latest < every.period_ms());
        }
    }
}
