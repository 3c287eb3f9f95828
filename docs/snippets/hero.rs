//! The README's first example: two annotated fns, never called here.

// The fns only show the attributes: their parameters are there for the key template and the
// extractor, and nothing calls them.
#![allow(unused_variables, dead_code)]

use lock_core::distributed_lock;
use lock_scheduler::{State, scheduled};

/// The application's mailer (stands in for a real one).
#[derive(Clone)]
pub struct Mailer;

// snippet: hero
#[distributed_lock(key = "lock:product:{product_id}", wait = "2s", fencing)]
async fn sell(product_id: u64, quantity: u32) -> anyhow::Result<()> {
    // one replica at a time per product; `lock_core::current()` gives the fencing token
    Ok(())
}

#[scheduled(cron = "0 0 2 * * *", zone = "Europe/Berlin")] // one replica runs it each night
async fn daily_report(State(mailer): State<Mailer>) -> anyhow::Result<()> {
    Ok(())
}
// end snippet
