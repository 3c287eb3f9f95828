use lock_scheduler::{RunContext, scheduled};

#[scheduled(cron = "0 0 2 * * *")]
async fn report(run: RunContext, batch_size: u32) {
    let _ = (run, batch_size);
}

fn main() {}
