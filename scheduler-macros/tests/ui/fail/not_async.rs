use lock_scheduler::scheduled;

#[scheduled(cron = "0 0 2 * * *")]
fn report() {}

fn main() {}
