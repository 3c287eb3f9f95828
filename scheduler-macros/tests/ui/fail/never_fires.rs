use lock_scheduler::scheduled;

#[scheduled(cron = "0 0 0 30 2 *")]
async fn leap() {}

fn main() {}
