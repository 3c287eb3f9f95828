//! The wall clock the scheduler reads: injectable, so replicas with skewed clocks (and clock
//! steps) can be simulated in one process.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, TimeDelta, Utc};

/// A source of wall-clock time. Slots are computed and awaited on this clock.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock ([`Utc::now`]); the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// The system clock shifted by an adjustable offset (millisecond resolution): a replica whose
/// clock runs behind (negative offset) or ahead (positive), or a clock that is stepped while the
/// scheduler runs. Clones share the offset.
///
/// ```
/// use lock_scheduler::{Clock, OffsetClock};
/// use lock_scheduler::chrono::TimeDelta;
///
/// let behind = OffsetClock::new(TimeDelta::milliseconds(-300));
/// assert_eq!(behind.offset(), TimeDelta::milliseconds(-300));
/// behind.set_offset(TimeDelta::zero());
/// ```
#[derive(Debug, Clone, Default)]
pub struct OffsetClock {
    offset_ms: Arc<AtomicI64>,
}

impl OffsetClock {
    /// The system clock plus `offset`.
    pub fn new(offset: TimeDelta) -> Self {
        OffsetClock { offset_ms: Arc::new(AtomicI64::new(offset.num_milliseconds())) }
    }

    /// Changes the offset (a clock step), for this clock and its clones.
    pub fn set_offset(&self, offset: TimeDelta) {
        self.offset_ms.store(offset.num_milliseconds(), Ordering::SeqCst);
    }

    /// The current offset.
    pub fn offset(&self) -> TimeDelta {
        TimeDelta::milliseconds(self.offset_ms.load(Ordering::SeqCst))
    }
}

impl Clock for OffsetClock {
    fn now(&self) -> DateTime<Utc> {
        let now = Utc::now();
        now.checked_add_signed(self.offset()).unwrap_or(now)
    }
}
