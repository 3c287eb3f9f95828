use lock_scheduler::lock_core::distributed_lock;
use lock_scheduler::scheduled;

#[scheduled(cron = "0 0 2 * * *", lock = "lock:report", lease = "10s")]
#[distributed_lock(key = "lock:report", skip_if_held, crate = "lock_scheduler::lock_core")]
async fn report() {}

fn main() {}
