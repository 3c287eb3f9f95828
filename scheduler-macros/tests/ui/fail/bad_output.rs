use lock_scheduler::scheduled;

#[scheduled(cron = "0 0 2 * * *")]
async fn report() -> u32 {
    7
}

fn main() {}
