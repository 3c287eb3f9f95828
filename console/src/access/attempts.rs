//! The limits on refused tokens: per client address, and a budget shared by every address (so
//! that many source addresses, or a proxy's one, change nothing). A refused token past either
//! limit is answered 429 instead of 401 until its window ends.
//!
//! Only refusals are counted and only refusals are limited: a correct token is accepted before
//! any limit is looked at, so no amount of wrong guesses, from any address, can lock an operator
//! out. What keeps a token from being guessed is its strength (see
//! [`token_problem`](crate::access::token::token_problem)); the limits make guessing loud (each
//! refusal is audited, and reaching a limit is logged once per window) and tell a client that
//! keeps sending wrong tokens to stop.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::access::audit;
use crate::error::ConsoleError;

/// Refused tokens tolerated per address and window, by default.
const DEFAULT_MAX: u32 = 5;
/// Refused tokens tolerated from all addresses together per window, by default.
const DEFAULT_GLOBAL_MAX: u32 = 100;
/// The default window, of both limits.
const DEFAULT_WINDOW: Duration = Duration::from_secs(60);
/// Most addresses tracked at once: past it, lapsed windows are dropped, then the oldest, so
/// that a flood of addresses cannot grow the map without bound (the global budget still
/// counts every refusal).
const MAX_TRACKED: usize = 10_000;

/// Which limit a refusal went past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// The client address's own.
    Address,
    /// The budget of every address together.
    Global,
}

impl Limit {
    /// How the refusal's message names it.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Limit::Address => "too many refused tokens from this address",
            Limit::Global => "too many refused tokens from all addresses together",
        }
    }
}

/// A refusal past a limit: which one, and how long until its window ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OverLimit {
    pub(crate) limit: Limit,
    pub(crate) wait: Duration,
}

/// Refused tokens per client address (`None`: the address is unknown, e.g. a router served
/// without connect info; those share one count) and from all addresses together.
#[derive(Debug)]
pub(crate) struct FailedAttempts {
    max: u32,
    window: Duration,
    global_max: u32,
    global_window: Duration,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    per_address: HashMap<Option<IpAddr>, Window>,
    global: Option<Window>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    refused: u32,
}

impl Window {
    /// Counts one refusal in the window that holds `now` (a lapsed one starts anew); returns
    /// the count and how long the window has left.
    fn count(slot: &mut Option<Window>, now: Instant, length: Duration) -> (u32, Duration) {
        let window = match slot {
            Some(w) if now.duration_since(w.started) < length => w,
            _ => slot.insert(Window { started: now, refused: 0 }),
        };
        window.refused = window.refused.saturating_add(1);
        (window.refused, length.saturating_sub(now.duration_since(window.started)))
    }
}

impl Default for FailedAttempts {
    fn default() -> Self {
        FailedAttempts {
            max: DEFAULT_MAX,
            window: DEFAULT_WINDOW,
            global_max: DEFAULT_GLOBAL_MAX,
            global_window: DEFAULT_WINDOW,
            counts: Mutex::new(Counts::default()),
        }
    }
}

impl FailedAttempts {
    /// The limits as they are, with the per-address one set to `max` per `window`.
    pub(crate) fn with_address_limit(&self, max: u32, window: Duration) -> Result<Self, ConsoleError> {
        check(max, window, "per address")?;
        Ok(FailedAttempts { max, window, ..self.fresh() })
    }

    /// The limits as they are, with the global one set to `max` per `window`.
    pub(crate) fn with_global_limit(&self, max: u32, window: Duration) -> Result<Self, ConsoleError> {
        check(max, window, "from all addresses")?;
        Ok(FailedAttempts { global_max: max, global_window: window, ..self.fresh() })
    }

    fn fresh(&self) -> Self {
        FailedAttempts {
            max: self.max,
            window: self.window,
            global_max: self.global_max,
            global_window: self.global_window,
            counts: Mutex::new(Counts::default()),
        }
    }

