use lock_scheduler::scheduled;

#[scheduled(every = "1.5s")]
async fn fractional() {}

#[scheduled(every = "30s", offset = "30s")]
async fn offset_too_large() {}

#[scheduled(every = "30s", max_run_time = "0s")]
async fn zero_limit() {}

#[scheduled(cron = "0 0 2 * * *", offset = "5s")]
async fn offset_on_cron() {}

#[scheduled(every = "30s", zone = "Europe/Berlin")]
async fn zone_on_every() {}

fn main() {}
