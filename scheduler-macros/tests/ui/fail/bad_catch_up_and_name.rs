use lock_scheduler::scheduled;

#[scheduled(cron = "0 0 2 * * *", catch_up = "always")]
async fn one() {}

#[scheduled(cron = "0 0 2 * * *", name = "")]
async fn two() {}

fn main() {}