    /// Counts one refused token from `addr`; past a limit, which one and how long its window
    /// has left (the per-address limit first: the more specific answer). The first refusal
    /// past a limit in its window is logged as a warning (the refusals themselves are audited
    /// one by one by the caller).
    pub(crate) fn refused(&self, addr: Option<IpAddr>) -> Option<OverLimit> {
        let mut counts = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let (global, global_left) = Window::count(&mut counts.global, now, self.global_window);
        let per_address = &mut counts.per_address;
        if per_address.len() >= MAX_TRACKED && !per_address.contains_key(&addr) {
            per_address.retain(|_, w| now.duration_since(w.started) < self.window);
            if per_address.len() >= MAX_TRACKED
                && let Some(oldest) = per_address.iter().min_by_key(|(_, w)| w.started).map(|(k, _)| *k)
            {
                per_address.remove(&oldest);
            }
        }
        let mut slot = per_address.get(&addr).copied();
        let (own, own_left) = Window::count(&mut slot, now, self.window);
        if let Some(window) = slot {
            per_address.insert(addr, window);
        }
        drop(counts);
        let over = if own > self.max {
            Some((OverLimit { limit: Limit::Address, wait: own_left }, own == self.max + 1))
        } else if global > self.global_max {
            Some((OverLimit { limit: Limit::Global, wait: global_left }, global == self.global_max + 1))
        } else {
            None
        };
        if let Some((over, first)) = over
            && first
        {
            let client = addr.map_or_else(|| "unknown".to_owned(), |a| a.to_string());
            tracing::warn!(
                target: audit::TARGET,
                client = %client,
                limit = ?over.limit,
                max = if over.limit == Limit::Address { self.max } else { self.global_max },
                window = ?if over.limit == Limit::Address { self.window } else { self.global_window },
                "console: refused-token limit reached; further refused tokens get 429 until the window ends \
                 (correct tokens are still accepted)"
            );
        }
        over.map(|(over, _)| over)
    }
}

fn check(max: u32, window: Duration, which: &str) -> Result<(), ConsoleError> {
    if max == 0 || window.is_zero() {
        return Err(ConsoleError::InvalidLimit(format!(
            "the limit on refused tokens {which} needs at least 1 attempt and a window longer than zero"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: u32, global: u32) -> FailedAttempts {
        let window = Duration::from_secs(60);
        FailedAttempts::default()
            .with_address_limit(max, window)
            .and_then(|l| l.with_global_limit(global, window))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_address_past_its_limit_is_told_and_others_are_not() {
        let limit = limits(2, 100);
        let (a, b) = (Some(IpAddr::from([10, 0, 0, 1])), Some(IpAddr::from([10, 0, 0, 2])));
        assert_eq!(limit.refused(a), None, "one refusal is tolerated");
        assert_eq!(limit.refused(a), None, "two are");
        let over = limit.refused(a).map(|o| (o.limit, o.wait <= Duration::from_secs(60)));
        assert_eq!(over, Some((Limit::Address, true)));
        assert_eq!(limit.refused(b), None, "per address");
    }

    #[test]
    fn the_global_budget_counts_every_address() {
        let limit = limits(5, 10);
        let over: Vec<Option<Limit>> =
            (0..12u8).map(|i| limit.refused(Some(IpAddr::from([127, 0, 1, i]))).map(|o| o.limit)).collect();
        assert!(over[..10].iter().all(Option::is_none), "{over:?}");
        assert_eq!(over[10..], [Some(Limit::Global), Some(Limit::Global)]);
    }

    #[test]
    fn limits_need_room() {
        let defaults = FailedAttempts::default();
        assert!(defaults.with_address_limit(0, Duration::from_secs(1)).is_err());
        assert!(defaults.with_address_limit(1, Duration::ZERO).is_err());
        assert!(defaults.with_global_limit(0, Duration::from_secs(1)).is_err());
    }
}
