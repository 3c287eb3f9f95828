use lock_scheduler::scheduled;

#[scheduled(cron = "0 0 2 * * *", zone = "Europe/Berln")]
async fn report() {}

fn main() {}
