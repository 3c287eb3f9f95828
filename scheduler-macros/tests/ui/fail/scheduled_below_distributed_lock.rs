use lock_scheduler::lock_core::distributed_lock;
use lock_scheduler::scheduled;

#[distributed_lock(key = "lock:report", skip_if_held, crate = "lock_scheduler::lock_core")]
#[scheduled(cron = "0 0 2 * * *")]
async fn report() {}

fn main() {}
