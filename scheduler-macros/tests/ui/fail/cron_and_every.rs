use lock_scheduler::scheduled;

#[scheduled(cron = "0 0 2 * * *", every = "30s")]
async fn report() {}

fn main() {}
