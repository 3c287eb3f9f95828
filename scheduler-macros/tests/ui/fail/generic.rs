use lock_scheduler::scheduled;

#[scheduled(cron = "0 0 2 * * *")]
async fn report<T>() {}

fn main() {}
