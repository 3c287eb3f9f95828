//! The limit on refused tokens: after too many from one client address within a window, that
//! address's actions are refused (429) until the window ends, so a token cannot be guessed by
//! trying.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::ConsoleError;

/// Refused tokens tolerated per address and window, by default.
const DEFAULT_MAX: u32 = 5;
/// The default window.
const DEFAULT_WINDOW: Duration = Duration::from_secs(60);
/// Most addresses tracked at once: past it, lapsed windows are dropped, then the oldest, so
/// that a flood of addresses cannot grow the map without bound.
const MAX_TRACKED: usize = 10_000;

/// Refused tokens per client address (`None`: the address is unknown, e.g. a router served
/// without connect info; those share one count).
#[derive(Debug)]
pub(crate) struct FailedAttempts {
    max: u32,
    window: Duration,
    counts: Mutex<HashMap<Option<IpAddr>, Window>>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    refused: u32,
}

impl Default for FailedAttempts {
    fn default() -> Self {
        FailedAttempts { max: DEFAULT_MAX, window: DEFAULT_WINDOW, counts: Mutex::new(HashMap::new()) }
    }
}

impl FailedAttempts {
    pub(crate) fn new(max: u32, window: Duration) -> Result<Self, ConsoleError> {
        if max == 0 || window.is_zero() {
            return Err(ConsoleError::InvalidLimit(
                "the limit on refused tokens needs at least 1 attempt and a window longer than zero".into(),
            ));
        }
        Ok(FailedAttempts { max, window, counts: Mutex::new(HashMap::new()) })
    }

    /// How long `addr` must wait before its next action is considered, if it is over the limit.
    pub(crate) fn blocked_for(&self, addr: Option<IpAddr>) -> Option<Duration> {
        let counts = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let window = counts.get(&addr)?;
        let left = self.window.checked_sub(window.started.elapsed())?;
        (window.refused >= self.max && !left.is_zero()).then_some(left)
    }

    /// Counts one refused token from `addr`.
    pub(crate) fn refused(&self, addr: Option<IpAddr>) {
        let mut counts = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        if counts.len() >= MAX_TRACKED && !counts.contains_key(&addr) {
            counts.retain(|_, w| now.duration_since(w.started) < self.window);
            if counts.len() >= MAX_TRACKED
                && let Some(oldest) = counts.iter().min_by_key(|(_, w)| w.started).map(|(k, _)| *k)
            {
                counts.remove(&oldest);
            }
        }
        let window = counts.entry(addr).or_insert(Window { started: now, refused: 0 });
        if now.duration_since(window.started) >= self.window {
            *window = Window { started: now, refused: 0 };
        }
        window.refused = window.refused.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_over_the_limit_waits_and_others_do_not() {
        let limit = FailedAttempts::new(2, Duration::from_secs(60)).unwrap_or_default();
        let (a, b) = (Some(IpAddr::from([10, 0, 0, 1])), Some(IpAddr::from([10, 0, 0, 2])));
        limit.refused(a);
        assert_eq!(limit.blocked_for(a), None, "one refusal is tolerated");
        limit.refused(a);
        assert!(limit.blocked_for(a).is_some_and(|d| d <= Duration::from_secs(60)));
        assert_eq!(limit.blocked_for(b), None, "per address");
        assert!(FailedAttempts::new(0, Duration::from_secs(1)).is_err());
        assert!(FailedAttempts::new(1, Duration::ZERO).is_err());
    }
}
