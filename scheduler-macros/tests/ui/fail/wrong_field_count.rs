use lock_scheduler::scheduled;

// Five fields: the seconds are missing.
#[scheduled(cron = "0 2 * * *")]
async fn report() {}

fn main() {}
