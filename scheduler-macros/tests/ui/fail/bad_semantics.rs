use lock_scheduler::scheduled;

#[scheduled(cron = "0 0 2 * * *", retry = "0 every 10s")]
async fn no_attempts() {}

#[scheduled(cron = "0 0 2 * * *", retry = "3 every 10s x0.5")]
async fn shrinking() {}

#[scheduled(cron = "0 0 2 * * *", retry = "3 every 1m max 10s")]
async fn max_below_base() {}

#[scheduled(cron = "0 0 2 * * *", pause_after_failures = "0")]
async fn never_pauses() {}

#[scheduled(cron = "0 0 2 * * *", overlap = "replace-me")]
async fn bad_overlap() {}

#[scheduled(cron = "0 0 2 * * *", jitter = "2d")]
async fn long_jitter() {}

#[scheduled(every = "1s", overlap = "allow")]
#[lock_scheduler::lock_core::distributed_lock(key = "lock:x", skip_if_held, crate = "lock_scheduler::lock_core")]
async fn own_lock() {}

fn main() {}
