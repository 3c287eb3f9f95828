use lock_scheduler::scheduled;

#[scheduled(cron = "0 0 2 * * *", timezone = "UTC")]
async fn one() {}

#[scheduled(every = "30s", every = "1m")]
async fn two() {}

fn main() {}
