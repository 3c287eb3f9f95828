use lock_scheduler::scheduled;

#[scheduled(cron = "0 0 25 * * *")]
async fn report() {}

fn main() {}
